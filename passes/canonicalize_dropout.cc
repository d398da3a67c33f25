// Exporters' random-mask dropout as one Dropout node (see canonicalize_rules.h). torch's dynamo
// exporter writes an in-place nn.Dropout in training mode (torchvision's classifiers) as
// bernoulli: Less(RandomUniformLike(s), q) cast to float, divided by q, times x; torch's own
// dropout decomposition as x * (rand < 1 - p) * (1 / (1 - p)). As a Dropout node it draws from
// our seeded generator (passes/train_mode.cc), its gradient goes through the mask it keeps, and
// evaluation and export switch it off, none of which a RandomUniformLike would do.
//
// The rule proves the dropout: the uniform draw over [0, 1) has x's shape, the comparison keeps
// an element with probability q, the mask is cast to x's float type, and the product of every
// scalar on the path from the mask to the result is 1/q, with x multiplied in exactly once.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "passes/canonicalize_rules.h"
#include "passes/parameters.h"

namespace mixtrain {
namespace {

bool IsOnnx(const Node& n, const char* op) { return n.domain().empty() && n.op_type() == op; }

// A one-element constant's value.
std::optional<double> ScalarOf(const Value* v, const ConstantLookup& constant) {
  const Tensor* t = v == nullptr ? nullptr : constant(v);
  if (t == nullptr || t->numel() != 1 || !IsFloat(t->dtype())) return std::nullopt;
  return t->GetDouble(0);
}

// The probability that comparison `cmp` of the draw `r` with a constant keeps an element:
// r < c and c > r keep with probability c, r > c and c < r with 1 - c (<= and >= alike: a draw
// equals c with probability 0).
std::optional<double> KeepProbability(const Node& cmp, const Value* r, const ConstantLookup& constant) {
  if (!cmp.domain().empty() || cmp.num_inputs() != 2) return std::nullopt;
  const std::string& op = cmp.op_type();
  const bool less = op == "Less" || op == "LessOrEqual";
  const bool greater = op == "Greater" || op == "GreaterOrEqual";
  if (!less && !greater) return std::nullopt;
  const bool r_first = cmp.input(0) == r;
  if (!r_first && cmp.input(1) != r) return std::nullopt;
  std::optional<double> c = ScalarOf(cmp.input(r_first ? 1 : 0), constant);
  if (!c) return std::nullopt;
  const bool keep_below = less == r_first;  // r < c
  return keep_below ? *c : 1.0 - *c;
}

// Every use of `y` reads Dropout(x, 1 - q, training_mode = true) instead.
bool ReplaceWithDropout(Graph& g, Value* x, Value* v, double q) {
  if (g.IsGraphOutput(v)) return false;
  const std::string base = v->producer->name();
  Value* ratio = g.AddInitializer(g.UniqueName(base + "/ratio"), Tensor::Scalar(static_cast<float>(1.0 - q)));
  ratio->metadata[kFoldedMetadata] = kPassConstant;
  Tensor on(DType::kBool, {});
  *on.data_as<uint8_t>() = 1;
  Value* training = g.AddInitializer(g.UniqueName(base + "/training_mode"), std::move(on));
  Node* drop = g.AddNode("Dropout", {x, ratio, training}, 1, g.UniqueName(base + "/Dropout"));
  drop->output(0)->dtype = v->dtype;
  drop->output(0)->shape = v->shape;
  g.MoveBefore(drop, v->producer);
  g.ReplaceAllUsesWith(v, drop->output(0));
  return true;
}

// Where(mask, x * s, 0) (or x / s): the kept elements scaled, the others 0.
bool WhereMaskToDropout(Graph& g, Node& where, const Value* mask, const Value* r, double q,
                        const ConstantLookup& constant) {
  Value* y = where.output(0);
  Value* a = where.input(1);
  if (where.input(0) != mask || a == mask || where.input(2) == mask || y == nullptr || a == nullptr || a->producer == nullptr || a->consumers.size() != 1 ||
      g.IsGraphOutput(a) || !(y->shape == r->shape))
    return false;
  std::optional<double> zero = ScalarOf(where.input(2), constant);
  if (!zero || *zero != 0.0) return false;
  Node* scale = a->producer;
  const bool mul = IsOnnx(*scale, "Mul"), div = IsOnnx(*scale, "Div");
  if ((!mul && !div) || scale->num_inputs() != 2) return false;
  std::optional<double> s = ScalarOf(scale->input(1), constant);
  Value* x = scale->input(0);
  if (!s && mul) {
    s = ScalarOf(scale->input(0), constant);
    x = scale->input(1);
  }
  if (!s || *s == 0.0 || !(x->shape == r->shape) || x->dtype != y->dtype) return false;
  const double factor = div ? 1.0 / *s : *s;
  if (std::fabs(factor * q - 1.0) > 1e-6) return false;
  return ReplaceWithDropout(g, x, y, q);
}

}  // namespace

bool RandomMaskToDropout(Graph& g, Node* n, const ConstantLookup& constant) {
  if (!IsOnnx(*n, "RandomUniformLike") || g.opset("") < 12) return false;
  if (n->attr_float("low", 0.0f) != 0.0f || n->attr_float("high", 1.0f) != 1.0f) return false;
  Value* r = n->output(0);
  if (r == nullptr || r->consumers.size() != 1 || g.IsGraphOutput(r) || !r->shape.rank_known) return false;
  Node* cmp = r->consumers[0];
  const std::optional<double> q = KeepProbability(*cmp, r, constant);
  if (!q || !(*q > 0.0 && *q <= 1.0)) return false;
  Value* mask = cmp->output(0);
  if (mask == nullptr || mask->consumers.size() != 1 || g.IsGraphOutput(mask)) return false;
  if (IsOnnx(*mask->consumers[0], "Where")) return WhereMaskToDropout(g, *mask->consumers[0], mask, r, *q, constant);
  // The mask, cast to a float type.
  Node* cast = mask->consumers[0];
  if (!IsOnnx(*cast, "Cast") || cast->output(0) == nullptr || !IsFloat(cast->output(0)->dtype)) return false;
  // Walk the single-reader chain of Mul/Div by scalars and by x, up to the first point where x
  // has been multiplied in and the scalars make 1/q.
  Value* v = cast->output(0);
  Value* x = nullptr;
  double scale = 1.0;
  for (;;) {
    if (v->consumers.size() != 1 || g.IsGraphOutput(v)) return false;
    Node* c = v->consumers[0];
    const bool mul = IsOnnx(*c, "Mul"), div = IsOnnx(*c, "Div");
    if ((!mul && !div) || c->num_inputs() != 2 || c->output(0) == nullptr) return false;
    Value* other = c->input(0) == v ? c->input(1) : c->input(0);
    if (other == v || (div && c->input(0) != v)) return false;  // v * v, or s / v
    if (std::optional<double> s = ScalarOf(other, constant)) {
      if (*s == 0.0) return false;
      scale = div ? scale / *s : scale * *s;
    } else if (mul && x == nullptr && other->dtype == v->dtype && other->shape == r->shape) {
      x = other;
    } else {
      return false;
    }
    v = c->output(0);
    if (x != nullptr && std::fabs(scale * *q - 1.0) <= 1e-6) break;
  }
  return ReplaceWithDropout(g, x, v, *q);
}

}  // namespace mixtrain
