// CPU kernels of two small ai.mixtrain backward ops:
//   GeluGrad(dY, X) -> dX: Gelu's derivative, exact (erf) or tanh-approximated per `approximate`
//   GatherGrad(dY, indices, X) -> dX: zeros of X's shape with dY scatter-added at the gathered
//     rows along `axis` (repeated indices accumulate), negative indices counted from the end.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {
namespace {

absl::Status GeluGradKernel(KernelContext& ctx) {
  const TensorView* dy_v = ctx.input(0);
  const TensorView* x_v = ctx.input(1);
  if (!dy_v || !x_v || !ctx.output(0)) return ctx.Error("needs inputs dY and X");
  if (!AllFloat({dy_v, x_v, ctx.output(0)})) return ctx.Error("expects float tensors");
  if (dy_v->numel() != x_v->numel()) return ctx.Error("dY and X differ in size");
  const bool tanh_form = ctx.node().attr_string("approximate", "none") == "tanh";
  const std::vector<float> dy = ToFloatVector(*dy_v), x = ToFloatVector(*x_v);
  std::vector<float> dx(x.size());
  ParallelFor(static_cast<int64_t>(x.size()), kElementwiseGrain, [&](int64_t b, int64_t e) {
    constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
    constexpr float kSqrt2OverPi = 0.79788456080286536f, kA = 0.044715f;
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      float d;
      if (tanh_form) {
        const float t = std::tanh(kSqrt2OverPi * (v + kA * v * v * v));
        d = 0.5f * (1 + t) + 0.5f * v * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kA * v * v);
      } else {
        d = 0.5f * (1 + std::erf(v * kInvSqrt2)) + v * kInvSqrt2Pi * std::exp(-0.5f * v * v);
      }
      dx[i] = dy[i] * d;
    }
  });
  StoreFloats(*ctx.output(0), dx);
  return absl::OkStatus();
}

absl::Status GatherGradKernel(KernelContext& ctx) {
  const TensorView* dy_v = ctx.input(0);
  const TensorView* idx = ctx.input(1);
  const TensorView* x_v = ctx.input(2);
  if (!dy_v || !idx || !x_v || !ctx.output(0)) return ctx.Error("needs inputs dY, indices, X");
  if (idx->dtype != DType::kI64 && idx->dtype != DType::kI32)
    return ctx.Error("indices must be int32 or int64");
  int64_t axis = ctx.node().attr_int("axis", 0);
  if (axis < 0) axis += x_v->rank();
  if (axis < 0 || axis >= x_v->rank()) return ctx.Error("axis out of range");
  const AxisView v = ViewAroundAxis(x_v->dims, axis);
  const int64_t K = idx->numel();
  if (dy_v->numel() != v.outer * K * v.inner) return ctx.Error("dY's size does not match");
  const std::vector<float> dy = ToFloatVector(*dy_v);
  std::vector<int64_t> rows(K);
  for (int64_t k = 0; k < K; ++k) {
    int64_t r = IntAt(*idx, k);
    if (r < 0) r += v.n;
    if (r < 0 || r >= v.n)
      return ctx.Error(absl::StrCat("index ", IntAt(*idx, k), " out of range for dim ", v.n));
    rows[k] = r;
  }
  std::vector<float> dx(static_cast<size_t>(v.outer * v.n * v.inner), 0.0f);
  // Parallel over `inner` columns: repeated indices then never race.
  ParallelFor(v.inner, 256, [&](int64_t b, int64_t e) {
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t k = 0; k < K; ++k) {
        const float* src = dy.data() + (o * K + k) * v.inner;
        float* dst = dx.data() + (o * v.n + rows[k]) * v.inner;
        for (int64_t i = b; i < e; ++i) dst[i] += src[i];
      }
  });
  StoreFloats(*ctx.output(0), dx);
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_gelu_gather) {
  r.Register({"GeluGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(GeluGradKernel)});
  r.Register({"GatherGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(GatherGradKernel)});
}

}  // namespace mixtrain::cpu
