// CPU kernels for Softmax and LogSoftmax in fp32/fp16/bf16 (float arithmetic, stable max-shifted
// form from kernels/common/reduce.h).
//
// The two ONNX definitions differ: up to opset 12 the input is coerced to 2-D at `axis`
// ([prod(dims[:axis]), prod(dims[axis:])], default axis 1) and each row is normalized; from opset
// 13 only the single `axis` is normalized (default -1). They agree when axis is the last dim.
// Contiguous rows use the shared row functor; a non-last axis is handled a block of inner columns
// at a time with float buffers for max and sum, so the inner loops stay vectorizable.
#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/ops/movement_params.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

constexpr int64_t kGrain = 16384;
constexpr int64_t kChunk = 512;

// Rows [b, e) of a contiguous softmax, compiled for the baseline and for AVX-512 (where the
// exp polynomial inlines into 16-lane loops and attention's rows of 32 are two vectors).
template <typename Io, bool kLog>
[[gnu::always_inline]] inline void SoftmaxRowRange(const typename Io::T* x, typename Io::T* y,
                                                   int64_t b, int64_t e, int64_t n, float* scratch) {
  for (int64_t r = b; r < e; ++r) red::SoftmaxRow<Io, Io, kLog>(x + r * n, y + r * n, n, scratch);
}
template <typename Io, bool kLog>
MT_TARGET_AVX512 void SoftmaxRowRangeAvx512(const typename Io::T* x, typename Io::T* y, int64_t b,
                                            int64_t e, int64_t n, float* scratch) {
  SoftmaxRowRange<Io, kLog>(x, y, b, e, n, scratch);
}

template <typename Io, bool kLog>
void SoftmaxRows(const typename Io::T* x, typename Io::T* y, int64_t rows, int64_t n) {
  ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
              [&](int64_t b, int64_t e) {
                std::vector<float> scratch(n);
                if (Avx512Enabled())
                  SoftmaxRowRangeAvx512<Io, kLog>(x, y, b, e, n, scratch.data());
                else
                  SoftmaxRowRange<Io, kLog>(x, y, b, e, n, scratch.data());
              });
}

// Softmax over the middle axis of [outer, n, inner] with inner > 1.
template <typename Io, bool kLog>
void SoftmaxStrided(const typename Io::T* x, typename Io::T* y, AxisView v) {
  const int64_t chunks = (v.inner + kChunk - 1) / kChunk;
  ParallelFor(
      v.outer * chunks,
      std::max<int64_t>(1, kGrain / std::max<int64_t>(v.n * std::min(v.inner, kChunk), 1)),
      [&](int64_t b, int64_t e) {
        std::vector<float> mx(kChunk), sum(kChunk);
        for (int64_t w = b; w < e; ++w) {
          const int64_t o = w / chunks, i0 = (w % chunks) * kChunk;
          const int64_t len = std::min(kChunk, v.inner - i0);
          const int64_t base = o * v.n * v.inner + i0;
          std::fill(mx.begin(), mx.begin() + len, -INFINITY);
          std::fill(sum.begin(), sum.begin() + len, 0.0f);
          for (int64_t r = 0; r < v.n; ++r) {
            const typename Io::T* src = x + base + r * v.inner;
            for (int64_t i = 0; i < len; ++i) {
              float val = Io::Load(src[i]);
              // NaN wins, like the row functor.
              mx[i] = (val > mx[i] || val != val || mx[i] != mx[i]) ? val : mx[i];
            }
          }
          for (int64_t r = 0; r < v.n; ++r) {
            const typename Io::T* src = x + base + r * v.inner;
            for (int64_t i = 0; i < len; ++i) sum[i] += red::FastExp(Io::Load(src[i]) - mx[i]);
          }
          if (kLog) {
            for (int64_t i = 0; i < len; ++i) sum[i] = std::log(sum[i]);
          } else {
            for (int64_t i = 0; i < len; ++i) sum[i] = 1.0f / sum[i];
          }
          for (int64_t r = 0; r < v.n; ++r) {
            const typename Io::T* src = x + base + r * v.inner;
            typename Io::T* dst = y + base + r * v.inner;
            for (int64_t i = 0; i < len; ++i) {
              float val = Io::Load(src[i]);
              dst[i] = kLog ? Io::Store((val - mx[i]) - sum[i])
                            : Io::Store(red::FastExp(val - mx[i]) * sum[i]);
            }
          }
        }
      });
}

template <bool kLog>
absl::Status SoftmaxKernel(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  const bool coerce_2d = ctx.opset() > 0 && ctx.opset() < 13;
  const int64_t rank = std::max<int64_t>(x.rank(), 1);  // a scalar is a row of one
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", coerce_2d ? 1 : -1), rank);
  if (!axis.ok()) return ctx.Error(axis.status().message());
  std::vector<int64_t> dims = x.dims;
  if (dims.empty()) dims.push_back(1);
  AxisView v = ViewAroundAxis(dims, *axis);
  if (coerce_2d) v = {v.outer, v.n * v.inner, 1};
  return DispatchFloat(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    const auto* in = x.as<typename Io::T>();
    auto* out = y.as<typename Io::T>();
    if (v.inner == 1)
      SoftmaxRows<Io, kLog>(in, out, v.outer, v.n);
    else
      SoftmaxStrided<Io, kLog>(in, out, v);
  });
}

}  // namespace

MT_REGISTER_KERNELS(cpu_softmax) {
  r.Register({"Softmax", "", DeviceType::kCPU, kFloatTypes, 0, FnKernel(SoftmaxKernel<false>)});
  r.Register({"LogSoftmax", "", DeviceType::kCPU, kFloatTypes, 0, FnKernel(SoftmaxKernel<true>)});
}

}  // namespace mixtrain::cpu
