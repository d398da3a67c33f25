// BatchNormalization and its gradient on CUDA with the CPU kernels' math (kernels/cpu/norm.cc,
// kernels/cpu/grad_norm.cc): one block per channel reduces its N * S elements in double, in a
// fixed order (two passes for the statistics); the forward's normalization is then one
// multiply-add per element with per-channel a, b.
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "runtime/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

// Sum over channel c's elements of f(value index k) in double, every thread getting the total.
template <typename F>
__device__ double ChannelSum(int64_t N, int64_t C, int64_t S, int64_t c, F f, double* scratch) {
  double s = 0;
  for (int64_t j = threadIdx.x; j < N * S; j += kThreads) s += f((j / S * C + c) * S + j % S);
  return BlockReduce(s, SumOp{}, scratch);
}

template <typename Io>
__global__ void BatchNormStatsKernel(BatchNormArgs a, const typename Io::T* x, float* ab) {
  __shared__ double scratch[kThreads / 32];
  const int64_t M = a.N * a.S;
  for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
    double mean = LoadParam(a.param[2], a.param_dtype[2], c), var = LoadParam(a.param[3], a.param_dtype[3], c);
    if (a.training) {
      mean = ChannelSum(a.N, a.C, a.S, c, [&](int64_t k) { return double(Io::Load(x[k])); }, scratch) / M;
      var = ChannelSum(a.N, a.C, a.S, c,
                       [&](int64_t k) {
                         const double d = Io::Load(x[k]) - mean;
                         return d * d;
                       },
                       scratch) /
            M;
    }
    if (threadIdx.x != 0) continue;
    const double inv = 1.0 / sqrt(var + a.eps);
    const double scale = LoadParam(a.param[0], a.param_dtype[0], c), bias = LoadParam(a.param[1], a.param_dtype[1], c);
    ab[2 * c] = static_cast<float>(scale * inv);
    ab[2 * c + 1] = static_cast<float>(bias - mean * scale * inv);
    if (!a.training) continue;
    const double m = a.momentum;
    const double run_mean = LoadParam(a.param[2], a.param_dtype[2], c), run_var = LoadParam(a.param[3], a.param_dtype[3], c);
    const float outs[4] = {static_cast<float>(run_mean * m + mean * (1 - m)), static_cast<float>(run_var * m + var * (1 - m)),
                           static_cast<float>(mean), static_cast<float>(var)};
    for (int i = 0; i < 4; ++i)
      if (a.stat_out[i] != nullptr) StoreParam(a.stat_out[i], a.stat_dtype[i], c, outs[i]);
  }
}

template <typename Io>
__global__ void ChannelAffineKernel(const typename Io::T* x, typename Io::T* y, int64_t n, int64_t C, int64_t S,
                                    const float* ab) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t c = (i / S) % C;
    y[i] = Io::Store(Io::Load(x[i]) * ab[2 * c] + ab[2 * c + 1]);
  }
}

template <typename Io>
__global__ void BatchNormGradKernel(BatchNormGradArgs a, const typename Io::T* dy, const typename Io::T* x,
                                    typename Io::T* dx) {
  __shared__ double scratch[kThreads / 32];
  const int64_t M = a.N * a.S;
  for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
    double mean = LoadParam(a.param[1], a.param_dtype[1], c);
    double inv = 1.0 / sqrt(static_cast<double>(LoadParam(a.param[2], a.param_dtype[2], c)) + a.eps);
    if (a.training) {
      mean = ChannelSum(a.N, a.C, a.S, c, [&](int64_t k) { return double(Io::Load(x[k])); }, scratch) / M;
      const double var = ChannelSum(a.N, a.C, a.S, c,
                                    [&](int64_t k) {
                                      const double d = Io::Load(x[k]) - mean;
                                      return d * d;
                                    },
                                    scratch) /
                         M;
      inv = 1.0 / sqrt(var + a.eps);
    }
    const double sg = ChannelSum(a.N, a.C, a.S, c, [&](int64_t k) { return double(Io::Load(dy[k])); }, scratch);
    const double sgx = ChannelSum(
        a.N, a.C, a.S, c, [&](int64_t k) { return double(Io::Load(dy[k])) * (Io::Load(x[k]) - mean) * inv; }, scratch);
    if (threadIdx.x == 0) {
      if (a.dscale != nullptr) StoreParam(a.dscale, a.dscale_dtype, c, static_cast<float>(sgx));
      if (a.dbias != nullptr) StoreParam(a.dbias, a.dbias_dtype, c, static_cast<float>(sg));
    }
    if (dx == nullptr) continue;
    const double scale = LoadParam(a.param[0], a.param_dtype[0], c);
    for (int64_t j = threadIdx.x; j < M; j += kThreads) {
      const int64_t k = (j / a.S * a.C + c) * a.S + j % a.S;
      double g = Io::Load(dy[k]);
      if (a.training) g -= (sg + (Io::Load(x[k]) - mean) * inv * sgx) / M;
      dx[k] = Io::Store(static_cast<float>(g * scale * inv));
    }
  }
}

}  // namespace

void LaunchBatchNorm(DType dtype, const BatchNormArgs& a, const void* x, void* y, float* ab, void* stream) {
  if (a.C == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t n = a.N * a.C * a.S;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    BatchNormStatsKernel<Io><<<GridFor(a.C), kThreads, 0, s>>>(a, static_cast<const T*>(x), ab);
    if (n > 0)
      ChannelAffineKernel<Io><<<BlocksFor(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), n, a.C,
                                                                 a.S, ab);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchBatchNormGrad(DType dtype, const BatchNormGradArgs& a, const void* dy, const void* x, void* dx,
                         void* stream) {
  if (a.C == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    BatchNormGradKernel<Io><<<GridFor(a.C), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        a, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx));
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
