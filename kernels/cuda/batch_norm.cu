// BatchNormalization, GroupNormalization and their gradients on CUDA with the CPU kernels' math
// (kernels/cpu/norm.cc, grad_norm.cc, group_norm.cc): one block per channel (batch norm) or per
// (sample, group) reduces its elements in double, in a fixed order (two passes for the
// statistics); batch norm's forward is then one multiply-add per element with per-channel a, b.
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

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
    if (threadIdx.x == 0) {  // no barrier below: the other threads go on to the next channel
      const double inv = 1.0 / sqrt(var + a.eps);
      const double scale = LoadParam(a.param[0], a.param_dtype[0], c), bias = LoadParam(a.param[1], a.param_dtype[1], c);
      ab[2 * c] = static_cast<float>(scale * inv);
      ab[2 * c + 1] = static_cast<float>(bias - mean * scale * inv);
      if (a.training) {
        const double m = a.momentum;
        const double run_mean = LoadParam(a.param[2], a.param_dtype[2], c),
                     run_var = LoadParam(a.param[3], a.param_dtype[3], c);
        const float outs[4] = {static_cast<float>(run_mean * m + mean * (1 - m)),
                               static_cast<float>(run_var * m + var * (1 - m)), static_cast<float>(mean),
                               static_cast<float>(var)};
        for (int i = 0; i < 4; ++i)
          if (a.stat_out[i] != nullptr) StoreParam(a.stat_out[i], a.stat_dtype[i], c, outs[i]);
      }
    }
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

// One block per (n, g): the group's k * S elements are contiguous from (n * groups + g) * k * S.
__device__ __forceinline__ int64_t ParamOf(const GroupNormArgs& a, int64_t ch) {
  return a.affine == a.C ? ch : ch / (a.C / a.groups);
}

template <typename Io>
__device__ void GroupStats(const typename Io::T* xg, int64_t m, double eps, double* mean, double* rstd,
                           double* scratch) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < m; i += kThreads) s += Io::Load(xg[i]);
  const double mu = m > 0 ? BlockReduce(s, SumOp{}, scratch) / m : 0;
  double q = 0;
  for (int64_t i = threadIdx.x; i < m; i += kThreads) {
    const double d = Io::Load(xg[i]) - mu;
    q += d * d;
  }
  q = BlockReduce(q, SumOp{}, scratch);
  *mean = mu;
  *rstd = 1.0 / sqrt((m > 0 ? q / m : 0) + eps);
}

template <typename Io>
__global__ void GroupNormKernel(GroupNormArgs a, const typename Io::T* x, const void* scale, const void* bias,
                                typename Io::T* y) {
  __shared__ double scratch[kThreads / 32];
  const int64_t k = a.C / a.groups, m = k * a.S;
  for (int64_t ng = blockIdx.x; ng < a.N * a.groups; ng += gridDim.x) {
    const int64_t g = ng % a.groups;
    const typename Io::T* xg = x + ng * m;
    double mean, rstd;
    GroupStats<Io>(xg, m, a.eps, &mean, &rstd, scratch);
    for (int64_t i = threadIdx.x; i < m; i += kThreads) {
      const int64_t p = ParamOf(a, g * k + i / a.S);
      y[ng * m + i] = Io::Store(static_cast<float>((Io::Load(xg[i]) - mean) * rstd * LoadParam(scale, a.param_dtype, p) +
                                                   LoadParam(bias, a.param_dtype, p)));
    }
  }
}

template <typename Io>
__global__ void GroupNormGradKernel(GroupNormArgs a, const typename Io::T* dy, const typename Io::T* x,
                                    const void* scale, typename Io::T* dx, double* partial) {
  __shared__ double scratch[kThreads / 32];
  const int64_t k = a.C / a.groups, m = k * a.S;
  for (int64_t ng = blockIdx.x; ng < a.N * a.groups; ng += gridDim.x) {
    const int64_t g = ng % a.groups, n = ng / a.groups;
    const typename Io::T* xg = x + ng * m;
    const typename Io::T* gg = dy + ng * m;
    double mean, rstd;
    GroupStats<Io>(xg, m, a.eps, &mean, &rstd, scratch);
    double sum_g = 0, sum_gxh = 0;
    for (int64_t j = 0; j < k; ++j) {  // per channel: dScale and dBias partials, and the group's sums
      const int64_t ch = g * k + j;
      const double gm = LoadParam(scale, a.param_dtype, ParamOf(a, ch));
      double ds = 0, db = 0;
      for (int64_t s = threadIdx.x; s < a.S; s += kThreads) {
        const double d = Io::Load(gg[j * a.S + s]), xh = (Io::Load(xg[j * a.S + s]) - mean) * rstd;
        ds += d * xh;
        db += d;
      }
      ds = BlockReduce(ds, SumOp{}, scratch);
      db = BlockReduce(db, SumOp{}, scratch);
      sum_g += db * gm;
      sum_gxh += ds * gm;
      if (threadIdx.x == 0) {
        partial[2 * (n * a.C + ch)] = ds;
        partial[2 * (n * a.C + ch) + 1] = db;
      }
    }
    if (dx == nullptr) continue;
    const double mg = m > 0 ? sum_g / m : 0, mgxh = m > 0 ? sum_gxh / m : 0;
    for (int64_t i = threadIdx.x; i < m; i += kThreads) {
      const double gm = LoadParam(scale, a.param_dtype, ParamOf(a, g * k + i / a.S));
      const double xh = (Io::Load(xg[i]) - mean) * rstd;
      dx[ng * m + i] = Io::Store(static_cast<float>(rstd * (Io::Load(gg[i]) * gm - mg - xh * mgxh)));
    }
  }
}

// dScale[p], dBias[p]: the partials of every (n, channel) whose entry is p, n then channel order.
__global__ void GroupNormParamGradKernel(GroupNormArgs a, const double* partial, void* dscale, void* dbias,
                                         DType t) {
  for (int64_t p = blockIdx.x * int64_t{kThreads} + threadIdx.x; p < a.affine; p += int64_t{gridDim.x} * kThreads) {
    double ds = 0, db = 0;
    const int64_t k = a.affine == a.C ? 1 : a.C / a.groups, first = a.affine == a.C ? p : p * k;
    for (int64_t n = 0; n < a.N; ++n)
      for (int64_t ch = first; ch < first + k; ++ch) {
        ds += partial[2 * (n * a.C + ch)];
        db += partial[2 * (n * a.C + ch) + 1];
      }
    if (dscale != nullptr) StoreParam(dscale, t, p, static_cast<float>(ds));
    if (dbias != nullptr) StoreParam(dbias, t, p, static_cast<float>(db));
  }
}

}  // namespace

void LaunchGroupNorm(DType dtype, const GroupNormArgs& a, const void* x, const void* scale, const void* bias, void* y,
                     void* stream) {
  if (a.N * a.groups == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    GroupNormKernel<Io><<<GridFor(a.N * a.groups), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        a, static_cast<const T*>(x), scale, bias, static_cast<T*>(y));
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchGroupNormGrad(DType dtype, const GroupNormArgs& a, const void* dy, const void* x, const void* scale,
                         void* dx, void* dscale, void* dbias, DType ds_dtype, double* partial, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.N * a.groups > 0)
    ForFloatIo(dtype, [&](auto io) {
      using Io = decltype(io);
      using T = typename Io::T;
      GroupNormGradKernel<Io><<<GridFor(a.N * a.groups), kThreads, 0, s>>>(
          a, static_cast<const T*>(dy), static_cast<const T*>(x), scale, static_cast<T*>(dx), partial);
    });
  if ((dscale != nullptr || dbias != nullptr) && a.affine > 0) {
    if (a.N == 0) {
      // No samples: the sums are zero (cudaMemset of the stored dtype's zero bits).
      if (dscale != nullptr) MT_CUDA_CHECK(cudaMemsetAsync(dscale, 0, a.affine * DTypeSize(ds_dtype), s));
      if (dbias != nullptr) MT_CUDA_CHECK(cudaMemsetAsync(dbias, 0, a.affine * DTypeSize(ds_dtype), s));
    } else {
      GroupNormParamGradKernel<<<BlocksFor(a.affine), kThreads, 0, s>>>(a, partial, dscale, dbias, ds_dtype);
    }
  }
  MT_CUDA_CHECK_LAUNCH();
}

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
