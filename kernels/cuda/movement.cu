// Data movement on the GPU without arithmetic, by element size (a bf16 and an fp16 move alike):
// Expand (a one-input broadcast copy), Where (three-input broadcast select) and Transpose (each
// output element reads its input offset through the permuted strides). Concat and Split need no
// kernel (kernels/cuda/movement_kernels.cc: one strided 2-D copy per part).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "runtime/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

template <typename E>
__global__ void BroadcastCopyKernel(BroadcastLayout l, const E* x, E* y) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < l.numel; i += int64_t{gridDim.x} * kThreads)
    y[i] = x[l.InputOffset(0, i)];
}

template <typename E>
__global__ void WhereKernel(BroadcastLayout l, const uint8_t* c, const E* a, const E* b, E* o) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < l.numel; i += int64_t{gridDim.x} * kThreads)
    o[i] = c[l.InputOffset(0, i)] ? a[l.InputOffset(1, i)] : b[l.InputOffset(2, i)];
}

template <typename E>
__global__ void TransposeKernel(TransposeArgs t, int64_t n, const E* x, E* y) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    int64_t off = 0, rem = i;
    for (int d = t.rank - 1; d >= 0; --d) {
      off += (rem % t.out_dims[d]) * t.in_strides[d];
      rem /= t.out_dims[d];
    }
    y[i] = x[off];
  }
}

// Calls fn(E{}) with the unsigned integer type of `esize` bytes.
template <typename Fn>
void ForElement(size_t esize, Fn&& fn) {
  switch (esize) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    case 8: fn(uint64_t{}); break;
    default: MT_CHECK(false) << "CUDA movement: element size " << esize;
  }
}

}  // namespace

void LaunchBroadcastCopy(size_t esize, const BroadcastLayout& l, const void* x, void* y, void* stream) {
  if (l.numel == 0) return;
  ForElement(esize, [&](auto e) {
    using E = decltype(e);
    BroadcastCopyKernel<E><<<BlocksFor(l.numel), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        l, static_cast<const E*>(x), static_cast<E*>(y));
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchWhere(size_t esize, const BroadcastLayout& l, const uint8_t* cond, const void* a, const void* b, void* o,
                 void* stream) {
  if (l.numel == 0) return;
  ForElement(esize, [&](auto e) {
    using E = decltype(e);
    WhereKernel<E><<<BlocksFor(l.numel), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        l, cond, static_cast<const E*>(a), static_cast<const E*>(b), static_cast<E*>(o));
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchTranspose(size_t esize, const TransposeArgs& a, int64_t n, const void* x, void* y, void* stream) {
  if (n == 0) return;
  ForElement(esize, [&](auto e) {
    using E = decltype(e);
    TransposeKernel<E><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        a, n, static_cast<const E*>(x), static_cast<E*>(y));
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
