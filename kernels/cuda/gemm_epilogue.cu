// FusedMatMul's epilogue after the cuBLASLt product (kernels/cuda/gemm.cc): bias, activation and
// residual with the math of kernels/common/elementwise.h, the functors the CPU's elementwise
// kernels use. The activations are those the CPU kernel hands oneDNN (kernels/cpu/dnnl_matmul.cc).
#include "kernels/common/elementwise.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

__device__ __forceinline__ float Activate(float v, MatMulAct act) {
  switch (act) {
    case MatMulAct::kNone: return v;
    case MatMulAct::kRelu: return ew::Relu{}(v);
    case MatMulAct::kGelu: return ew::Gelu{}(v);
    case MatMulAct::kGeluTanh: return ew::GeluTanh{}(v);
    case MatMulAct::kSigmoid: return ew::Sigmoid{}(v);
    case MatMulAct::kTanh: return ew::Tanh{}(v);
  }
  return v;
}

template <typename Io>
__global__ void MatMulEpilogueKernel(typename Io::T* y, const typename Io::T* bias, const typename Io::T* z,
                                     int64_t n, int64_t N, int64_t S, MatMulAct act) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    float v = Io::Load(y[i]);
    if (bias != nullptr) v += Io::Load(bias[(i / S) % N]);
    v = Activate(v, act);
    if (z != nullptr) v += Io::Load(z[i]);
    y[i] = Io::Store(v);
  }
}

}  // namespace

void LaunchMatMulEpilogue(DType dtype, void* y, const void* bias, const void* z, int64_t n, int64_t N, int64_t S,
                          MatMulAct act, void* stream) {
  if (n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    MatMulEpilogueKernel<Io><<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), static_cast<const T*>(z), n, N, S, act);
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
