// CUDA softmax / log-softmax, LayerNorm and sum/mean reductions over a tensor viewed as
// [outer, n, inner] (the view the CPU kernels use too). The per-element math is
// kernels/common/reduce.h's: FastExp (bit-for-bit the CPU's exp), the max-shifted forms, the
// two-pass mean/variance in double with the float-mean correction. What differs from the CPU is
// only the order of summation (a block tree instead of a row loop).
//
// Contiguous rows (inner == 1) get one block per row and block reductions; strided rows
// (inner > 1) get one thread per column walking the axis, which reads coalesced along inner.
#include <cfloat>

#include "kernels/common/reduce.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

template <typename Io, bool kLog>
__global__ void SoftmaxRowsKernel(const typename Io::T* x, typename Io::T* y, int64_t rows, int64_t n) {
  __shared__ float scratch[kThreads / 32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename Io::T* xr = x + r * n;
    typename Io::T* yr = y + r * n;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) m = NanMax(m, Io::Load(xr[i]));
    m = BlockReduce(m, NanMaxOp{}, scratch);
    float sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += red::FastExp(Io::Load(xr[i]) - m);
    sum = BlockReduce(sum, SumOp{}, scratch);
    if (kLog) {
      const float ls = logf(sum);
      for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = Io::Store((Io::Load(xr[i]) - m) - ls);
    } else {
      const float inv = 1.0f / sum;
      for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = Io::Store(red::FastExp(Io::Load(xr[i]) - m) * inv);
    }
  }
}

template <typename Io, bool kLog>
__global__ void SoftmaxColumnsKernel(const typename Io::T* x, typename Io::T* y, int64_t outer, int64_t n,
                                     int64_t inner) {
  for (int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x; c < outer * inner;
       c += int64_t{gridDim.x} * kThreads) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    float m = -INFINITY;
    for (int64_t r = 0; r < n; ++r) m = NanMax(m, Io::Load(x[base + r * inner]));
    float sum = 0;
    for (int64_t r = 0; r < n; ++r) sum += red::FastExp(Io::Load(x[base + r * inner]) - m);
    const float k = kLog ? logf(sum) : 1.0f / sum;
    for (int64_t r = 0; r < n; ++r) {
      const float v = Io::Load(x[base + r * inner]);
      y[base + r * inner] = kLog ? Io::Store((v - m) - k) : Io::Store(red::FastExp(v - m) * k);
    }
  }
}


// Mean and biased variance as red::MeanVar computes them (double sums, float-mean correction).
template <typename Io>
__global__ void LayerNormKernel(const typename Io::T* x, typename Io::T* y, int64_t rows, int64_t n,
                                DType pt, const void* scale, const void* bias, float eps, float* mean_out,
                                float* inv_out) {
  __shared__ double scratch[kThreads / 32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename Io::T* xr = x + r * n;
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) s += Io::Load(xr[i]);
    s = BlockReduce(s, SumOp{}, scratch);
    const double mean = n > 0 ? s / static_cast<double>(n) : 0.0;
    const float mf = static_cast<float>(mean);
    double q = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float d = Io::Load(xr[i]) - mf;
      q += static_cast<double>(d) * d;
    }
    q = BlockReduce(q, SumOp{}, scratch);
    const double dm = mean - static_cast<double>(mf);
    const double var = n > 0 ? q / static_cast<double>(n) - dm * dm : 0.0;
    const float inv = static_cast<float>(1.0 / sqrt(var + eps));
    typename Io::T* yr = y + r * n;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      float v = (Io::Load(xr[i]) - mf) * inv * LoadParam(scale, pt, i);
      if (bias != nullptr) v += LoadParam(bias, pt, i);
      yr[i] = Io::Store(v);
    }
    if (threadIdx.x == 0) {
      if (mean_out != nullptr) mean_out[r] = mf;
      if (inv_out != nullptr) inv_out[r] = inv;
    }
  }
}

// Sums accumulate in double like the CPU's ReduceOp.
template <typename Io>
__global__ void SumRowsKernel(const typename Io::T* x, typename Io::T* y, int64_t rows, int64_t n, bool mean) {
  __shared__ double scratch[kThreads / 32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) s += Io::Load(x[r * n + i]);
    s = BlockReduce(s, SumOp{}, scratch);
    if (threadIdx.x == 0) y[r] = Io::Store(static_cast<float>(mean ? s / static_cast<double>(n) : s));
  }
}

template <typename Io>
__global__ void SumColumnsKernel(const typename Io::T* x, typename Io::T* y, int64_t outer, int64_t n,
                                 int64_t inner, bool mean) {
  for (int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x; c < outer * inner;
       c += int64_t{gridDim.x} * kThreads) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    double s = 0;
    for (int64_t r = 0; r < n; ++r) s += Io::Load(x[base + r * inner]);
    y[c] = Io::Store(static_cast<float>(mean ? s / static_cast<double>(n) : s));
  }
}


}  // namespace

void LaunchSoftmax(bool log, DType dtype, const void* x, void* y, int64_t outer, int64_t n,
                   int64_t inner, void* stream) {
  if (outer * n * inner == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    auto* in = static_cast<const typename Io::T*>(x);
    auto* out = static_cast<typename Io::T*>(y);
    const unsigned cols = GridFor((outer * inner + kThreads - 1) / kThreads);
    if (inner == 1 && log) SoftmaxRowsKernel<Io, true><<<GridFor(outer), kThreads, 0, s>>>(in, out, outer, n);
    if (inner == 1 && !log) SoftmaxRowsKernel<Io, false><<<GridFor(outer), kThreads, 0, s>>>(in, out, outer, n);
    if (inner > 1 && log) SoftmaxColumnsKernel<Io, true><<<cols, kThreads, 0, s>>>(in, out, outer, n, inner);
    if (inner > 1 && !log) SoftmaxColumnsKernel<Io, false><<<cols, kThreads, 0, s>>>(in, out, outer, n, inner);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchLayerNorm(DType dtype, const void* x, void* y, int64_t rows, int64_t n,
                     DType param_dtype, const void* scale, const void* bias, float eps,
                     float* mean, float* inv_std, void* stream) {
  if (rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    LayerNormKernel<Io><<<GridFor(rows), kThreads, 0, s>>>(static_cast<const typename Io::T*>(x),
                                                           static_cast<typename Io::T*>(y), rows, n,
                                                           param_dtype, scale, bias, eps, mean, inv_std);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchReduceSum(bool mean, DType dtype, const void* x, void* y, int64_t outer, int64_t n,
                     int64_t inner, void* stream) {
  if (outer * inner == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    auto* in = static_cast<const typename Io::T*>(x);
    auto* out = static_cast<typename Io::T*>(y);
    if (inner == 1)
      SumRowsKernel<Io><<<GridFor(outer), kThreads, 0, s>>>(in, out, outer, n, mean);
    else
      SumColumnsKernel<Io><<<GridFor((outer * inner + kThreads - 1) / kThreads), kThreads, 0, s>>>(
          in, out, outer, n, inner, mean);
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
