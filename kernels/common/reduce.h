// Math shared by the reduction, softmax, normalization and loss kernels of both backends:
// storage-type load/store (low types load to float, store with round-to-nearest-even), a
// vectorizable exp, and the numerically stable softmax / log-softmax of one strided row.
// Everything is MT_HD so the CUDA kernels instantiate exactly this arithmetic.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/half.h"

#if defined(__CUDACC__)
#define MT_SIMD_SUM(var)
#else
#define MT_PRAGMA_(x) _Pragma(#x)
// Lets the compiler reassociate a sum so the loop vectorizes (OpenMP SIMD, no threads).
#define MT_SIMD_SUM(var) MT_PRAGMA_(omp simd reduction(+ : var))
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

// exp(x) for float without a libm call (the same result on host and device): range reduction x = n*ln2 + r with
// |r| <= ln2/2 (ln2 split in two for an exact product), a degree-6 polynomial for e^r (Cephes
// coefficients, max relative error ~2 ulp), and 2^n built in the exponent bits. Inputs below
// -87.3 flush to 0 (softmax's shifted inputs are <= 0, so only underflow matters); above 88.7
// returns +inf. TODO(issue 3): GCC 12 at -O2 (SSE2) does not vectorize loops over it; the CPU
// softmax needs explicit vector code (chosen from CPU features) to match PyTorch's speed.
MT_HD float FastExp(float x) {
  const float hi = 88.72283935546875f, lo = -87.33654022216797f;
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (no floor/round call: SSE2 has none).
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n in two halves so n = 128 (x near 88.7) does not overflow the exponent field early.
  int32_t ni = static_cast<int32_t>(n);
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = BitsToFloat(static_cast<uint32_t>(n1 + 127) << 23);
  float s2 = BitsToFloat(static_cast<uint32_t>(n2 + 127) << 23);
  float y = p * s1 * s2;
  y = x < lo ? 0.0f : y;
  y = x > hi ? INFINITY : y;
  return x != x ? x : y;  // NaN in, NaN out
}

// Softmax (or log-softmax) of the contiguous row x[0..n) into y[0..n):
//   softmax: exp(x - max) / sum(exp(x - max));  log-softmax: x - max - log(sum(exp(x - max))).
// Subtracting the max keeps exp from overflowing. The sum is float in vector lanes; rows are at
// most a vocabulary long, where float lanes lose < 1e-6 relative.
template <typename In, typename Out, bool kLog>
MT_HD void SoftmaxRow(const typename In::T* x, typename Out::T* y, int64_t n) {
  float m = -INFINITY;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    float v = In::Load(x[i]);
    m = v > m ? v : m;
    nan |= v != v;
  }
  if (nan) m = NAN;
  float sum = 0;
  MT_SIMD_SUM(sum)
  for (int64_t i = 0; i < n; ++i) sum += FastExp(In::Load(x[i]) - m);
  if (kLog) {
    // (x - m) - log(sum), not x - (m + log(sum)): the latter rounds away digits for large m.
    float ls = std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i] = Out::Store((In::Load(x[i]) - m) - ls);
  } else {
    float inv = 1.0f / sum;
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
