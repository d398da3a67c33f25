// Shape rules of the training-step ops: ai.mixtrain optimizers (outputs mirror the state inputs),
// AllFinite, UpdateLossScale, and ai.onnx.preview.training's multi-tensor optimizers.
#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

// The ai.mixtrain optimizers are multi-tensor: `lead` scalars, then for every parameter a group
// of k inputs (X, G, its state...) and, in the same order, k - 1 outputs (X', the state's next
// values), each mirroring its input.
absl::Status InferGrouped(InferContext& ctx, size_t lead, size_t k) {
  const size_t n = ctx.num_inputs();
  if (n < lead + k || (n - lead) % k != 0)
    return ctx.Error(absl::StrCat("expects ", lead, " scalars and groups of ", k, " inputs per parameter, got ",
                                  n, " inputs"));
  const size_t groups = (n - lead) / k;
  if (ctx.num_outputs() != groups * (k - 1))
    return ctx.Error(absl::StrCat(groups, " parameters need ", groups * (k - 1), " outputs, got ", ctx.num_outputs()));
  for (size_t p = 0; p < groups; ++p)
    for (size_t j = 0; j + 1 < k; ++j) {
      const TypeInfo& in = ctx.input(lead + p * k + (j == 0 ? 0 : j + 1));  // skip G after X
      if (!in.present) return ctx.Error(absl::StrCat("missing state input for output ", p * (k - 1) + j));
      ctx.output(p * (k - 1) + j).dtype = in.dtype;
      ctx.output(p * (k - 1) + j).shape = in.shape;
    }
  return absl::OkStatus();
}

absl::Status InferAdam(InferContext& ctx) { return InferGrouped(ctx, 3, 4); }     // lr step skip, X G M V
absl::Status InferAdagrad(InferContext& ctx) { return InferGrouped(ctx, 3, 3); }  // lr step skip, X G H
absl::Status InferSgd(InferContext& ctx) {                                         // lr skip, X G [B]
  return InferGrouped(ctx, 2, ctx.node().attr_float("momentum", 0.0f) != 0.0f ? 3 : 2);
}

absl::Status InferAllFinite(InferContext& ctx) {
  ctx.output(0).dtype = DType::kBool;
  ctx.output(0).shape = Shape(std::vector<Dim>{});
  return absl::OkStatus();
}

absl::Status InferUpdateLossScale(InferContext& ctx) {
  ctx.output(0).dtype = DType::kF32;
  ctx.output(0).shape = Shape(std::vector<Dim>{});
  ctx.output(1).dtype = DType::kI64;
  ctx.output(1).shape = Shape(std::vector<Dim>{});
  return absl::OkStatus();
}

// R, T, then `groups` groups of k tensors; outputs: X's then each state group, like its inputs.
absl::Status InferOnnxOptimizer(InferContext& ctx, size_t groups) {
  size_t n = ctx.num_inputs();
  if (n < 2 + groups || (n - 2) % groups != 0)
    return ctx.Error(absl::StrCat("expects R, T and ", groups, " groups of equal size"));
  size_t k = (n - 2) / groups;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    size_t group = i / k, j = i % k;
    size_t src = 2 + (group == 0 ? 0 : group + 1) * k + j;  // X group, then V (H) groups after G
    const TypeInfo& in = ctx.input(src);
    ctx.output(i).dtype = in.dtype;
    ctx.output(i).shape = in.shape;
  }
  return absl::OkStatus();
}
absl::Status InferOnnxAdam(InferContext& ctx) { return InferOnnxOptimizer(ctx, 4); }
absl::Status InferOnnxThree(InferContext& ctx) { return InferOnnxOptimizer(ctx, 3); }

}  // namespace

MT_REGISTER_OP_SCHEMAS(optimizer_ops, {
    {"Adam", "ai.mixtrain", InferAdam, kOpIndexAligned},
    {"SGD", "ai.mixtrain", InferSgd, kOpIndexAligned},
    {"Adagrad", "ai.mixtrain", InferAdagrad, kOpIndexAligned},
    {"AllFinite", "ai.mixtrain", InferAllFinite},
    {"UpdateLossScale", "ai.mixtrain", InferUpdateLossScale},
    {"Adam", "ai.onnx.preview.training", InferOnnxAdam, kOpIndexAligned},
    {"Momentum", "ai.onnx.preview.training", InferOnnxThree, kOpIndexAligned},
    {"Adagrad", "ai.onnx.preview.training", InferOnnxThree, kOpIndexAligned},
});

}  // namespace mixtrain
