// Gradient rules of the NN ops: MatMul, Gemm, convolution, pooling, normalization, softmax and
// the losses. Backward ops that are not plain ONNX are our ai.mixtrain ops (ConvGrad, ...,
// schemas in graph/ops/grad_ops.cc, CPU kernels in kernels/cpu/grad_*.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/nn_geometry.h"
#include "graph/shape_inference.h"
#include "passes/autodiff.h"

namespace mixtrain {
namespace {

using V = Value*;
constexpr char kMt[] = "ai.mixtrain";

int64_t Rank(const Value* v) { return v->shape.rank_known ? v->shape.rank() : -1; }

// Every axis but the channel axis 1 (the bias gradient of Conv/ConvTranspose).
std::vector<int64_t> AllButChannel(int64_t rank) {
  std::vector<int64_t> axes{0};
  for (int64_t i = 2; i < rank; ++i) axes.push_back(i);
  return axes;
}

std::vector<Attribute> AttrsOf(const Node& n) { return n.attributes(); }

// MatMul with numpy semantics; 1-D operands are promoted to matrices first, as ONNX does:
// dA = dY @ B^T, dB = A^T @ dY, batch broadcasting undone.
absl::Status MatMulGrad(GradContext& c) {
  auto& b = c.b();
  V a = c.X(0), bm = c.X(1);
  const int64_t ra = Rank(a), rb = Rank(bm);
  if (ra < 1 || rb < 1) return c.Error("operand ranks must be known statically");
  // X[..., M, K] @ W[K, N], the Linear layer of every transformer: with the batch dims folded
  // into the rows, both gradients are one GEMM each, with the transposes read in place:
  // dW = X2^T @ dY2 (not a batched X^T @ dY of [..., K, N] summed over the batch afterwards)
  // and dX = dY2 @ W^T (no Transpose node for W).
  if (ra >= 3 && rb == 2 && bm->shape.fully_known()) {
    const int64_t k = bm->shape.dims[0].value, n = bm->shape.dims[1].value;
    V dy2 = b.Op("Reshape", {c.dY(0), b.Ints({-1, n})});
    auto gemm = [&](V x, V y, int64_t ta, int64_t tb) {
      return b.Op("Gemm", {x, y}, {Attribute::Int("transA", ta), Attribute::Int("transB", tb)});
    };
    if (c.needs(0)) c.SetGrad(0, b.ReshapeLike(gemm(dy2, bm, 0, 1), a));
    if (c.needs(1)) c.SetGrad(1, gemm(b.Op("Reshape", {a, b.Ints({-1, k})}), dy2, 1, 0));
    return absl::OkStatus();
  }
  V a2 = ra == 1 ? b.Unsqueeze(a, {0}) : a;
  V b2 = rb == 1 ? b.Unsqueeze(bm, {1}) : bm;
  const int64_t r = std::max<int64_t>(std::max<int64_t>(ra, 2), std::max<int64_t>(rb, 2));
  std::vector<int64_t> lost;
  if (ra == 1) lost.push_back(r - 2);
  if (rb == 1) lost.push_back(r - 1);
  V dy = b.Unsqueeze(c.dY(0), lost);
  auto swap_last = [&](V v) {
    int64_t n = std::max<int64_t>(Rank(v), 2);
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < n - 2; ++i) perm.push_back(i);
    perm.push_back(n - 1);
    perm.push_back(n - 2);
    return b.Op("Transpose", {v}, {Attribute::Ints("perm", perm)});
  };
  // The products' shapes from the operands' (dY's may be unknown here): the broadcast batch dims,
  // then the operand's own matrix dims. Where they equal the operand's, no SumToShape is needed
  // (nor the operand kept alive for its shape).
  auto product_shape = [&](V operand) {
    const Shape& sa = a2->shape;
    const Shape& sb = b2->shape;
    if (!sa.rank_known || !sb.rank_known || sa.rank() < 2 || sb.rank() < 2) return Shape();
    auto batch = BroadcastShapes(Shape(std::vector<Dim>(sa.dims.begin(), sa.dims.end() - 2)),
                                 Shape(std::vector<Dim>(sb.dims.begin(), sb.dims.end() - 2)));
    if (!batch.ok()) return Shape();
    std::vector<Dim> dims = batch->dims;
    dims.insert(dims.end(), operand->shape.dims.end() - 2, operand->shape.dims.end());
    return Shape(std::move(dims));
  };
  if (c.needs(0)) {
    V g = b.Op("MatMul", {dy, swap_last(b2)});
    MT_ASSIGN_OR_RETURN(V s, b.SumTo(g, product_shape(a2), a2));
    c.SetGrad(0, ra == 1 ? b.ReshapeLike(s, a) : s);
  }
  if (c.needs(1)) {
    V g = b.Op("MatMul", {swap_last(a2), dy});
    MT_ASSIGN_OR_RETURN(V s, b.SumTo(g, product_shape(b2), b2));
    c.SetGrad(1, rb == 1 ? b.ReshapeLike(s, bm) : s);
  }
  return absl::OkStatus();
}

// Y = alpha * A' @ B' + beta * C with A' = transA ? A^T : A (same for B):
// dA' = alpha * dY @ B'^T, dB' = alpha * A'^T @ dY, dC = beta * dY (broadcast undone).
absl::Status GemmGrad(GradContext& c) {
  auto& b = c.b();
  const Node& n = c.node();
  const int64_t ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
  const float alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  auto gemm = [&](V x, V y, int64_t t1, int64_t t2) {
    return b.Op("Gemm", {x, y},
                {Attribute::Float("alpha", alpha), Attribute::Int("transA", t1),
                 Attribute::Int("transB", t2)});
  };
  V dy = c.dY(0);
  if (c.needs(0)) c.SetGrad(0, ta ? gemm(c.X(1), dy, tb, 1) : gemm(dy, c.X(1), 0, !tb));
  if (c.needs(1)) c.SetGrad(1, tb ? gemm(dy, c.X(0), 1, ta) : gemm(c.X(0), dy, !ta, 0));
  if (c.needs(2)) {
    V g = beta == 1.0f ? dy : b.Mul(dy, b.Scalar(beta, dy->dtype));
    MT_RETURN_IF_ERROR(c.SetGradSumTo(2, g, c.Y(0)->shape));
  }
  return absl::OkStatus();
}

// dX, dW, dB = ConvGrad(dY, X, W) (ai.mixtrain, same attributes as the Conv). dB, the sum of dY
// over every axis but the channels, comes from the same pass over dY as dW when dW is needed
// (oneDNN's backward-weights primitive computes both); alone, it is a ReduceSum.
absl::Status ConvGrad(GradContext& c) {
  auto& b = c.b();
  const bool bias_in_conv = c.needs(2) && c.needs(1);
  if (c.needs(0) || c.needs(1)) {
    std::vector<V> g = b.OpN("ConvGrad", {c.dY(0), c.X(0), c.X(1)},
                             {c.needs(0), c.needs(1), bias_in_conv}, AttrsOf(c.node()), kMt);
    c.SetGrad(0, g[0]);
    c.SetGrad(1, g[1]);
    if (bias_in_conv) c.SetGrad(2, g[2]);
  }
  if (c.needs(2) && !bias_in_conv) {
    if (Rank(c.dY(0)) < 0) return c.Error("output rank must be known statically");
    c.SetGrad(2, b.ReduceSum(c.dY(0), AllButChannel(Rank(c.Y(0))), false));
  }
  return absl::OkStatus();
}

// ConvTranspose is the adjoint of Conv with the same window: dX = Conv(dY, W); its weight
// gradient is Conv's weight gradient with the roles of X and dY swapped:
// dW = ConvGrad(X, dY, W).dW. dB as for Conv. With static spatial dims, the pads come from the
// forward's geometry (auto_pad, output_shape and output_padding resolved as the forward kernel
// does); an end crop < 0 (output grown past the windows) slices those dY elements off first,
// they depend on no input. Without static dims only explicit pads are supported, and the
// output_padding rows are dropped by Conv's floor.
absl::Status ConvTransposeGrad(GradContext& c) {
  auto& b = c.b();
  const Node& n = c.node();
  std::vector<Attribute> attrs;
  for (const char* a : {"dilations", "group", "kernel_shape", "strides"})
    if (const Attribute* at = n.attr(a)) attrs.push_back(*at);
  V dy = c.dY(0);
  const Shape& xs = c.X(0)->shape;
  const Shape& ws = c.X(1)->shape;
  const bool explicit_pads = n.attr_string("auto_pad", "NOTSET") == "NOTSET" &&
                             !n.has_attr("output_shape");
  if (xs.rank_known && xs.rank() >= 3 && xs.fully_known() && ws.fully_known() &&
      ws.rank() == xs.rank()) {
    const std::vector<int64_t> x_dims = xs.sizes(), w_dims = ws.sizes();
    const std::vector<int64_t> in(x_dims.begin() + 2, x_dims.end());
    std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
    if (kernel.empty()) kernel.assign(w_dims.begin() + 2, w_dims.end());
    auto geo = TransposedWindowGeometry(n, in, kernel);
    if (!geo.ok()) return c.Error(std::string(geo.status().message()));
    const size_t sp = in.size();
    std::vector<int64_t> pads(2 * sp), starts, ends, axes;
    for (size_t i = 0; i < sp; ++i) {
      const int64_t begin = geo->pads_begin[i], end = geo->pads_end_effective[i];
      const int64_t out = geo->out[i];
      pads[i] = std::max<int64_t>(begin, 0);
      pads[sp + i] = std::max<int64_t>(end, 0);
      if (begin < 0 || end < 0) {
        starts.push_back(std::max<int64_t>(-begin, 0));
        ends.push_back(out - std::max<int64_t>(-end, 0));
        axes.push_back(static_cast<int64_t>(i) + 2);
      }
    }
    if (!starts.empty()) dy = b.Op("Slice", {dy, b.Ints(starts), b.Ints(ends), b.Ints(axes)});
    attrs.push_back(Attribute::Ints("pads", pads));
  } else if (!explicit_pads) {
    return c.Error("auto_pad / output_shape need static input and weight shapes");
  } else if (const Attribute* at = n.attr("pads")) {
    attrs.push_back(*at);
  }
  if (c.needs(0)) c.SetGrad(0, b.Op("Conv", {dy, c.X(1)}, attrs));
  if (c.needs(1))
    c.SetGrad(1, b.OpN("ConvGrad", {c.X(0), dy, c.X(1)}, {false, true}, attrs, kMt)[1]);
  if (c.needs(2)) {
    if (Rank(c.Y(0)) < 0) return c.Error("output rank must be known statically");
    c.SetGrad(2, b.ReduceSum(c.dY(0), AllButChannel(Rank(c.Y(0))), false));
  }
  return absl::OkStatus();
}

// dX = MaxPoolGrad(dY, X): dY routed to each window's (first) maximum.
absl::Status MaxPoolGrad(GradContext& c) {
  if (c.dY(0) == nullptr) return absl::OkStatus();  // only Indices used
  c.SetGrad(0, c.b().Op("MaxPoolGrad", {c.dY(0), c.X(0)}, AttrsOf(c.node()), kMt));
  return absl::OkStatus();
}

// dX = AveragePoolGrad(dY, X): dY spread evenly over each window.
absl::Status AveragePoolGrad(GradContext& c) {
  c.SetGrad(0, c.b().Op("AveragePoolGrad", {c.dY(0), c.X(0)}, AttrsOf(c.node()), kMt));
  return absl::OkStatus();
}

// dX = Expand(dY, shape(X)) / (H * W ...)
absl::Status GlobalAveragePoolGrad(GradContext& c) {
  auto& b = c.b();
  const Shape& s = c.X(0)->shape;
  if (!s.rank_known || s.rank() < 2) return c.Error("input rank must be known statically");
  int64_t count = 1;
  std::vector<int64_t> axes;
  bool known = true;
  for (int64_t i = 2; i < s.rank(); ++i) {
    axes.push_back(i);
    known &= s.dims[i].known();
    if (s.dims[i].known()) count *= s.dims[i].value;
  }
  V g = b.ExpandLike(c.dY(0), c.X(0));
  c.SetGrad(0, known ? b.Mul(g, b.Scalar(1.0 / count, c.dY(0)->dtype))
                     : b.Div(g, b.CountOver(c.X(0), axes)));
  return absl::OkStatus();
}

// dX, dScale, dBias = BatchNormalizationGrad(dY, X, scale, mean, var): batch statistics in
// training mode (recomputed from X), the given running statistics in inference mode.
absl::Status BatchNormGrad(GradContext& c) {
  const Node& n = c.node();
  const bool training = c.opset() >= 14 ? n.attr_int("training_mode", 0) != 0
                                        : n.output(1) != nullptr;
  std::vector<V> g = c.b().OpN(
      "BatchNormalizationGrad", {c.dY(0), c.X(0), c.X(1), c.X(3), c.X(4)},
      {c.needs(0), c.needs(1), c.needs(2)},
      {Attribute::Float("epsilon", n.attr_float("epsilon", 1e-5f)),
       Attribute::Int("training_mode", training ? 1 : 0)},
      kMt);
  for (int i = 0; i < 3; ++i) c.SetGrad(i, g[i]);
  return absl::OkStatus();
}

// dX, dScale, dBias = LayerNormalizationGrad(dY, X, scale) (statistics recomputed from X).
absl::Status LayerNormGrad(GradContext& c) {
  if (c.dY(0) == nullptr) return c.Error("only the gradient of output Y is supported");
  const Node& n = c.node();
  std::vector<V> g = c.b().OpN(
      "LayerNormalizationGrad", {c.dY(0), c.X(0), c.X(1)}, {c.needs(0), c.needs(1), c.needs(2)},
      {Attribute::Int("axis", n.attr_int("axis", -1)),
       Attribute::Float("epsilon", n.attr_float("epsilon", 1e-5f))},
      kMt);
  for (int i = 0; i < 3; ++i) c.SetGrad(i, g[i]);
  return absl::OkStatus();
}

// dX, dScale, dBias = GroupNormalizationGrad(dY, X, scale) (statistics recomputed from X);
// scale per channel or, in the opset-18 form, per group: the kernel tells them by size.
absl::Status GroupNormGrad(GradContext& c) {
  const Node& n = c.node();
  std::vector<V> g = c.b().OpN(
      "GroupNormalizationGrad", {c.dY(0), c.X(0), c.X(1)}, {c.needs(0), c.needs(1), c.needs(2)},
      {Attribute::Int("num_groups", n.attr_int("num_groups", 0)),
       Attribute::Float("epsilon", n.attr_float("epsilon", 1e-5f))},
      kMt);
  for (int i = 0; i < 3; ++i) c.SetGrad(i, g[i]);
  return absl::OkStatus();
}

// InstanceNormalization is GroupNormalization with one group per channel.
absl::Status InstanceNormGrad(GradContext& c) {
  const Node& n = c.node();
  const Shape& xs = c.X(0)->shape;
  const Shape& ss = c.X(1)->shape;
  int64_t channels = -1;
  if (xs.rank_known && xs.rank() >= 2 && xs.dims[1].known()) channels = xs.dims[1].value;
  else if (ss.rank_known && ss.rank() == 1 && ss.dims[0].known()) channels = ss.dims[0].value;
  if (channels < 0) return c.Error("the channel count must be known statically");
  std::vector<V> g = c.b().OpN(
      "GroupNormalizationGrad", {c.dY(0), c.X(0), c.X(1)}, {c.needs(0), c.needs(1), c.needs(2)},
      {Attribute::Int("num_groups", channels),
       Attribute::Float("epsilon", n.attr_float("epsilon", 1e-5f))},
      kMt);
  for (int i = 0; i < 3; ++i) c.SetGrad(i, g[i]);
  return absl::OkStatus();
}

// The axes Softmax/LogSoftmax normalize over: `axis` from opset 13, `axis` and every later axis
// (the 2-D coercion) before.
absl::StatusOr<std::vector<int64_t>> SoftmaxAxes(GradContext& c) {
  const int64_t r = Rank(c.X(0));
  if (r < 0) return c.Error("input rank must be known statically");
  int64_t axis = c.node().attr_int("axis", c.opset() >= 13 ? -1 : 1);
  if (axis < 0) axis += r;
  if (c.opset() >= 13) return std::vector<int64_t>{axis};
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < r; ++i) axes.push_back(i);
  return axes;
}

// dX = Y * (dY - sum(dY * Y)): one ai.mixtrain SoftmaxGrad over the last axis (the common
// case, one pass per row), else composed from ONNX ops.
absl::Status SoftmaxGrad(GradContext& c) {
  auto& b = c.b();
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, SoftmaxAxes(c));
  V y = c.Y(0), dy = c.dY(0);
  if (axes.size() == 1 && axes[0] == Rank(c.X(0)) - 1) {
    c.SetGrad(0, b.Op("SoftmaxGrad", {dy, y}, {}, kMt));
    return absl::OkStatus();
  }
  c.SetGrad(0, b.Mul(y, b.Sub(dy, b.ReduceSum(b.Mul(dy, y), axes, true))));
  return absl::OkStatus();
}

// MaskedSoftmax(X, mask) = Softmax(Where(mask, scale * X, fill)) over the last axis:
// dX = scale * SoftmaxGrad(dY, Y) where mask, else 0 (the fill is a constant).
absl::Status MaskedSoftmaxGrad(GradContext& c) {
  c.SetGrad(0, c.b().Op("SoftmaxGrad", {c.dY(0), c.Y(0), c.X(1)},
                        {Attribute::Float("scale", c.node().attr_float("scale", 1.0f))}, kMt));
  return absl::OkStatus();
}

// dX = dY - exp(Y) * sum(dY)
absl::Status LogSoftmaxGrad(GradContext& c) {
  auto& b = c.b();
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, SoftmaxAxes(c));
  V y = c.Y(0), dy = c.dY(0);
  c.SetGrad(0, b.Sub(dy, b.Mul(b.Op("Exp", {y}), b.ReduceSum(dy, axes, true))));
  return absl::OkStatus();
}

std::vector<Attribute> LossAttrs(const Node& n) {
  std::vector<Attribute> a{Attribute::String("reduction", n.attr_string("reduction", "mean"))};
  if (const Attribute* ii = n.attr("ignore_index")) a.push_back(*ii);
  return a;
}

// dScores = SoftmaxCrossEntropyLossGrad(dLoss, scores, labels[, weights]); a used log_prob
// output adds LogSoftmax's gradient over the class axis 1.
absl::Status SoftmaxCrossEntropyGrad(GradContext& c) {
  auto& b = c.b();
  std::vector<V> parts;
  if (c.dY(0)) {
    std::vector<V> ins{c.dY(0), c.X(0), c.X(1)};
    if (c.X(2)) ins.push_back(c.X(2));
    parts.push_back(b.Op("SoftmaxCrossEntropyLossGrad", ins, LossAttrs(c.node()), kMt));
  }
  if (c.dY(1)) {
    V lp = c.Y(1), dlp = c.dY(1);
    parts.push_back(b.Sub(dlp, b.Mul(b.Op("Exp", {lp}), b.ReduceSum(dlp, {1}, true))));
  }
  c.SetGrad(0, b.Sum(parts));
  return absl::OkStatus();
}

// dInput = NegativeLogLikelihoodLossGrad(dLoss, input, target[, weight])
absl::Status NllLossGrad(GradContext& c) {
  std::vector<V> ins{c.dY(0), c.X(0), c.X(1)};
  if (c.X(2)) ins.push_back(c.X(2));
  c.SetGrad(0, c.b().Op("NegativeLogLikelihoodLossGrad", ins, LossAttrs(c.node()), kMt));
  return absl::OkStatus();
}

MT_REGISTER_GRAD_RULES(nn, {
    {"MatMul", "", MatMulGrad},
    {"Gemm", "", GemmGrad},
    {"Conv", "", ConvGrad},
    {"ConvTranspose", "", ConvTransposeGrad},
    {"MaxPool", "", MaxPoolGrad},
    {"AveragePool", "", AveragePoolGrad},
    {"GlobalAveragePool", "", GlobalAveragePoolGrad},
    {"BatchNormalization", "", BatchNormGrad, Inputs({0, 1, 2})},
    {"LayerNormalization", "", LayerNormGrad, Inputs({0, 1, 2})},
    {"GroupNormalization", "", GroupNormGrad, Inputs({0, 1, 2})},
    {"InstanceNormalization", "", InstanceNormGrad, Inputs({0, 1, 2})},
    {"Softmax", "", SoftmaxGrad},
    {"LogSoftmax", "", LogSoftmaxGrad},
    {"MaskedSoftmax", kMt, MaskedSoftmaxGrad, Inputs({0})},  // fuse_softmax's
    {"SoftmaxCrossEntropyLoss", "", SoftmaxCrossEntropyGrad, Inputs({0})},
    {"NegativeLogLikelihoodLoss", "", NllLossGrad, Inputs({0})},
});

}  // namespace
}  // namespace mixtrain
