// CUDA kernel classes of ONNX Not, SoftmaxCrossEntropyLoss and
// ai.mixtrain.SoftmaxCrossEntropyLossGrad(dL, scores, labels[, weights]): they check what the CPU
// kernels check (labels' dtype and shape, weights of C elements, the reduction, dL's shape) and
// call kernels/cuda/loss.cu on the node's stream, with the device's workspace as scratch.
// Labels are not range-checked here (that would read them back); loss.cu makes a bad label's
// loss NaN.
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_device.h"

namespace mixtrain::cuda {
namespace {


// The loss's view and attributes; `weights` is the optional class-weight input.
absl::StatusOr<CrossEntropyArgs> ReadArgs(const KernelContext& ctx, const TensorView& scores,
                                          const TensorView* labels, const TensorView* weights) {
  if (labels == nullptr) return ctx.Error("needs input labels");
  if (labels->dtype != DType::kI32 && labels->dtype != DType::kI64)
    return ctx.Error(absl::StrCat("labels must be int32 or int64, got ", DTypeName(labels->dtype)));
  if (!IsGpuFloat(scores.dtype))
    return ctx.Error(absl::StrCat("scores have dtype ", DTypeName(scores.dtype), "; CUDA takes f32, f16, bf16"));
  if (scores.rank() < 2) return ctx.Error("scores must be [N, C, ...]");
  CrossEntropyArgs a;
  a.N = scores.dims[0];
  a.C = scores.dims[1];
  for (int64_t i = 2; i < scores.rank(); ++i) a.D *= scores.dims[i];
  if (labels->numel() != a.N * a.D) return ctx.Error("labels must have the shape of scores without dim 1");
  if (weights != nullptr) {
    if (!IsGpuFloat(weights->dtype) || weights->numel() != a.C)
      return ctx.Error(absl::StrCat("weights must be a float tensor of C=", a.C, " elements"));
    a.weights = weights->data;
    a.weights_dtype = weights->dtype;
  }
  a.has_ignore = ctx.node().has_attr("ignore_index");
  a.ignore_index = ctx.node().attr_int("ignore_index", 0);
  const std::string reduction = ctx.node().attr_string("reduction", "mean");
  if (reduction == "none") a.reduction = CrossEntropyArgs::kNone;
  else if (reduction == "sum") a.reduction = CrossEntropyArgs::kSum;
  else if (reduction == "mean") a.reduction = CrossEntropyArgs::kMean;
  else return ctx.Error(absl::StrCat("unknown reduction '", reduction, "'"));
  return a;
}

absl::StatusOr<void*> Scratch(const KernelContext& ctx, const CrossEntropyArgs& a) {
  const CudaStreamResources& res = CudaResources(ctx);
  if (CrossEntropyScratchBytes(a) > res.workspace_bytes)
    return ctx.Error(absl::StrCat(a.N * a.D, " loss items need more than the ", res.workspace_bytes,
                                  "-byte CUDA workspace"));
  return res.workspace;
}

absl::Status Loss(KernelContext& ctx) {
  const TensorView* scores = ctx.input(0);
  if (scores == nullptr || ctx.output(0) == nullptr) return ctx.Error("needs scores and an output");
  MT_ASSIGN_OR_RETURN(CrossEntropyArgs a, ReadArgs(ctx, *scores, ctx.input(1), ctx.input(2)));
  TensorView* out = ctx.output(0);
  TensorView* log_prob = ctx.output(1);
  if (out->dtype != scores->dtype || (log_prob != nullptr && log_prob->dtype != scores->dtype))
    return ctx.Error("outputs must have the scores' dtype");
  if (out->numel() != (a.reduction == CrossEntropyArgs::kNone ? a.N * a.D : 1))
    return ctx.Error("the output's shape does not match the reduction");
  MT_ASSIGN_OR_RETURN(void* scratch, Scratch(ctx, a));
  LaunchSoftmaxCrossEntropy(a, scores->dtype, scores->data, ctx.input(1)->dtype, ctx.input(1)->data, out->data,
                            log_prob != nullptr ? log_prob->data : nullptr, scratch, ctx.stream());
  return absl::OkStatus();
}

absl::Status LossGrad(KernelContext& ctx) {
  const TensorView* dl = ctx.input(0);
  const TensorView* scores = ctx.input(1);
  TensorView* dx = ctx.output(0);
  if (dl == nullptr || scores == nullptr || dx == nullptr) return ctx.Error("needs inputs dL, scores, labels");
  MT_ASSIGN_OR_RETURN(CrossEntropyArgs a, ReadArgs(ctx, *scores, ctx.input(2), ctx.input(3)));
  if (!IsGpuFloat(dl->dtype)) return ctx.Error("dL must be a float tensor");
  if (dx->dtype != scores->dtype || dx->numel() != scores->numel())
    return ctx.Error("the output must have the scores' dtype and shape");
  if (dl->numel() != (a.reduction == CrossEntropyArgs::kNone ? a.N * a.D : 1))
    return ctx.Error("dL's shape does not match the reduction");
  MT_ASSIGN_OR_RETURN(void* scratch, Scratch(ctx, a));
  LaunchSoftmaxCrossEntropyGrad(a, scores->dtype, dl->data, dl->dtype, scores->data, ctx.input(2)->dtype,
                                ctx.input(2)->data, dx->data, scratch, ctx.stream());
  return absl::OkStatus();
}

absl::Status Not(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr || x->dtype != DType::kBool || y->dtype != DType::kBool ||
      x->numel() != y->numel())
    return ctx.Error("Not takes and gives bool tensors of one shape");
  LaunchNot(x->as<uint8_t>(), y->as<uint8_t>(), x->numel(), ctx.stream());
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cuda_loss_kernels) {
  r.Register({"Not", "", DeviceType::kCUDA, {}, 0, FnKernel(Not)});
  r.Register({"SoftmaxCrossEntropyLoss", "", DeviceType::kCUDA, kFloatTypes, 0, FnKernel(Loss)});
  r.Register({"SoftmaxCrossEntropyLossGrad", "ai.mixtrain", DeviceType::kCUDA, kFloatTypes, 1, FnKernel(LossGrad)});
}

}  // namespace mixtrain::cuda
