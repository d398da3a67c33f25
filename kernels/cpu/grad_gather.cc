// CPU kernel of ai.mixtrain.GatherGrad (GeluGrad is an elementwise functor, in
// elementwise_binary.cc):
//   GatherGrad(dY, indices, X) -> dX: zeros of X's shape with dY scatter-added at the gathered
//     rows along `axis` (repeated indices accumulate), negative indices counted from the end.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {
namespace {

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
  std::vector<int64_t> rows(K);
  for (int64_t k = 0; k < K; ++k) {
    int64_t r = IntAt(*idx, k);
    if (r < 0) r += v.n;
    if (r < 0 || r >= v.n)
      return ctx.Error(absl::StrCat("index ", IntAt(*idx, k), " out of range for dim ", v.n));
    rows[k] = r;
  }
  TensorView& out = *ctx.output(0);
  std::vector<int64_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  if (out.dtype == dy_v->dtype && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) {
    // Each row gathered once (the q/k/v split of a fused projection): zeros, then copies in the
    // storage type.
    const size_t es = DTypeSize(out.dtype);
    std::memset(out.data, 0, out.numel() * es);
    auto* dst = static_cast<uint8_t*>(out.data);
    const auto* src = static_cast<const uint8_t*>(dy_v->data);
    ParallelFor(v.outer * K, 1, [&](int64_t b, int64_t e) {
      for (int64_t ok = b; ok < e; ++ok)
        std::memcpy(dst + ((ok / K) * v.n + rows[ok % K]) * v.inner * es, src + ok * v.inner * es,
                    v.inner * es);
    });
    return absl::OkStatus();
  }
  // Repeated rows (an embedding): summed in fp32, straight into an fp32 output, else in a float
  // buffer rounded once.
  const bool f32 = out.dtype == DType::kF32 && dy_v->dtype == DType::kF32;
  std::vector<float> dy_buf, dx_buf;
  if (!f32) {
    dy_buf = ToFloatVector(*dy_v);
    dx_buf.assign(static_cast<size_t>(v.outer * v.n * v.inner), 0.0f);
  } else {
    std::memset(out.data, 0, out.nbytes());
  }
  const float* src0 = f32 ? dy_v->as<float>() : dy_buf.data();
  float* dst0 = f32 ? out.as<float>() : dx_buf.data();
  // Parallel over `inner` columns: repeated indices then never race.
  ParallelFor(v.inner, 256, [&](int64_t b, int64_t e) {
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t k = 0; k < K; ++k) {
        const float* src = src0 + (o * K + k) * v.inner;
        float* dst = dst0 + (o * v.n + rows[k]) * v.inner;
        for (int64_t i = b; i < e; ++i) dst[i] += src[i];
      }
  });
  if (!f32) StoreFloats(out, dx_buf);
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_gather) {
  r.Register({"GatherGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(GatherGradKernel)});
}

}  // namespace mixtrain::cpu
