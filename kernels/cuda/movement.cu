// Data movement on the GPU without arithmetic, by element size (a bf16 and an fp16 move alike):
// Expand (a one-input broadcast copy), Where (three-input broadcast select), Transpose (each
// output element reads its input offset through the permuted strides) and its inverse scatter. Concat and Split need no
// kernel (kernels/cuda/movement_kernels.cc: one strided 2-D copy per part).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

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
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads)
    y[i] = x[StridedOffset(t, i)];
}

// Transpose's inverse: each element goes to the offset its strides give (distinct offsets).
template <typename E>
__global__ void StridedScatterKernel(TransposeArgs t, int64_t n, const E* x, E* y) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads)
    y[StridedOffset(t, i)] = x[i];
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

void LaunchStridedScatter(size_t esize, const TransposeArgs& a, int64_t n, const void* x, void* y, void* stream) {
  if (n == 0) return;
  ForElement(esize, [&](auto e) {
    using E = decltype(e);
    StridedScatterKernel<E><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        a, n, static_cast<const E*>(x), static_cast<E*>(y));
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
