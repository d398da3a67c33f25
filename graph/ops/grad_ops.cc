// Shape and type rules of the ai.mixtrain backward ops the autodiff pass emits. Every output is
// shaped and typed like one of the node's inputs (a gradient has its variable's shape and dtype),
// so one templated rule covers them all: Like<a, b, c> = output i is like input a/b/c.
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

template <int... Src>
absl::Status Like(InferContext& ctx) {
  constexpr int kSrc[] = {Src...};
  for (size_t i = 0; i < sizeof...(Src) && i < ctx.num_outputs(); ++i) {
    if (!ctx.output(i).present) continue;
    const TypeInfo& in = ctx.input(kSrc[i]);
    if (!in.present) return ctx.Error("missing input the gradient is shaped like");
    ctx.output(i).dtype = in.dtype;
    ctx.output(i).shape = in.shape;
  }
  return absl::OkStatus();
}

// `params_to` (an ONNX float type) on ConvGrad, LayerNormalizationGrad and
// BatchNormalizationGrad: the parameter gradients (outputs 1 and 2) in that type instead of the
// parameters' (AMP's fp32 gradients from bf16 operands, passes/fp32_grad_products.cc).
absl::Status ParamsTo(InferContext& ctx) {
  if (!ctx.node().has_attr("params_to")) return absl::OkStatus();
  auto to = FromOnnxType(static_cast<int32_t>(ctx.node().attr_int("params_to", 0)));
  if (!to.ok() || !(*to == DType::kF32 || *to == DType::kF16 || *to == DType::kBF16))
    return ctx.Error("params_to must be a float type");
  for (size_t i = 1; i < 3 && i < ctx.num_outputs(); ++i)
    if (ctx.output(i).present) ctx.output(i).dtype = *to;
  return absl::OkStatus();
}

// ConvGrad(dY, X, W) -> dX, dW, dB: dX like X, dW like W, dB a vector of W's output channels.
absl::Status InferConvGrad(InferContext& ctx) {
  MT_RETURN_IF_ERROR((Like<1, 2>(ctx)));
  if (ctx.num_outputs() > 2 && ctx.output(2).present) {
    const TypeInfo& w = ctx.input(2);
    ctx.output(2).dtype = ctx.input(0).dtype;
    if (w.shape.rank_known && w.shape.rank() > 0) ctx.output(2).shape = Shape(std::vector<Dim>{w.shape.dims[0]});
  }
  return ParamsTo(ctx);
}

// (dY, X, scale, ...) -> dX like X, dScale and dBias like scale (or `params_to`).
absl::Status InferNormGrad(InferContext& ctx) {
  MT_RETURN_IF_ERROR((Like<1, 2, 2>(ctx)));
  return ParamsTo(ctx);
}

// SumToShape(grad, shape): the output has the shape given by the contents of input 1.
absl::Status InferSumToShape(InferContext& ctx) {
  ctx.output(0).dtype = ctx.input(0).dtype;
  const TypeInfo& s = ctx.input(1);
  if (s.value != nullptr) {
    ctx.output(0).shape = Shape::Of(s.value->ToInt64Vector());
  } else if (s.shape.fully_known() && s.shape.rank() == 1) {
    ctx.output(0).shape = Shape(std::vector<Dim>(s.shape.dims[0].value));
  }
  return absl::OkStatus();
}

MT_REGISTER_OP_SCHEMAS(grad_ops, {
    {"SumToShape", "ai.mixtrain", InferSumToShape},              // (grad, shape) -> summed
    {"ConvGrad", "ai.mixtrain", InferConvGrad},                  // (dY, X, W) -> dX, dW, dB
    // (dY, X) -> dX; with relu=1, X is a Relu's output and dX is also that Relu's input gradient
    {"MaxPoolGrad", "ai.mixtrain", Like<1>},
    // (dY, Y) -> dX = dY where Y > 0, else 0: Relu's input gradient from its output
    {"ReluGrad", "ai.mixtrain", Like<0>, kOpIndexAligned | kOpOverwritesInput0},
    {"AveragePoolGrad", "ai.mixtrain", Like<1>},                 // (dY, X) -> dX
    {"BatchNormalizationGrad", "ai.mixtrain", InferNormGrad},    // (dY, X, scale, mean, var)
    {"LayerNormalizationGrad", "ai.mixtrain", InferNormGrad},    // (dY, X, scale)
    {"SoftmaxCrossEntropyLossGrad", "ai.mixtrain", Like<1>, kOpOverwritesInput1},  // (dL, scores, labels[, w])
    {"NegativeLogLikelihoodLossGrad", "ai.mixtrain", Like<1>},   // (dL, input, target[, w])
    // (dY, X) -> dX, element by element: dX may take over dY's buffer
    {"GeluGrad", "ai.mixtrain", Like<1>, kOpOverwritesInput0},
    // (dY, Y[, mask]) -> dX = scale * Y * (dY - sum(dY * Y)) over the last axis, 0 where !mask;
    // a row's kernel reads element i of dY and Y only before it writes element i of dX (after the
    // row's sum), so dX may take over dY's buffer
    {"SoftmaxGrad", "ai.mixtrain", Like<1>, kOpOverwritesInput0},
    {"GatherGrad", "ai.mixtrain", Like<2>},                      // (dY, indices, X) -> dX
    // (A, dY, indices) -> A + GatherGrad(dY, indices, A): the CPU's gather_grad_accumulates
    {"GatherGradAdd", "ai.mixtrain", Like<0>, kOpOverwritesInput0},
});

}  // namespace
}  // namespace mixtrain
