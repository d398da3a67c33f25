// Float transcendental functions written as branch-free polynomials, shared by the CPU and CUDA
// kernels (elementwise ops, softmax, normalization, losses).
//
// Why not libm: a call to expf/erff/tanhf per element cannot be vectorized, and it made Erf and
// Softmax a quarter of gpt_mini's forward time each. These functions are straight-line float
// arithmetic (selects instead of branches, integer tricks for 2^n and exponent extraction), so a
// `#pragma omp simd` loop over them compiles to AVX2/AVX-512 code, and nvcc compiles them as is.
//
// Accuracy, checked on millions of inputs against the double-precision functions rounded to
// float (tests/kernels/fastmath_test.cc): within 2 ulp for Exp, Log, Erf and Tanh; Sigmoid and
// the Gelus inherit their parts' errors. Special values follow C: NaN in gives NaN out,
// Exp(-inf) = 0, Exp(+inf) = inf, Log(0) = -inf, Log(x < 0) = NaN, Erf/Tanh(+-inf) = +-1.
// The polynomials are least-squares fits on Chebyshev nodes (computed with numpy; float
// coefficients written in hex so they are exact).
#pragma once

#include <cmath>
#include <cstdint>

#include "graph/half.h"

namespace mixtrain::fm {

// c ? a : b on the bits. With a plain ?: GCC sinks the computation of the unused arm into a
// branch and then, under its default -ftrapping-math, refuses to if-convert the loop, so
// nothing vectorizes; both arms as operands of an integer mask keep the code straight-line.
MT_HD float Select(bool c, float a, float b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return BitsToFloat((FloatToBits(a) & m) | (FloatToBits(b) & ~m));
}

// Round to the nearest integer (ties to even) for |x| < 2^22, without a libm call: adding and
// subtracting 1.5 * 2^23 leaves no fraction bits.
MT_HD float RoundToInt(float x) { return (x + 12582912.0f) - 12582912.0f; }

// p * 2^n for integer n in [-126, 128], as a product with two normal powers of two so the top
// (n = 128, where 2^n itself is not a float) needs no special case.
MT_HD float ScaleByPow2(float p, int32_t n) {
  const int32_t n1 = n >> 1, n2 = n - n1;
  return p * BitsToFloat(static_cast<uint32_t>(n1 + 127) << 23) *
         BitsToFloat(static_cast<uint32_t>(n2 + 127) << 23);
}

// e^x: x = n ln2 + r with |r| <= ln2/2 (ln2 split so n*ln2_hi is exact), a degree-6 polynomial
// for e^r, then 2^n. Results below the smallest normal float (x < -87.34) flush to 0: producing
// subnormals costs a microcode assist per element on x86, and softmax rows with masked (-inf)
// entries would hit it on every masked element. Above 88.72 the result is inf.
MT_HD float Exp(float x) {
  const float hi = 88.72283935546875f, lo = -87.33654022216797f;
  float xc = Select(x > hi, hi, x);
  xc = Select(xc < lo, lo, xc);
  const float n = RoundToInt(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // NaN x makes n NaN, and converting NaN to int is undefined: use 0 (the result is NaN anyway).
  float y = ScaleByPow2(p, static_cast<int32_t>(Select(n != n, 0.0f, n)));
  y = Select(x < lo, 0.0f, y);
  y = Select(x > hi, INFINITY, y);
  return Select(x != x, x, y);
}

// ln x: x = 2^e m with m in [sqrt(1/2), sqrt(2)), f = m - 1, ln(1 + f) = f - f^2/2 + f^3 P(f),
// plus e ln2 (ln2 split in two). Subnormal inputs are scaled by 2^23 first.
MT_HD float Log(float x) {
  const bool sub = x < 1.17549435e-38f;
  const float xs = Select(sub, x * 8388608.0f, x);
  const uint32_t u = FloatToBits(xs);
  float fe = static_cast<float>(static_cast<int32_t>(u >> 23) - 127);
  fe = Select(sub, fe - 23.0f, fe);
  float m = BitsToFloat((u & 0x007fffffu) | 0x3f800000u);
  const bool big = m > 1.41421356f;
  m = Select(big, m * 0.5f, m);
  fe = Select(big, fe + 1.0f, fe);
  const float f = m - 1.0f, z = f * f;
  float p = -0x1.2d9544p-4f;
  p = p * f + 0x1.0276dcp-3f;
  p = p * f + -0x1.0e610cp-3f;
  p = p * f + 0x1.235f0ep-3f;
  p = p * f + -0x1.5467dap-3f;
  p = p * f + 0x1.9998b0p-3f;
  p = p * f + -0x1.00023cp-2f;
  p = p * f + 0x1.555564p-2f;
  float y = f * z * p + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  y = (f + y) + fe * 0.693359375f;
  y = Select(x == INFINITY, x, y);
  y = Select(x == 0.0f, -INFINITY, y);
  return Select(!(x >= 0.0f), NAN, y);  // negative or NaN
}

// erf x: x + x Q(x^2) on |x| < 1 (the x + ... form keeps the leading term exact); a degree-12
// polynomial in |x| - 2.46 on [1, 3.92]; +-1 beyond, where erf rounds to 1 in float.
MT_HD float Erf(float x) {
  const float a = fabsf(x);
  const float z = x * x;
  float q = 0x1.4b464cp-14f;
  q = q * z + -0x1.a4b506p-11f;
  q = q * z + 0x1.5422a4p-8f;
  q = q * z + -0x1.b7fd3ap-6f;
  q = q * z + 0x1.ce2d40p-4f;
  q = q * z + -0x1.812740p-2f;
  q = q * z + 0x1.06eba8p-3f;
  const float small = x + x * q;
  const float t = Select(a > 3.92f, 3.92f, a) - 2.46f;
  float p = -0x1.339740p-17f;
  p = p * t + 0x1.a985dep-16f;
  p = p * t + 0x1.b356aep-15f;
  p = p * t + -0x1.3c0194p-12f;
  p = p * t + 0x1.99a806p-12f;
  p = p * t + 0x1.e3fdacp-12f;
  p = p * t + -0x1.8461cep-9f;
  p = p * t + 0x1.bd8618p-8f;
  p = p * t + -0x1.4490dep-7f;
  p = p * t + 0x1.4233bep-7f;
  p = p * t + -0x1.ac53aap-8f;
  p = p * t + 0x1.5c2794p-9f;
  p = p * t + 0x1.ffbe08p-1f;
  p = Select(a > 3.92f, 1.0f, p);
  const float large = Select(x != x, x, copysignf(p, x));
  return Select(a < 1.0f, small, large);
}

// tanh x: x + x^3 P(x^2) on |x| < 0.625; 1 - 2 / (e^{2|x|} + 1) beyond, with |x| capped at 10
// where tanh is 1 in float.
MT_HD float Tanh(float x) {
  float a = fabsf(x);
  const float z = x * x;
  float p = 0x1.19ae40p-9f;
  p = p * z + -0x1.0c329cp-7f;
  p = p * z + 0x1.639956p-6f;
  p = p * z + -0x1.b9f008p-5f;
  p = p * z + 0x1.11106ep-3f;
  p = p * z + -0x1.555554p-2f;
  const float small = x + x * z * p;
  a = Select(a > 10.0f, 10.0f, a);
  const float large = 1.0f - 2.0f / (Exp(2.0f * a) + 1.0f);
  return copysignf(Select(fabsf(x) < 0.625f, small, large), x);  // copysign keeps tanh(-0) = -0
}

// 1 / (1 + e^-x): e^-x overflows to inf for x < -88.7, giving the limit 0.
MT_HD float Sigmoid(float x) { return 1.0f / (1.0f + Exp(-x)); }

// Gelu with the exact erf: x Phi(x) = x/2 (1 + erf(x / sqrt 2)).
MT_HD float Gelu(float x) { return 0.5f * x * (1.0f + Erf(x * 0.70710678118654752f)); }

// Gelu's tanh approximation (approximate="tanh"), 0.5 x (1 + tanh(u)) with
// u = sqrt(2/pi) (x + 0.044715 x^3), computed as the equal x * sigmoid(2u) = x / (1 + e^-2u):
// one Exp and one division instead of Tanh's two branches, and for x < 0 no cancellation in
// 1 + tanh (GELU(-10) is -1.2e-37, not -0).
MT_HD float GeluTanh(float x) {
  const float k2 = 1.59576912160573072f;  // 2 sqrt(2 / pi)
  return x / (1.0f + Exp(-k2 * (x + 0.044715f * x * x * x)));
}

}  // namespace mixtrain::fm
