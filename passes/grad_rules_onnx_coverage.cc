// Gradient rules of the less common ops real exporters emit: the Elu/HardSigmoid family and other
// activations, trigonometric and hyperbolic functions, variadic Sum/Mean, CastLike, the remaining
// Reduce* ops, Trilu, Einsum and the ND/Elements gather-scatter pairs. Piecewise-constant ops
// (Sign, Floor, Ceil, Round, Hardmax) are registered with no differentiable input: their gradient
// is zero, so paths through them are cut rather than reported as unsupported.
// Each rule: (node, dY) -> dX, in the notation of the rule comments (Y = forward output).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/einsum.h"
#include "graph/ops/reduce_params.h"
#include "passes/autodiff.h"
#include "passes/grad_reduce.h"

namespace mixtrain {
namespace {

using V = Value*;

const Shape& OutShape(GradContext& c) { return c.Y(0)->shape; }
int64_t Rank(const Value* v) { return v->shape.rank_known ? v->shape.rank() : -1; }

// --- activations --------------------------------------------------------------------------------

// dX = dY * (0 if X < -3, 1 if X > 3, X/3 + 1/2 between), X/3 divided as PyTorch does: a
// gradient that is zero in exact arithmetic (a bias before a train-mode BatchNorm) is then the
// same rounding noise in both.
absl::Status HardSwishGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0);
  const DType t = x->dtype;
  V mid = b.Mul(c.dY(0), b.Add(b.Div(x, b.Scalar(3, t)), b.Scalar(0.5, t)));
  V g = b.Op("Where", {b.Op("Greater", {x, b.Scalar(3, t)}), c.dY(0), mid});
  c.SetGrad(0, b.MaskDrop(b.Op("Less", {x, b.Scalar(-3, t)}), g));
  return absl::OkStatus();
}

// dX = alpha * dY where 0 < Y < 1 (the linear piece), else 0
absl::Status HardSigmoidGrad(GradContext& c) {
  auto& b = c.b();
  V y = c.Y(0);
  const DType t = y->dtype;
  V linear = b.Op("And", {b.Op("Greater", {y, b.Scalar(0, t)}), b.Op("Less", {y, b.Scalar(1, t)})});
  V g = b.Mul(c.dY(0), b.Scalar(c.node().attr_float("alpha", 0.2f), t));
  c.SetGrad(0, b.MaskKeep(linear, g));
  return absl::OkStatus();
}

// Y = X * tanh(softplus(X)): dX = dY * (T + X * sigmoid(X) * (1 - T^2)), T = tanh(softplus(X))
absl::Status MishGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0);
  V tsp = b.Op("Tanh", {b.Op("Softplus", {x})});
  V dt = b.Sub(b.Scalar(1, x->dtype), b.Mul(tsp, tsp));
  V slope = b.Add(tsp, b.Mul(b.Mul(x, b.Op("Sigmoid", {x})), dt));
  c.SetGrad(0, b.Mul(c.dY(0), slope));
  return absl::OkStatus();
}

// dX = scale * dY where X > 0, else dY * (Y + tail) (Elu, Selu: d/dx of a*(e^x - 1) is Y + a)
absl::Status ExpLinearGrad(GradContext& c, double scale, double tail) {
  auto& b = c.b();
  V x = c.X(0);
  const DType t = x->dtype;
  V pos = scale == 1.0 ? c.dY(0) : b.Mul(c.dY(0), b.Scalar(scale, t));
  V neg = b.Mul(c.dY(0), b.Add(c.Y(0), b.Scalar(tail, t)));
  c.SetGrad(0, b.Op("Where", {b.Op("Greater", {x, b.Scalar(0, t)}), pos, neg}));
  return absl::OkStatus();
}
absl::Status EluGrad(GradContext& c) {
  return ExpLinearGrad(c, 1.0, c.node().attr_float("alpha", 1.0f));
}
absl::Status SeluGrad(GradContext& c) {
  const double alpha = c.node().attr_float("alpha", 1.67326319217681884765625f);
  const double gamma = c.node().attr_float("gamma", 1.05070102214813232421875f);
  return ExpLinearGrad(c, gamma, gamma * alpha);
}

// Y = alpha * (exp(X / alpha) - 1) for X <= 0: dX = dY where X > 0, else dY * (Y / alpha + 1)
absl::Status CeluGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0);
  const DType t = x->dtype;
  const double alpha = c.node().attr_float("alpha", 1.0f);
  if (alpha == 0.0) return c.Error("alpha must not be 0");
  V neg = b.Mul(c.dY(0), b.Add(b.Mul(c.Y(0), b.Scalar(1.0 / alpha, t)), b.Scalar(1, t)));
  c.SetGrad(0, b.Op("Where", {b.Op("Greater", {x, b.Scalar(0, t)}), c.dY(0), neg}));
  return absl::OkStatus();
}

// dX = dY where X > alpha
absl::Status ThresholdedReluGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0);
  V above = b.Op("Greater", {x, b.Scalar(c.node().attr_float("alpha", 1.0f), x->dtype)});
  c.SetGrad(0, b.MaskKeep(above, c.dY(0)));
  return absl::OkStatus();
}

// dX = dY where |X| > lambd (the shifted pieces; bias is a constant offset)
absl::Status ShrinkGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0);
  V lambd = b.Scalar(c.node().attr_float("lambd", 0.5f), x->dtype);
  c.SetGrad(0, b.MaskKeep(b.Op("Greater", {b.Op("Abs", {x}), lambd}), c.dY(0)));
  return absl::OkStatus();
}

// dX = dY / (1 + |X|)^2
absl::Status SoftsignGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0);
  V d = b.Add(b.Scalar(1, x->dtype), b.Op("Abs", {x}));
  c.SetGrad(0, b.Div(c.dY(0), b.Mul(d, d)));
  return absl::OkStatus();
}

// Y = X where X > 0, else slope * X (slope broadcast to X):
// dX = dY where X > 0, else slope * dY; dSlope = sum over the broadcast of dY * X where X <= 0
absl::Status PReluGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0), slope = c.X(1);
  V pos = b.Op("Greater", {x, b.Scalar(0, x->dtype)});
  if (c.needs(0))
    MT_RETURN_IF_ERROR(c.SetGradSumTo(
        0, b.Op("Where", {pos, c.dY(0), b.Mul(c.dY(0), slope)}), OutShape(c)));
  if (c.needs(1))
    MT_RETURN_IF_ERROR(c.SetGradSumTo(1, b.MaskDrop(pos, b.Mul(c.dY(0), x)), OutShape(c)));
  return absl::OkStatus();
}

// --- trigonometric and hyperbolic ---------------------------------------------------------------

// dX = dY * cos(X)
absl::Status SinGrad(GradContext& c) {
  c.SetGrad(0, c.b().Mul(c.dY(0), c.b().Op("Cos", {c.X(0)})));
  return absl::OkStatus();
}

// dX = -dY * sin(X)
absl::Status CosGrad(GradContext& c) {
  c.SetGrad(0, c.b().Neg(c.b().Mul(c.dY(0), c.b().Op("Sin", {c.X(0)}))));
  return absl::OkStatus();
}

// dX = dY * (1 + Y^2)
absl::Status TanGrad(GradContext& c) {
  auto& b = c.b();
  V y = c.Y(0);
  c.SetGrad(0, b.Mul(c.dY(0), b.Add(b.Scalar(1, y->dtype), b.Mul(y, y))));
  return absl::OkStatus();
}

// dX = dY * cosh(X)
absl::Status SinhGrad(GradContext& c) {
  c.SetGrad(0, c.b().Mul(c.dY(0), c.b().Op("Cosh", {c.X(0)})));
  return absl::OkStatus();
}

// dX = dY * sinh(X)
absl::Status CoshGrad(GradContext& c) {
  c.SetGrad(0, c.b().Mul(c.dY(0), c.b().Op("Sinh", {c.X(0)})));
  return absl::OkStatus();
}

// The inverse functions' derivatives are all sign * 1 / f(X^2) with f(s) = s * a + k, taken
// under a square root for Asin/Acos/Asinh/Acosh:
//   Asin 1/sqrt(1 - X^2)   Acos -1/sqrt(1 - X^2)   Asinh 1/sqrt(X^2 + 1)   Acosh 1/sqrt(X^2 - 1)
//   Atan 1/(1 + X^2)       Atanh 1/(1 - X^2)
absl::Status InverseGrad(GradContext& c, double a, double k, bool root, bool negate) {
  auto& b = c.b();
  V x = c.X(0);
  const DType t = x->dtype;
  V d = b.Add(b.Mul(b.Mul(x, x), b.Scalar(a, t)), b.Scalar(k, t));
  if (root) d = b.Op("Sqrt", {d});
  V g = b.Div(c.dY(0), d);
  c.SetGrad(0, negate ? b.Neg(g) : g);
  return absl::OkStatus();
}
absl::Status AsinGrad(GradContext& c) { return InverseGrad(c, -1, 1, true, false); }
absl::Status AcosGrad(GradContext& c) { return InverseGrad(c, -1, 1, true, true); }
absl::Status AsinhGrad(GradContext& c) { return InverseGrad(c, 1, 1, true, false); }
absl::Status AcoshGrad(GradContext& c) { return InverseGrad(c, 1, -1, true, false); }
absl::Status AtanGrad(GradContext& c) { return InverseGrad(c, 1, 1, false, false); }
absl::Status AtanhGrad(GradContext& c) { return InverseGrad(c, -1, 1, false, false); }

// Never called: rows with no differentiable input (zero gradient almost everywhere).
absl::Status NoGrad(GradContext&) { return absl::OkStatus(); }

// --- variadic and casts -------------------------------------------------------------------------

// dX_i = dY (Sum) or dY / n (Mean), each summed over where X_i was broadcast
absl::Status SumMeanGrad(GradContext& c) {
  auto& b = c.b();
  const size_t n = c.node().num_inputs();
  V g = c.dY(0);
  if (c.node().op_type() == "Mean" && n > 1) g = b.Mul(g, b.Scalar(1.0 / n, g->dtype));
  for (size_t i = 0; i < n; ++i)
    if (c.needs(i)) MT_RETURN_IF_ERROR(c.SetGradSumTo(i, g, OutShape(c)));
  return absl::OkStatus();
}

// dX = Cast(dY, X's type); the type-giving input carries none
absl::Status CastLikeGrad(GradContext& c) {
  c.SetGrad(0, c.b().Cast(c.dY(0), c.X(0)->dtype));
  return absl::OkStatus();
}

// --- reductions ---------------------------------------------------------------------------------

// dX = dY where X equals the min (every tied element gets dY, as ReduceMax's rule)
absl::Status ReduceMinGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  c.SetGrad(0, b.MaskKeep(b.Op("Equal", {c.X(0), red.y_keep}), red.dy_keep));
  return absl::OkStatus();
}

// dX = dY * sign(X)
absl::Status ReduceL1Grad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  c.SetGrad(0, c.b().Mul(red.dy_keep, c.b().Op("Sign", {c.X(0)})));
  return absl::OkStatus();
}

// dX = dY * X / Y, 0 where Y == 0 (PyTorch's subgradient of the norm at 0)
absl::Status ReduceL2Grad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  V zero = b.Op("Equal", {red.y_keep, b.Scalar(0, red.y_keep->dtype)});
  c.SetGrad(0, b.MaskDrop(zero, b.Mul(red.dy_keep, b.Div(c.X(0), red.y_keep))));
  return absl::OkStatus();
}

// dX = dY * exp(X - Y) (softmax over the reduced axes)
absl::Status ReduceLogSumExpGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  c.SetGrad(0, b.Mul(red.dy_keep, b.Op("Exp", {b.Sub(c.X(0), red.y_keep)})));
  return absl::OkStatus();
}

// Y = log(sum X): dX = dY / exp(Y)
absl::Status ReduceLogSumGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  c.SetGrad(0, b.Div(red.dy_keep, b.Op("Exp", {red.y_keep})));
  return absl::OkStatus();
}

// dX = dY * Y / X. Not defined where X == 0 (the product of the others would need an exclusive
// product scan); exporters emit ReduceProd on shapes and masks, rarely on trained values.
absl::Status ReduceProdGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  c.SetGrad(0, b.Mul(red.dy_keep, b.Div(red.y_keep, c.X(0))));
  return absl::OkStatus();
}

// --- triangles and contractions -----------------------------------------------------------------

// dX = Trilu(dY) with the same k and upper: the kept triangle passes its gradient through
absl::Status TriluGrad(GradContext& c) {
  std::vector<V> ins{c.dY(0)};
  if (c.X(1)) ins.push_back(c.X(1));
  c.SetGrad(0, c.b().Op("Trilu", ins, {Attribute::Int("upper", c.node().attr_int("upper", 1))}));
  return absl::OkStatus();
}

// The equation of an Einsum node with every label a letter: ellipsis dims get unused letters,
// and an ellipsis dim of size 1 broadcast against a larger one gets a letter of its own (a
// size-1 label summed over is the same broadcast), so the rule below needs no broadcasting.
struct LetterEquation {
  std::vector<std::string> inputs;
  std::string output;
};
absl::StatusOr<LetterEquation> Letters(GradContext& c) {
  // The labels' structure first (sizes all 1, so run-time sizes never conflict), then the sizes
  // of the ellipsis dims, the only ones the rule needs.
  std::vector<std::vector<int64_t>> ones;
  for (size_t i = 0; i < c.node().num_inputs(); ++i) {
    if (c.X(i) == nullptr || Rank(c.X(i)) < 0) return c.Error("input ranks must be known statically");
    ones.emplace_back(Rank(c.X(i)), 1);
  }
  auto plan = einsum::Parse(c.node().attr_string("equation", ""), ones);
  if (!plan.ok()) return c.Error(std::string(plan.status().message()));
  std::map<int, int64_t> size;  // of each ellipsis label, broadcast over the inputs
  for (size_t i = 0; i < plan->inputs.size(); ++i) {
    for (size_t d = 0; d < plan->inputs[i].size(); ++d) {
      const int l = plan->inputs[i][d];
      if (l < einsum::kEllipsisBase) continue;
      const Dim& dim = c.X(i)->shape.dims[d];
      if (!dim.known()) return c.Error("dims covered by an ellipsis must be known statically");
      size[l] = std::max(size[l], dim.value);
    }
  }
  std::set<char> used;
  for (int l : plan->labels)
    if (l < einsum::kEllipsisBase) used.insert(static_cast<char>(l));
  std::map<int, char> letter;
  auto fresh = [&](int label) -> absl::Status {
    for (char ch : std::string("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")) {
      if (used.insert(ch).second) {
        letter[label] = ch;
        return absl::OkStatus();
      }
    }
    return c.Error("the equation uses too many labels to name the ellipsis dims");
  };
  for (int l : plan->labels) {
    if (l < einsum::kEllipsisBase) letter[l] = static_cast<char>(l);
    else MT_RETURN_IF_ERROR(fresh(l));
  }
  LetterEquation eq;
  int own = 2 * einsum::kEllipsisBase;  // labels of broadcast size-1 dims, one per dim
  for (size_t i = 0; i < plan->inputs.size(); ++i) {
    std::string term;
    for (size_t d = 0; d < plan->inputs[i].size(); ++d) {
      const int l = plan->inputs[i][d];
      if (l >= einsum::kEllipsisBase && c.X(i)->shape.dims[d].value == 1 && size[l] != 1) {
        MT_RETURN_IF_ERROR(fresh(own));
        term += letter[own++];
        continue;
      }
      term += letter[l];
    }
    eq.inputs.push_back(std::move(term));
  }
  for (int l : plan->output) eq.output += letter[l];
  return eq;
}

// dX_i = Einsum(dY, X_j for j != i) onto X_i's labels. A label of X_i in no other term was
// summed over by the forward op, so dX_i is broadcast back along it. A label repeated within X_i
// (a diagonal) would need a scatter onto the diagonal and is refused.
absl::Status EinsumGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(LetterEquation eq, Letters(c));
  auto& b = c.b();
  const size_t n = eq.inputs.size();
  for (size_t i = 0; i < n; ++i) {
    if (!c.needs(i)) continue;
    const std::string& mine = eq.inputs[i];
    std::string others = eq.output;
    std::vector<V> ins{c.dY(0)};
    std::string lhs = eq.output;
    for (size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      others += eq.inputs[j];
      ins.push_back(c.X(j));
      absl::StrAppend(&lhs, ",", eq.inputs[j]);
    }
    std::string kept;
    std::vector<int64_t> summed;  // X_i's dims summed over by the forward op
    for (size_t d = 0; d < mine.size(); ++d) {
      if (std::count(mine.begin(), mine.end(), mine[d]) > 1)
        return c.Error(absl::StrCat("operand ", i, " repeats label '", mine.substr(d, 1),
                                    "' (a diagonal); its gradient is not supported"));
      if (others.find(mine[d]) == std::string::npos) summed.push_back(static_cast<int64_t>(d));
      else kept += mine[d];
    }
    V g = c.dY(0);
    if (ins.size() > 1 || kept != eq.output)
      g = b.Op("Einsum", ins, {Attribute::String("equation", absl::StrCat(lhs, "->", kept))});
    if (!summed.empty()) g = b.ExpandLike(b.Unsqueeze(g, summed), c.X(i));
    c.SetGrad(i, g);
  }
  return absl::OkStatus();
}

// --- depth and space ----------------------------------------------------------------------------

// Both ops only permute elements, so a gradient is the inverse permutation of dY. SpaceToDepth is
// the inverse of DepthToSpace's DCR mode; CRD mode is Reshape [N, C, b, b, H, W], Transpose
// (0, 1, 4, 2, 5, 3), Reshape, undone step by step.
absl::Status DepthToSpaceGrad(GradContext& c) {
  auto& b = c.b();
  const int64_t bs = c.node().attr_int("blocksize", 0);
  const Attribute block = Attribute::Int("blocksize", bs);
  if (c.node().attr_string("mode", "DCR") != "CRD") {
    c.SetGrad(0, b.Op("SpaceToDepth", {c.dY(0)}, {block}));
    return absl::OkStatus();
  }
  const Shape& xs = c.X(0)->shape;
  if (Rank(c.X(0)) != 4 || !xs.dims[2].known() || !xs.dims[3].known())
    return c.Error("mode CRD needs an input of rank 4 with static height and width");
  V g = b.Op("Reshape", {c.dY(0), b.Ints({0, 0, xs.dims[2].value, bs, xs.dims[3].value, bs})});
  g = b.Op("Transpose", {g}, {Attribute::Ints("perm", {0, 1, 3, 5, 2, 4})});
  c.SetGrad(0, b.ReshapeLike(g, c.X(0)));
  return absl::OkStatus();
}
absl::Status SpaceToDepthGrad(GradContext& c) {
  c.SetGrad(0, c.b().Op("DepthToSpace", {c.dY(0)},
                        {Attribute::Int("blocksize", c.node().attr_int("blocksize", 0)),
                         Attribute::String("mode", "DCR")}));
  return absl::OkStatus();
}

// --- gather and scatter -------------------------------------------------------------------------

// dX = ScatterND(zeros like X, indices, dY, reduction=add): repeated index tuples accumulate.
// ScatterND's reduction is standard from opset 16; our kernel reads it at any opset. ScatterND
// has no batch_dims, so batch_dims > 0 takes ai.mixtrain.GatherNDGrad(dY, indices, X).
absl::Status GatherNDGrad(GradContext& c) {
  auto& b = c.b();
  const int64_t batch_dims = c.node().attr_int("batch_dims", 0);
  if (batch_dims != 0) {
    c.SetGrad(0, b.Op("GatherNDGrad", {c.dY(0), c.X(1), c.X(0)},
                      {Attribute::Int("batch_dims", batch_dims)}, "ai.mixtrain"));
    return absl::OkStatus();
  }
  c.SetGrad(0, b.Op("ScatterND", {b.ZerosLike(c.X(0)), c.X(1), c.dY(0)},
                    {Attribute::String("reduction", "add")}));
  return absl::OkStatus();
}

// dX = ScatterElements(zeros like X, indices, dY, axis, reduction=add)
absl::Status GatherElementsGrad(GradContext& c) {
  auto& b = c.b();
  c.SetGrad(0, b.Op("ScatterElements", {b.ZerosLike(c.X(0)), c.X(1), c.dY(0)},
                    {Attribute::Int("axis", c.node().attr_int("axis", 0)),
                     Attribute::String("reduction", "add")}));
  return absl::OkStatus();
}

// Scatter(data, indices, updates) for ScatterND and ScatterElements (and its old name Scatter):
//   reduction none: dData = dY with the overwritten places zeroed, dUpdates = Gather(dY, indices)
//   reduction add:  dData = dY,                                    dUpdates = Gather(dY, indices)
// With repeated indices and reduction none, every update of a place gets that place's gradient.
absl::Status ScatterGrad(GradContext& c, const char* gather, std::vector<Attribute> attrs) {
  auto& b = c.b();
  const std::string reduction = c.node().attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add")
    return c.Error(absl::StrCat("reduction '", reduction, "' is not supported"));
  if (c.needs(0)) {
    if (reduction == "add") {
      c.SetGrad(0, c.dY(0));
    } else {
      c.SetGrad(0, b.Op(c.node().op_type(), {c.dY(0), c.X(1), b.ZerosLike(c.X(2))}, attrs));
    }
  }
  if (c.needs(2)) c.SetGrad(2, b.Op(gather, {c.dY(0), c.X(1)}, attrs));
  return absl::OkStatus();
}
absl::Status ScatterNDGrad(GradContext& c) { return ScatterGrad(c, "GatherND", {}); }
absl::Status ScatterElementsGrad(GradContext& c) {
  return ScatterGrad(c, "GatherElements", {Attribute::Int("axis", c.node().attr_int("axis", 0))});
}

// TopK values: dX = ScatterElements(zeros like X, indices, dY_values, axis) (indices are distinct)
absl::Status TopKGrad(GradContext& c) {
  auto& b = c.b();
  if (c.dY(0) == nullptr) return absl::OkStatus();
  c.SetGrad(0, b.Op("ScatterElements", {b.ZerosLike(c.X(0)), c.Y(1), c.dY(0)},
                    {Attribute::Int("axis", c.node().attr_int("axis", -1))}));
  return absl::OkStatus();
}

// dX = dY where X equals the max over the spatial dims (all of them, for ties)
absl::Status GlobalMaxPoolGrad(GradContext& c) {
  auto& b = c.b();
  c.SetGrad(0, b.MaskKeep(b.Op("Equal", {c.X(0), c.Y(0)}), b.ExpandLike(c.dY(0), c.X(0))));
  return absl::OkStatus();
}

// Y = X / n, n = ||X||_p along axis (keepdims):
//   p = 2: dX = (dY - Y * sum(dY * Y)) / n
//   p = 1: dX = (dY - sign(X) * sum(dY * Y)) / n
absl::Status LpNormalizationGrad(GradContext& c) {
  auto& b = c.b();
  const int64_t p = c.node().attr_int("p", 2);
  if (p != 1 && p != 2) return c.Error(absl::StrCat("p=", p, " is not supported (1 or 2)"));
  const int64_t axis = c.node().attr_int("axis", -1);
  V x = c.X(0), y = c.Y(0), dy = c.dY(0);
  V n = p == 2 ? b.Op("ReduceL2", {x}, {Attribute::Ints("axes", {axis}), Attribute::Int("keepdims", 1)})
               : b.Op("ReduceL1", {x}, {Attribute::Ints("axes", {axis}), Attribute::Int("keepdims", 1)});
  if (c.opset() >= 18) {  // axes became an input
    V ax = b.Ints({axis});
    n = b.Op(p == 2 ? "ReduceL2" : "ReduceL1", {x, ax}, {Attribute::Int("keepdims", 1)});
  }
  V dot = b.ReduceSum(b.Mul(dy, y), {axis}, true);
  V dir = p == 2 ? y : b.Op("Sign", {x});
  c.SetGrad(0, b.Div(b.Sub(dy, b.Mul(dir, dot)), n));
  return absl::OkStatus();
}

MT_REGISTER_GRAD_RULES(onnx_coverage, {
    {"TopK", "", TopKGrad, Inputs({0})},
    {"GlobalMaxPool", "", GlobalMaxPoolGrad},
    {"LpNormalization", "", LpNormalizationGrad},
    {"HardSwish", "", HardSwishGrad},
    {"HardSigmoid", "", HardSigmoidGrad},
    {"Mish", "", MishGrad},
    {"Elu", "", EluGrad},
    {"Selu", "", SeluGrad},
    {"Celu", "", CeluGrad},
    {"ThresholdedRelu", "", ThresholdedReluGrad},
    {"Shrink", "", ShrinkGrad},
    {"Softsign", "", SoftsignGrad},
    {"PRelu", "", PReluGrad},
    {"Sin", "", SinGrad},
    {"Cos", "", CosGrad},
    {"Tan", "", TanGrad},
    {"Asin", "", AsinGrad},
    {"Acos", "", AcosGrad},
    {"Atan", "", AtanGrad},
    {"Sinh", "", SinhGrad},
    {"Cosh", "", CoshGrad},
    {"Asinh", "", AsinhGrad},
    {"Acosh", "", AcoshGrad},
    {"Atanh", "", AtanhGrad},
    {"Sign", "", NoGrad, 0},
    {"Floor", "", NoGrad, 0},
    {"Ceil", "", NoGrad, 0},
    {"Round", "", NoGrad, 0},
    {"Hardmax", "", NoGrad, 0},
    {"Sum", "", SumMeanGrad},
    {"Mean", "", SumMeanGrad},
    {"CastLike", "", CastLikeGrad, Inputs({0})},
    {"ReduceMin", "", ReduceMinGrad, Inputs({0})},
    {"ReduceL1", "", ReduceL1Grad, Inputs({0})},
    {"ReduceL2", "", ReduceL2Grad, Inputs({0})},
    {"ReduceLogSumExp", "", ReduceLogSumExpGrad, Inputs({0})},
    {"ReduceLogSum", "", ReduceLogSumGrad, Inputs({0})},
    {"ReduceProd", "", ReduceProdGrad, Inputs({0})},
    {"Trilu", "", TriluGrad, Inputs({0})},
    {"Einsum", "", EinsumGrad},
    {"DepthToSpace", "", DepthToSpaceGrad},
    {"SpaceToDepth", "", SpaceToDepthGrad},
    {"GatherND", "", GatherNDGrad, Inputs({0})},
    {"GatherElements", "", GatherElementsGrad, Inputs({0})},
    {"ScatterND", "", ScatterNDGrad, Inputs({0, 2})},
    {"ScatterElements", "", ScatterElementsGrad, Inputs({0, 2})},
    {"Scatter", "", ScatterElementsGrad, Inputs({0, 2})},
});

}  // namespace
}  // namespace mixtrain
