// The CUDA kernels around cuDNN's convolutions (kernels/cuda/conv.cc): FusedConv's epilogue
// (bias, residual, activation), the bias gradient, and max pooling forward and backward with the
// CPU kernels' rules (kernels/cpu/dnnl_pool.cc, grad_pool.cc): the first maximum in scan order
// over the taps inside the input wins. The backward gathers: each input element walks the
// windows that contain it and takes dY of those whose winner it is, so no two threads write one
// element and the sum's order is fixed.
#include <cmath>

#include "kernels/common/reduce.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

__device__ __forceinline__ float Activate(float v, ConvAct act, float p0, float p1) {
  switch (act) {
    case ConvAct::kNone: return v;
    case ConvAct::kRelu: return v > 0.0f ? v : 0.0f;
    case ConvAct::kSigmoid: return 1.0f / (1.0f + expf(-v));
    case ConvAct::kTanh: return tanhf(v);
    case ConvAct::kLeakyRelu: return v >= 0.0f ? v : v * p0;
    case ConvAct::kClip: return fminf(fmaxf(v, p0), p1);
  }
  return v;
}

template <typename Io>
__global__ void EpilogueKernel(typename Io::T* y, const void* b, DType bt, const typename Io::T* z, int64_t n,
                               int64_t C, int64_t S, ConvAct act, float p0, float p1) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    float v = Io::Load(y[i]);
    if (b != nullptr) v += LoadParam(b, bt, (i / S) % C);
    if (z != nullptr) v += Io::Load(z[i]);
    y[i] = Io::Store(Activate(v, act, p0, p1));
  }
}

template <typename Io>
__global__ void BiasGradKernel(const typename Io::T* dy, typename Io::T* db, int64_t N, int64_t M, int64_t S) {
  __shared__ double scratch[kThreads / 32];
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    double s = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = threadIdx.x; i < S; i += kThreads) s += Io::Load(dy[(n * M + m) * S + i]);
    s = BlockReduce(s, SumOp{}, scratch);
    if (threadIdx.x == 0) db[m] = Io::Store(static_cast<float>(s));
  }
}

// fn(at) for each tap of output window (o0, o1, o2) inside the input, in scan order; `at` is the
// flat offset within a plane.
template <typename Fn>
__device__ __forceinline__ void ForEachTap(const PoolWindow& w, int64_t o0, int64_t o1, int64_t o2, Fn&& fn) {
  for (int64_t k0 = 0; k0 < w.k[0]; ++k0) {
    const int64_t i0 = o0 * w.s[0] + k0 * w.d[0] - w.pb[0];
    if (i0 < 0 || i0 >= w.in[0]) continue;
    for (int64_t k1 = 0; k1 < w.k[1]; ++k1) {
      const int64_t i1 = o1 * w.s[1] + k1 * w.d[1] - w.pb[1];
      if (i1 < 0 || i1 >= w.in[1]) continue;
      for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
        const int64_t i2 = o2 * w.s[2] + k2 * w.d[2] - w.pb[2];
        if (i2 >= 0 && i2 < w.in[2]) fn((i0 * w.in[1] + i1) * w.in[2] + i2);
      }
    }
  }
}

// The flat input offset (within a plane) of the first maximum of output window (o0, o1, o2), and
// its value; -1 when no tap is inside the input.
template <typename Io>
__device__ int64_t WindowArgMax(const typename Io::T* xp, const PoolWindow& w, int64_t o0, int64_t o1, int64_t o2,
                                float* best_v) {
  int64_t best = -1;
  float bv = 0;
  ForEachTap(w, o0, o1, o2, [&](int64_t at) {
    const float v = Io::Load(xp[at]);
    if (best < 0 || v > bv) {
      best = at;
      bv = v;
    }
  });
  *best_v = bv;
  return best;
}

template <typename Io>
__global__ void MaxPoolKernel(const typename Io::T* x, typename Io::T* y, int64_t planes, PoolWindow w) {
  const int64_t out = w.out[0] * w.out[1] * w.out[2], in = w.in[0] * w.in[1] * w.in[2];
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < planes * out;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t p = i / out, o = i % out;
    const int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[2] * w.out[1]);
    float v;
    const int64_t at = WindowArgMax<Io>(x + p * in, w, o0, o1, o2, &v);
    y[i] = Io::Store(at < 0 ? -INFINITY : v);
  }
}

// Output positions along one dim whose window covers input index i: o with o*s + k*d - pb = i.
__device__ __forceinline__ bool Covers(int64_t i, int64_t k, const PoolWindow& w, int dim, int64_t* o) {
  const int64_t t = i + w.pb[dim] - k * w.d[dim];
  if (t < 0 || t % w.s[dim] != 0) return false;
  *o = t / w.s[dim];
  return *o < w.out[dim];
}

// fn(o0, o1, o2) for each output window containing input element (i0, i1, i2), once per tap that
// lands on it (a window covering it with two taps, as dilations can, is visited twice).
template <typename Fn>
__device__ __forceinline__ void ForEachWindow(const PoolWindow& w, int64_t i0, int64_t i1, int64_t i2, Fn&& fn) {
  int64_t o0, o1, o2;
  for (int64_t k0 = 0; k0 < w.k[0]; ++k0) {
    if (!Covers(i0, k0, w, 0, &o0)) continue;
    for (int64_t k1 = 0; k1 < w.k[1]; ++k1) {
      if (!Covers(i1, k1, w, 1, &o1)) continue;
      for (int64_t k2 = 0; k2 < w.k[2]; ++k2)
        if (Covers(i2, k2, w, 2, &o2)) fn(o0, o1, o2);
    }
  }
}

template <typename Io>
__global__ void MaxPoolGradKernel(const typename Io::T* dy, const typename Io::T* x, typename Io::T* dx,
                                  int64_t planes, PoolWindow w, bool relu) {
  const int64_t out = w.out[0] * w.out[1] * w.out[2], in = w.in[0] * w.in[1] * w.in[2];
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < planes * in;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t p = i / in, at = i % in;
    const int64_t i2 = at % w.in[2], i1 = (at / w.in[2]) % w.in[1], i0 = at / (w.in[2] * w.in[1]);
    const typename Io::T* xp = x + p * in;
    const typename Io::T* dyp = dy + p * out;
    float g = 0;
    ForEachWindow(w, i0, i1, i2, [&](int64_t o0, int64_t o1, int64_t o2) {
      float v;
      if (WindowArgMax<Io>(xp, w, o0, o1, o2, &v) == at && (!relu || v > 0.0f))
        g += Io::Load(dyp[(o0 * w.out[1] + o1) * w.out[2] + o2]);
    });
    dx[i] = Io::Store(g);
  }
}


// The divisor of output o along one dim: its taps inside [lo, hi).
__device__ __forceinline__ int64_t TapsIn(const PoolWindow& w, int dim, int64_t o, bool include_pad) {
  const int64_t lo = include_pad ? -w.pb[dim] : 0, hi = include_pad ? w.in[dim] + w.pe[dim] : w.in[dim];
  int64_t n = 0;
  for (int64_t k = 0; k < w.k[dim]; ++k) {
    const int64_t i = o * w.s[dim] + k * w.d[dim] - w.pb[dim];
    n += i >= lo && i < hi;
  }
  return n;
}

template <typename Io>
__global__ void AveragePoolKernel(const typename Io::T* x, typename Io::T* y, int64_t planes, PoolWindow w,
                                  bool include_pad) {
  const int64_t out = w.out[0] * w.out[1] * w.out[2], in = w.in[0] * w.in[1] * w.in[2];
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < planes * out;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t p = i / out, o = i % out;
    const int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[2] * w.out[1]);
    const typename Io::T* xp = x + p * in;
    float s = 0;
    ForEachTap(w, o0, o1, o2, [&](int64_t at) { s += Io::Load(xp[at]); });
    const int64_t n = TapsIn(w, 0, o0, include_pad) * TapsIn(w, 1, o1, include_pad) * TapsIn(w, 2, o2, include_pad);
    y[i] = Io::Store(n > 0 ? s / static_cast<float>(n) : 0.0f);
  }
}

template <typename Io>
__global__ void AveragePoolGradKernel(const typename Io::T* dy, typename Io::T* dx, int64_t planes, PoolWindow w,
                                      bool include_pad) {
  const int64_t out = w.out[0] * w.out[1] * w.out[2], in = w.in[0] * w.in[1] * w.in[2];
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < planes * in;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t p = i / in, at = i % in;
    const int64_t i2 = at % w.in[2], i1 = (at / w.in[2]) % w.in[1], i0 = at / (w.in[2] * w.in[1]);
    const typename Io::T* dyp = dy + p * out;
    float g = 0;
    ForEachWindow(w, i0, i1, i2, [&](int64_t o0, int64_t o1, int64_t o2) {
      const int64_t n = TapsIn(w, 0, o0, include_pad) * TapsIn(w, 1, o1, include_pad) * TapsIn(w, 2, o2, include_pad);
      if (n > 0) g += Io::Load(dyp[(o0 * w.out[1] + o1) * w.out[2] + o2]) / static_cast<float>(n);
    });
    dx[i] = Io::Store(g);
  }
}

}  // namespace

void LaunchAveragePool(DType dtype, const void* x, void* y, int64_t planes, const PoolWindow& w, bool include_pad,
                       void* stream) {
  const int64_t n = planes * w.out[0] * w.out[1] * w.out[2];
  if (n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    AveragePoolKernel<Io><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(x), static_cast<T*>(y), planes, w, include_pad);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchAveragePoolGrad(DType dtype, const void* dy, void* dx, int64_t planes, const PoolWindow& w,
                           bool include_pad, void* stream) {
  const int64_t n = planes * w.in[0] * w.in[1] * w.in[2];
  if (n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    AveragePoolGradKernel<Io><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), planes, w, include_pad);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchConvEpilogue(DType dtype, void* y, const void* b, DType b_dtype, const void* z, int64_t N, int64_t C,
                        int64_t S, ConvAct act, float p0, float p1, void* stream) {
  const int64_t n = N * C * S;
  if (n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    EpilogueKernel<Io><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(y), b, b_dtype, static_cast<const T*>(z), n, C, S, act, p0, p1);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchBiasGrad(DType dtype, const void* dy, void* db, int64_t N, int64_t M, int64_t S, void* stream) {
  if (M == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    BiasGradKernel<Io><<<GridFor(M), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(dy), static_cast<T*>(db), N, M, S);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchMaxPool(DType dtype, const void* x, void* y, int64_t planes, const PoolWindow& w, void* stream) {
  const int64_t n = planes * w.out[0] * w.out[1] * w.out[2];
  if (n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    MaxPoolKernel<Io><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(x), static_cast<T*>(y), planes, w);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchMaxPoolGrad(DType dtype, const void* dy, const void* x, void* dx, int64_t planes, const PoolWindow& w,
                       bool relu, void* stream) {
  const int64_t n = planes * w.in[0] * w.in[1] * w.in[2];
  if (n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    MaxPoolGradKernel<Io><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), planes, w, relu);
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
