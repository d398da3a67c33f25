// Elementwise math shared by the CPU and CUDA backends: storage-type adapters (load fp16/bf16 as
// float, round to nearest even on store) and one plain functor per op. The functors hold only
// their attributes, so a CPU loop and a CUDA kernel instantiate the very same code; the CPU tests
// therefore check the CUDA math too (docs/architecture.md, "Devices").
//
// Float ops take and return float (fp16/bf16 are computed in float). Arithmetic, comparison and
// min/max functors are templates so the same functor serves int32/int64/int8/uint8/double
// tensors (ONNX uses them for shape arithmetic).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/common/fastmath.h"
#include "graph/half.h"

namespace mixtrain::ew {

// --- storage types -------------------------------------------------------------------------------
// Distinct wrapper types, so fp16 and bf16 (both 16-bit patterns) select different conversions.
struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};

// Io<S>: the compute type C of storage type S, and the load/store conversions between them.
template <typename S>
struct Io {
  using C = S;
  static MT_HD C Load(S v) { return v; }
  static MT_HD S Store(C v) { return v; }
};
template <>
struct Io<f16> {
  using C = float;
  static MT_HD float Load(f16 v) { return HalfToFloat(v.bits); }
  static MT_HD f16 Store(float v) { return f16{FloatToHalf(v)}; }
};
template <>
struct Io<bf16> {
  using C = float;
  static MT_HD float Load(bf16 v) { return BFloat16ToFloat(v.bits); }
  static MT_HD bf16 Store(float v) { return bf16{FloatToBFloat16(v)}; }
};

template <typename T>
inline constexpr bool kIsLowFloat = false;
template <>
inline constexpr bool kIsLowFloat<f16> = true;
template <>
inline constexpr bool kIsLowFloat<bf16> = true;

// --- unary float ops -----------------------------------------------------------------------------
struct Sqrt {
  MT_HD float operator()(float x) const { return sqrtf(x); }
};
struct Reciprocal {
  MT_HD float operator()(float x) const { return 1.0f / x; }
};
// Exp, Log, Erf, Tanh, Sigmoid and the Gelus use the branch-free polynomials of fastmath.h
// (within 2-3 ulp of libm) so the CPU loops vectorize.
struct Exp {
  MT_HD float operator()(float x) const { return fm::Exp(x); }
};
struct Log {
  MT_HD float operator()(float x) const { return fm::Log(x); }
};
struct Erf {
  MT_HD float operator()(float x) const { return fm::Erf(x); }
};
struct Tanh {
  MT_HD float operator()(float x) const { return fm::Tanh(x); }
};
// 1 / (1 + e^-x): e^-x overflows to inf for x < -88, giving the correct limit 0.
struct Sigmoid {
  MT_HD float operator()(float x) const { return fm::Sigmoid(x); }
};
// log(1 + e^x) written as max(x, 0) + log1p(e^-|x|), which neither overflows nor loses the
// small tail for large |x|.
struct Softplus {
  MT_HD float operator()(float x) const {
    return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x)));
  }
};
// Relu keeps NaN (x < 0 is false for NaN), as PyTorch does.
struct Relu {
  template <typename T>
  MT_HD T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
struct LeakyRelu {
  float alpha = 0.01f;
  MT_HD float operator()(float x) const { return x < 0.0f ? alpha * x : x; }
};
// Gelu (opset 20). approximate="none": x * Phi(x) with the exact erf; "tanh": the tanh formula.
struct Gelu {
  MT_HD float operator()(float x) const { return fm::Gelu(x); }
};
struct GeluTanh {
  MT_HD float operator()(float x) const { return fm::GeluTanh(x); }
};
// Gelu's input gradient dy * d/dx [x Phi(x)] = dy * (Phi(x) + x phi(x)), and the same for the
// tanh form, with the vectorizable fastmath parts (ai.mixtrain.GeluGrad).
struct GeluGrad {
  MT_HD float operator()(float dy, float x) const {
    constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
    return dy * (0.5f * (1.0f + fm::Erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * fm::Exp(-0.5f * x * x));
  }
};
// With s = sigmoid(2u) = (1 + tanh u) / 2 (fm::GeluTanh): d/dx [x s] = s + 2 x s (1 - s) u',
// u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
struct GeluTanhGrad {
  MT_HD float operator()(float dy, float x) const {
    constexpr float kSqrt2OverPi = 0.79788456080286536f, kA = 0.044715f;
    const float s = 1.0f / (1.0f + fm::Exp(-2.0f * kSqrt2OverPi * (x + kA * x * x * x)));
    return dy * (s + 2.0f * x * s * (1.0f - s) * kSqrt2OverPi * (1.0f + 3.0f * kA * x * x));
  }
};

// --- unary ops on any numeric type --------------------------------------------------------------
struct Neg {
  template <typename T>
  MT_HD T operator()(T x) const { return -x; }
};
struct Abs {
  template <typename T>
  MT_HD T operator()(T x) const { return x < T(0) ? -x : x; }
};
// Clip to [lo, hi]; NaN stays NaN (both comparisons are false).
template <typename T>
struct Clip {
  T lo, hi;
  MT_HD T operator()(T x) const { return x < lo ? lo : (x > hi ? hi : x); }
};
struct Not {
  MT_HD bool operator()(bool x) const { return !x; }
};

// --- binary ops ----------------------------------------------------------------------------------
struct Add {
  template <typename T>
  MT_HD T operator()(T a, T b) const { return a + b; }
};
struct Sub {
  template <typename T>
  MT_HD T operator()(T a, T b) const { return a - b; }
};
struct Mul {
  template <typename T>
  MT_HD T operator()(T a, T b) const { return a * b; }
};
// Integer division truncates toward zero (as ONNX's reference and C++ do). Division by zero and
// INT_MIN / -1 would trap on x86, so they produce 0 instead of killing the process.
struct Div {
  template <typename T>
  MT_HD T operator()(T a, T b) const {
    if constexpr (std::numeric_limits<T>::is_integer) {
      if (b == T(0)) return T(0);
      if constexpr (std::numeric_limits<T>::is_signed) {
        // -a in the unsigned type: INT_MIN / -1 wraps to INT_MIN instead of overflowing.
        if (b == T(-1)) return static_cast<T>(std::make_unsigned_t<T>(0) - static_cast<std::make_unsigned_t<T>>(a));
      }
    }
    return a / b;
  }
};
// PRelu(x, slope): x below zero scaled by its slope (NaN stays NaN).
struct PRelu {
  template <typename T>
  MT_HD T operator()(T x, T slope) const { return x < T(0) ? slope * x : x; }
};
// Max/Min propagate NaN from either side (numpy.maximum semantics, which ONNX's reference uses).
struct Max {
  template <typename T>
  MT_HD T operator()(T a, T b) const { return (a > b || a != a) ? a : b; }
};
struct Min {
  template <typename T>
  MT_HD T operator()(T a, T b) const { return (a < b || a != a) ? a : b; }
};
struct Pow {
  MT_HD float operator()(float a, float b) const { return powf(a, b); }
  MT_HD double operator()(double a, double b) const { return pow(a, b); }
};
// Integer power by squaring; negative exponents give 1/a^-b truncated (0 unless |a| == 1).
struct IntPow {
  template <typename T>
  MT_HD T operator()(T a, T b) const {
    if (b < T(0)) return a == T(1) ? T(1) : (a == T(-1) ? ((b & T(1)) ? T(-1) : T(1)) : T(0));
    T r = 1;
    while (b) {
      if (b & T(1)) r *= a;
      a *= a;
      b >>= 1;
    }
    return r;
  }
};
struct Square {  // Pow with the exponent 2, the common case (LayerNorm decompositions)
  MT_HD float operator()(float x) const { return x * x; }
};
struct Cube {  // Pow with the exponent 3 (tanh-GELU's x^3), as PyTorch computes it: x * x * x
  MT_HD float operator()(float x) const { return x * x * x; }
};

// Comparisons return bool.
struct Equal {
  template <typename T>
  MT_HD bool operator()(T a, T b) const { return a == b; }
};
struct Less {
  template <typename T>
  MT_HD bool operator()(T a, T b) const { return a < b; }
};
struct LessOrEqual {
  template <typename T>
  MT_HD bool operator()(T a, T b) const { return a <= b; }
};
struct Greater {
  template <typename T>
  MT_HD bool operator()(T a, T b) const { return a > b; }
};
// Relu's input gradient from its output: dy where y > 0, else 0 (a NaN y gives 0, as PyTorch's
// threshold_backward).
struct ReluGrad {
  template <typename T>
  MT_HD T operator()(T dy, T y) const { return y > T(0) ? dy : T(0); }
};
struct GreaterOrEqual {
  template <typename T>
  MT_HD bool operator()(T a, T b) const { return a >= b; }
};
struct And {
  MT_HD bool operator()(bool a, bool b) const { return a && b; }
};
struct Or {
  MT_HD bool operator()(bool a, bool b) const { return a || b; }
};
struct Xor {
  MT_HD bool operator()(bool a, bool b) const { return a != b; }
};

// --- Cast ----------------------------------------------------------------------------------------
// double -> float rounding to odd (truncate, then set the last bit when inexact). A later
// float -> fp16/bf16 round-to-nearest-even then gives the correctly rounded result; plain
// double -> float -> half would round twice and can be off by one ulp on ties.
MT_HD float DoubleToFloatRoundOdd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;
  if (fabs(static_cast<double>(f)) > fabs(d)) f = nextafterf(f, 0.0f);
  return BitsToFloat(FloatToBits(f) | 1u);
}

// Value conversion from S's compute type to D's, as ONNX Cast defines it: float -> int truncates
// toward zero, anything -> bool is `!= 0`, bool -> number is 0/1; the caller's Io<D>::Store then
// rounds fp16/bf16 to nearest even (from an exact or round-to-odd float, so rounding is single).
template <typename S, typename D>
struct CastOp {
  using CS = typename Io<S>::C;
  using CD = typename Io<D>::C;
  MT_HD CD operator()(CS x) const {
    if constexpr (std::is_same_v<CD, bool>) {
      return x != CS(0);
    } else if constexpr (kIsLowFloat<D> && !std::is_same_v<CS, float>) {
      return DoubleToFloatRoundOdd(static_cast<double>(x));
    } else {
      return static_cast<CD>(x);
    }
  }
};

}  // namespace mixtrain::ew
