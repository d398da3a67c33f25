// CUDA kernel classes of the training-step ops in the ai.mixtrain domain: Adam, SGD, AllFinite
// and UpdateLossScale, with the CPU kernels' input conventions (kernels/cpu/optimizer.cc):
//   X' M' V' ... <- Adam(lr, step, skip, X, G, M, V, ...);  X' [B'] ... <- SGD(lr, skip, X, G, [B], ...)
//   (one group per parameter);
//   all_finite <- AllFinite(x...);  scale' good' <- UpdateLossScale(found_inf, scale, good).
// Scalars stay on the device (launch.h). The ONNX preview-training optimizers and Adagrad have
// no CUDA kernel yet.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

constexpr char kMt[] = "ai.mixtrain";

absl::Status CheckF32(const KernelContext& ctx, size_t first, size_t n, int64_t numel) {
  for (size_t i = first; i < first + n; ++i) {
    const TensorView* t = ctx.input(i);
    if (!t || t->dtype != DType::kF32)
      return ctx.Error(absl::StrCat("input ", i, " must be f32 (master weights and optimizer state are fp32)"));
    if (t->numel() != numel)
      return ctx.Error(absl::StrCat("input ", i, " has ", t->numel(), " elements, expected ", numel));
  }
  return absl::OkStatus();
}

absl::Status CheckScalar(const KernelContext& ctx, size_t i, std::initializer_list<DType> dtypes) {
  const TensorView* t = ctx.input(i);
  if (t == nullptr || t->numel() != 1) return ctx.Error(absl::StrCat("input ", i, " must be a scalar"));
  for (DType d : dtypes)
    if (t->dtype == d) return absl::OkStatus();
  return ctx.Error(absl::StrCat("input ", i, " has dtype ", DTypeName(t->dtype)));
}

// out = in on the stream, unless they already share memory (in-place state update).
void CopyState(const KernelContext& ctx, const TensorView* in, TensorView* out) {
  if (out && in && out->data != in->data)
    MT_CUDA_CHECK(cudaMemcpyAsync(out->data, in->data, in->nbytes(), cudaMemcpyDeviceToDevice,
                                  static_cast<cudaStream_t>(ctx.stream())));
}

const uint8_t* SkipFlag(const KernelContext& ctx, size_t i) {
  const TensorView* t = ctx.input(i);
  return t && t->numel() == 1 ? t->as<uint8_t>() : nullptr;
}

// The ai.mixtrain optimizers are multi-tensor (graph/ops/optimizer_ops.cc): `lead` scalars, then
// per parameter k inputs (X, G, state...) and k - 1 outputs (X', state'...). Checks parameter p's
// group, copies its state into the outputs (unless updated in place) and returns its element count.
absl::StatusOr<int64_t> PrepareParam(const KernelContext& ctx, size_t lead, size_t k, size_t p) {
  const size_t in0 = lead + p * k, out0 = p * (k - 1);
  const TensorView* x = ctx.input(in0);
  if (!x) return ctx.Error(absl::StrCat("missing X of parameter ", p));
  MT_RETURN_IF_ERROR(CheckF32(ctx, in0, k, x->numel()));
  for (size_t j = 0; j + 1 < k; ++j) {
    if (!ctx.output(out0 + j)) return ctx.Error(absl::StrCat("missing output ", out0 + j));
    CopyState(ctx, ctx.input(in0 + (j == 0 ? 0 : j + 1)), ctx.output(out0 + j));
  }
  return x->numel();
}

absl::StatusOr<size_t> Groups(const KernelContext& ctx, size_t lead, size_t k) {
  const size_t n = ctx.num_inputs();
  if (n < lead + k || (n - lead) % k != 0)
    return ctx.Error(absl::StrCat("expects ", lead, " scalars and groups of ", k, " inputs per parameter"));
  return (n - lead) / k;
}

// One launch per parameter; the skip flag and the step stay on the device.
absl::Status Adam(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckScalar(ctx, 0, {DType::kF32}));
  MT_RETURN_IF_ERROR(CheckScalar(ctx, 1, {DType::kI64, DType::kI32}));
  MT_ASSIGN_OR_RETURN(size_t groups, Groups(ctx, 3, 4));
  const Node& node = ctx.node();
  AdamAttrs a{node.attr_float("beta1", 0.9f), node.attr_float("beta2", 0.999f), node.attr_float("epsilon", 1e-8f),
              node.attr_float("weight_decay", 0.0f), node.attr_int("decoupled", 0) != 0};
  for (size_t p = 0; p < groups; ++p) {
    MT_ASSIGN_OR_RETURN(int64_t n, PrepareParam(ctx, 3, 4, p));
    LaunchAdam(a, ctx.input(0)->as<float>(), ctx.input(1)->data, ctx.input(1)->dtype == DType::kI64,
               SkipFlag(ctx, 2), ctx.output(3 * p)->as<float>(), ctx.input(3 + 4 * p + 1)->as<float>(),
               ctx.output(3 * p + 1)->as<float>(), ctx.output(3 * p + 2)->as<float>(), n, ctx.stream());
  }
  return absl::OkStatus();
}

absl::Status Sgd(KernelContext& ctx) {
  const Node& node = ctx.node();
  SgdAttrs a{node.attr_float("momentum", 0.0f), node.attr_float("weight_decay", 0.0f),
             node.attr_int("nesterov", 0) != 0};
  const bool has_buf = a.momentum != 0.0f;
  const size_t k = has_buf ? 3 : 2;
  MT_RETURN_IF_ERROR(CheckScalar(ctx, 0, {DType::kF32}));
  MT_ASSIGN_OR_RETURN(size_t groups, Groups(ctx, 2, k));
  for (size_t p = 0; p < groups; ++p) {
    MT_ASSIGN_OR_RETURN(int64_t n, PrepareParam(ctx, 2, k, p));
    LaunchSgd(a, ctx.input(0)->as<float>(), SkipFlag(ctx, 1), ctx.output((k - 1) * p)->as<float>(),
              ctx.input(2 + k * p + 1)->as<float>(), has_buf ? ctx.output((k - 1) * p + 1)->as<float>() : nullptr,
              n, ctx.stream());
  }
  return absl::OkStatus();
}

absl::Status AllFinite(KernelContext& ctx) {
  TensorView* out = ctx.output(0);
  if (!out || out->numel() != 1) return ctx.Error("needs a scalar output");
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorView* t = ctx.input(i);
    if (t && t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16)
      return ctx.Error(absl::StrCat("input ", i, " must be a float tensor"));
  }
  auto s = static_cast<cudaStream_t>(ctx.stream());
  MT_CUDA_CHECK(cudaMemsetAsync(out->data, 1, 1, s));
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (const TensorView* t = ctx.input(i)) LaunchAllFinite(t->dtype, t->data, t->numel(), out->as<uint8_t>(), ctx.stream());
  return absl::OkStatus();
}

absl::Status UpdateLossScale(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckScalar(ctx, 0, {DType::kBool, DType::kU8}));
  MT_RETURN_IF_ERROR(CheckScalar(ctx, 1, {DType::kF32}));
  MT_RETURN_IF_ERROR(CheckScalar(ctx, 2, {DType::kI64, DType::kI32}));
  TensorView *so = ctx.output(0), *go = ctx.output(1);
  if (!so || so->dtype != DType::kF32 || !go || go->dtype != DType::kI64)
    return ctx.Error("outputs must be an f32 scale and an int64 count");
  const Node& node = ctx.node();
  LossScaleAttrs a{node.attr_float("growth_factor", 2.0f), node.attr_float("backoff_factor", 0.5f),
                   node.attr_float("max_scale", 16777216.0f), node.attr_int("growth_interval", 2000)};
  LaunchUpdateLossScale(a, ctx.input(0)->as<uint8_t>(), ctx.input(1)->as<float>(), ctx.input(2)->data,
                        ctx.input(2)->dtype == DType::kI64, so->as<float>(), go->as<int64_t>(), ctx.stream());
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cuda_train_kernels) {
  auto add = [&](const char* op, KernelFn fn) { r.Register({op, kMt, DeviceType::kCUDA, {}, 0, FnKernel(fn)}); };
  add("Adam", Adam);
  add("SGD", Sgd);
  add("AllFinite", AllFinite);
  add("UpdateLossScale", UpdateLossScale);
}

}  // namespace mixtrain::cuda
