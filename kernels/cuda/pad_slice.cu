// Pad (by element size: any dtype of 1-8 bytes), and separable linear maps in float dtypes:
// Resize's forward and the adjoint PadGrad and ResizeGrad share. Each output
// element gathers, so no two threads write one element and sums run in a fixed order.
#include "kernels/common/pad_source.h"
#include "kernels/common/separable_map.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

template <typename E>
__global__ void PadKernel(PadArgs a, int64_t n, const E* x, E* y) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    int64_t off = 0, stride = 1, rem = i;
    bool inside = true;
    for (int d = a.rank - 1; d >= 0; --d) {
      const int64_t src = pad::Source(a.mode, rem % a.out_dims[d], a.begin[d], a.in_dims[d]);
      rem /= a.out_dims[d];
      inside &= src >= 0;
      off += src * stride;
      stride *= a.in_dims[d];
    }
    E fill;
    memcpy(&fill, &a.fill, sizeof(E));
    y[i] = inside ? x[off] : fill;
  }
}

// dY's element as float (sep::AdjointAt's `load`).
template <typename Io>
struct IoLoad {
  const typename Io::T* p;
  __device__ float operator()(int64_t off) const { return Io::Load(p[off]); }
};

template <typename Io>
__global__ void AdjointKernel(AdjointArgs a, int64_t n, const typename Io::T* dy, typename Io::T* dx) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads)
    dx[i] = Io::Store(sep::AdjointAt(a.rank, a.dy_dims, a.dx_dims, a.base, a.offsets, a.lists, a.weights, i,
                                     IoLoad<Io>{dy}));
}

template <typename Io>
__global__ void SeparableMapKernel(SeparableArgs a, int64_t n, const typename Io::T* x, typename Io::T* y) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    int64_t c[8], k[8];
    int64_t rem = i;
    bool outside = false;
    for (int d = a.rank - 1; d >= 0; --d) {
      c[d] = rem % a.y_dims[d];
      rem /= a.y_dims[d];
      k[d] = 0;
      outside |= a.outside[a.ob[d] + c[d]] != 0;
    }
    if (outside) {
      y[i] = Io::Store(a.fill);
      continue;
    }
    float s = 0;
    while (true) {
      float w = 1;
      int64_t src = 0;
      for (int d = 0; d < a.rank; ++d) {
        const int64_t j = a.base[d] + c[d] * a.width[d] + k[d];
        w *= a.w[j];
        src = src * a.x_dims[d] + a.idx[j];
      }
      if (w != 0) s += w * Io::Load(x[src]);
      int d = a.rank - 1;
      while (d >= 0 && ++k[d] == a.width[d]) k[d--] = 0;
      if (d < 0) break;
    }
    y[i] = Io::Store(s);
  }
}

}  // namespace

void LaunchPad(size_t esize, const PadArgs& a, const void* x, void* y, void* stream) {
  int64_t n = 1;
  for (int d = 0; d < a.rank; ++d) n *= a.out_dims[d];
  if (n == 0) return;
  ForElement(esize, [&](auto e) {
    using E = decltype(e);
    PadKernel<E><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, n, static_cast<const E*>(x),
                                                                                    static_cast<E*>(y));
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchSeparableAdjoint(DType dtype, const AdjointArgs& a, const void* dy, void* dx, void* stream) {
  int64_t n = 1;
  for (int d = 0; d < a.rank; ++d) n *= a.dx_dims[d];
  if (n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    AdjointKernel<Io><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        a, n, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchSeparableMap(DType dtype, const SeparableArgs& a, const void* x, void* y, void* stream) {
  int64_t n = 1;
  for (int d = 0; d < a.rank; ++d) n *= a.y_dims[d];
  if (n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    SeparableMapKernel<Io><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        a, n, static_cast<const T*>(x), static_cast<T*>(y));
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
