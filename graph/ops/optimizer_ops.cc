// Shape rules of the training-step ops: ai.mixtrain optimizers (outputs mirror the state inputs),
// AllFinite, UpdateLossScale, and ai.onnx.preview.training's multi-tensor optimizers.
#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

// Output i mirrors input first_state + i.
absl::Status MirrorFrom(InferContext& ctx, size_t first_state) {
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    const TypeInfo& in = ctx.input(first_state + (i == 0 ? 0 : i + 1));  // skip G after X
    if (!in.present) return ctx.Error(absl::StrCat("missing state input for output ", i));
    ctx.output(i).dtype = in.dtype;
    ctx.output(i).shape = in.shape;
  }
  return absl::OkStatus();
}

absl::Status InferAdam(InferContext& ctx) { return MirrorFrom(ctx, 3); }     // lr step skip X G M V
absl::Status InferSgd(InferContext& ctx) { return MirrorFrom(ctx, 2); }      // lr skip X G [B]
absl::Status InferAdagrad(InferContext& ctx) { return MirrorFrom(ctx, 3); }  // lr step skip X G H

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
