// CUDA kernels of the training-step ops: ai.mixtrain Adam and SGD on fp32 master weights and
// state (kernels/common/optimizer.h, the very functors the CPU loops run), AllFinite and
// UpdateLossScale. The learning rate, step, skip flag and loss scale are read on the device, so
// a step needs no host round trip (docs/architecture.md, "Devices").
#include <cmath>

#include "graph/half.h"
#include "kernels/common/optimizer.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 8192 ? (b > 0 ? b : 1) : 8192);
}

__device__ __forceinline__ int64_t LoadInt(const void* p, bool is_i64) {
  return is_i64 ? *static_cast<const int64_t*>(p) : *static_cast<const int32_t*>(p);
}

__global__ void AdamKernel(AdamAttrs a, const float* lr, const void* step, bool step_is_i64,
                           const uint8_t* skip, float* x, const float* g, float* m, float* v, int64_t n) {
  if (skip != nullptr && *skip != 0) return;
  AdamStep s;
  s.lr = *lr;
  s.beta1 = a.beta1;
  s.beta2 = a.beta2;
  s.eps = a.eps;
  s.weight_decay = a.weight_decay;
  s.decoupled = a.decoupled;
  // As the CPU kernel: bias corrections in double from the 1-based step t = step + 1.
  const double t = static_cast<double>(LoadInt(step, step_is_i64) + 1);
  s.bias1 = static_cast<float>(1.0 - pow(static_cast<double>(a.beta1), t));
  s.bias2_sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(a.beta2), t)));
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads)
    s(x[i], g[i], m[i], v[i]);
}

__global__ void SgdKernel(SgdAttrs a, const float* lr, const uint8_t* skip, float* x, const float* g,
                          float* buf, int64_t n) {
  if (skip != nullptr && *skip != 0) return;
  SgdStep s{*lr, a.momentum, a.weight_decay, a.nesterov};
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads)
    s(x[i], g[i], buf != nullptr ? buf + i : nullptr);
}

// Threads that see a non-finite value clear the flag; the flag is only ever written with 0, so
// the races are benign.
template <typename T, float (*kLoad)(T)>
__global__ void AllFiniteKernel(const T* x, int64_t n, uint8_t* all_finite) {
  bool ok = true;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads)
    ok &= isfinite(kLoad(x[i]));
  if (__syncthreads_and(ok) == 0 && threadIdx.x == 0) *all_finite = 0;
}

__device__ float LoadF32(float v) { return v; }
__device__ float LoadF16(uint16_t v) { return HalfToFloat(v); }
__device__ float LoadBF16(uint16_t v) { return BFloat16ToFloat(v); }

__global__ void UpdateLossScaleKernel(LossScaleAttrs a, const uint8_t* found_inf, const float* scale,
                                      const void* good, bool good_is_i64, float* scale_out, int64_t* good_out) {
  LossScaleUpdate u{a.growth, a.backoff, a.max_scale, a.interval};
  float s = *scale;
  int64_t k = LoadInt(good, good_is_i64);
  u(*found_inf != 0, s, k);
  *scale_out = s;
  *good_out = k;
}

}  // namespace

void LaunchAdam(const AdamAttrs& a, const float* lr, const void* step, bool step_is_i64,
                const uint8_t* skip, float* x, const float* g, float* m, float* v, int64_t n,
                void* stream) {
  if (n == 0) return;
  AdamKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, lr, step, step_is_i64, skip, x,
                                                                            g, m, v, n);
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchSgd(const SgdAttrs& a, const float* lr, const uint8_t* skip, float* x, const float* g,
               float* buf, int64_t n, void* stream) {
  if (n == 0) return;
  SgdKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, lr, skip, x, g, buf, n);
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchAllFinite(DType dtype, const void* x, int64_t n, uint8_t* all_finite, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kF32:
      AllFiniteKernel<float, LoadF32><<<Blocks(n), kThreads, 0, s>>>(static_cast<const float*>(x), n, all_finite);
      break;
    case DType::kF16:
      AllFiniteKernel<uint16_t, LoadF16><<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(x), n,
                                                                         all_finite);
      break;
    case DType::kBF16:
      AllFiniteKernel<uint16_t, LoadBF16><<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(x), n,
                                                                          all_finite);
      break;
    default: MT_CHECK(false) << "LaunchAllFinite: unsupported dtype " << DTypeName(dtype);
  }
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchUpdateLossScale(const LossScaleAttrs& a, const uint8_t* found_inf, const float* scale,
                           const void* good, bool good_is_i64, float* scale_out, int64_t* good_out,
                           void* stream) {
  UpdateLossScaleKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(a, found_inf, scale, good, good_is_i64,
                                                                        scale_out, good_out);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
