// Math shared by the reduction, softmax, normalization and loss kernels of both backends:
// storage-type load/store (low types load to float, store with round-to-nearest-even), a
// vectorizable exp, and the numerically stable softmax / log-softmax of one strided row.
// Everything is MT_HD so the CUDA kernels instantiate exactly this arithmetic.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/fastmath.h"
#include "graph/half.h"

#if defined(__CUDACC__)
#define MT_SIMD_SUM(var)
#define MT_SIMD_MAX_COUNT(mx, count)
#define MT_SIMD
#else
#define MT_PRAGMA_(x) _Pragma(#x)
// Lets the compiler reassociate a sum (a max) so the loop vectorizes (OpenMP SIMD, no threads).
#define MT_SIMD_SUM(var) MT_PRAGMA_(omp simd reduction(+ : var))
#define MT_SIMD_MAX_COUNT(mx, count) MT_PRAGMA_(omp simd reduction(max : mx) reduction(+ : count))
// A loop without a reduction that should vectorize.
#define MT_SIMD MT_PRAGMA_(omp simd)
#endif

namespace mixtrain::red {

// Storage adapters: T is what lives in memory; arithmetic happens in float.
struct F32Io {
  using T = float;
  static MT_HD float Load(float v) { return v; }
  static MT_HD float Store(float v) { return v; }
};
struct F16Io {
  using T = uint16_t;
  static MT_HD float Load(uint16_t v) { return HalfToFloat(v); }
  static MT_HD uint16_t Store(float v) { return FloatToHalf(v); }
};
struct BF16Io {
  using T = uint16_t;
  static MT_HD float Load(uint16_t v) { return BFloat16ToFloat(v); }
  static MT_HD uint16_t Store(float v) { return FloatToBFloat16(v); }
};
// Wider types compute in their own width (ONNX's double and integer reductions and CumSum).
struct F64Io {
  using T = double;
  static MT_HD double Load(double v) { return v; }
  static MT_HD double Store(double v) { return v; }
};
struct I32Io {
  using T = int32_t;
  static MT_HD int64_t Load(int32_t v) { return v; }
  static MT_HD int32_t Store(int64_t v) { return static_cast<int32_t>(v); }  // wraps like numpy
};
struct I64Io {
  using T = int64_t;
  static MT_HD int64_t Load(int64_t v) { return v; }
  static MT_HD int64_t Store(int64_t v) { return v; }
};

// exp(x) for float without a libm call, the same on host and device: fastmath.h's polynomial
// (within 2 ulp, gradual underflow, inf above 88.72, NaN kept), which vectorizes in the CPU loops.
MT_HD float FastExp(float x) { return fm::Exp(x); }

// Softmax (or log-softmax) of the contiguous row x[0..n) into y[0..n):
//   softmax: exp(x - max) / sum(exp(x - max));  log-softmax: x - max - log(sum(exp(x - max))).
// Subtracting the max keeps exp from overflowing. The sum is float in vector lanes; rows are at
// most a vocabulary long, where float lanes lose < 1e-6 relative. `e`, when given, is float
// scratch for n values: softmax then keeps each exp instead of computing it twice (on the CPU,
// where short rows such as attention's are bound by the exp work).
template <typename In, typename Out, bool kLog>
MT_HD void SoftmaxRow(const typename In::T* x, typename Out::T* y, int64_t n,
                      float* e = nullptr) {
  // The max skips NaN (so it vectorizes); a NaN anywhere, counted alongside, makes the whole
  // row NaN, as the reference does.
  float m = -INFINITY;
  int nans = 0;
  MT_SIMD_MAX_COUNT(m, nans)
  for (int64_t i = 0; i < n; ++i) {
    float v = In::Load(x[i]);
    m = v > m ? v : m;
    nans += v != v;
  }
  if (nans > 0) m = NAN;
  float sum = 0;
  if (!kLog && e != nullptr) {
    MT_SIMD_SUM(sum)
    for (int64_t i = 0; i < n; ++i) {
      float t = FastExp(In::Load(x[i]) - m);
      e[i] = t;
      sum += t;
    }
    float inv = 1.0f / sum;
    MT_SIMD
    for (int64_t i = 0; i < n; ++i) y[i] = Out::Store(e[i] * inv);
    return;
  }
  MT_SIMD_SUM(sum)
  for (int64_t i = 0; i < n; ++i) sum += FastExp(In::Load(x[i]) - m);
  if (kLog) {
    // (x - m) - log(sum), not x - (m + log(sum)): the latter rounds away digits for large m.
    float ls = std::log(sum);
    MT_SIMD
    for (int64_t i = 0; i < n; ++i) y[i] = Out::Store((In::Load(x[i]) - m) - ls);
  } else {
    float inv = 1.0f / sum;
    MT_SIMD
    for (int64_t i = 0; i < n; ++i) y[i] = Out::Store(FastExp(In::Load(x[i]) - m) * inv);
  }
}

// Mean and biased variance of the contiguous x[0..n), two-pass (a one-pass E[x^2] - E[x]^2
// cancels catastrophically when the mean is large against the spread); sums in double.
template <typename In>
MT_HD void MeanVar(const typename In::T* x, int64_t n, double* mean, double* var) {
  double s = 0;
  MT_SIMD_SUM(s)
  for (int64_t i = 0; i < n; ++i) s += In::Load(x[i]);
  double m = n > 0 ? s / static_cast<double>(n) : 0.0;
  float mf = static_cast<float>(m);
  double q = 0;
  MT_SIMD_SUM(q)
  for (int64_t i = 0; i < n; ++i) {
    float d = In::Load(x[i]) - mf;
    q += static_cast<double>(d) * d;
  }
  // Correct for mf != m (the float-rounded mean): sum (x - m)^2 = q - n (m - mf)^2.
  double dm = m - static_cast<double>(mf);
  *mean = m;
  *var = n > 0 ? q / static_cast<double>(n) - dm * dm : 0.0;
}

}  // namespace mixtrain::red
