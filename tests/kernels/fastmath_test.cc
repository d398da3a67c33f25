// kernels/common/fastmath.h against the double-precision libm functions rounded to float: the
// largest error in ulp over a sweep of float bit patterns (every 97th pattern of each range, so
// every exponent and many mantissas), plus special values (NaN, infinities, zeros, subnormals,
// the ends of the ranges) and a vectorized loop that must agree with the scalar calls.
#include "kernels/common/fastmath.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mixtrain {
namespace {

// Distance in units in the last place between two finite floats (0 when both are the same
// number; zeros of either sign are equal).
int64_t UlpDistance(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(std::numeric_limits<int32_t>::min()) - i
                 : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

// The largest ulp error of `f` against `ref` (in double, rounded to float) over every `step`th
// float bit pattern between lo and hi (same sign, |lo| <= |hi|), and where it happens.
struct Sweep {
  int64_t max_ulp = 0;
  float worst = 0;
};
template <typename F, typename R>
Sweep SweepRange(F f, R ref, float lo, float hi, uint32_t step = 97) {
  Sweep s;
  uint32_t a = FloatToBits(lo), b = FloatToBits(hi);
  for (uint64_t u = a; u <= b; u += step) {
    const float x = BitsToFloat(static_cast<uint32_t>(u));
    const float want = static_cast<float>(ref(static_cast<double>(x)));
    const float got = f(x);
    int64_t d;
    if (std::isnan(want)) d = std::isnan(got) ? 0 : 1 << 30;
    else if (std::isinf(want) || std::isinf(got)) d = want == got ? 0 : 1 << 30;
    else d = UlpDistance(got, want);
    if (d > s.max_ulp) s = {d, x};
  }
  return s;
}

// Both signs of [lo, hi] for lo, hi >= 0.
template <typename F, typename R>
void ExpectUlps(const char* name, F f, R ref, float lo, float hi, int64_t ulps) {
  for (float sign : {1.0f, -1.0f}) {
    Sweep s = SweepRange(
        [&](float x) { return f(sign * x); }, [&](double x) { return ref(sign * x); }, lo, hi);
    EXPECT_LE(s.max_ulp, ulps) << name << "(" << sign * s.worst << ") is off by " << s.max_ulp
                               << " ulp";
  }
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMinSub = std::numeric_limits<float>::denorm_min();

TEST(FastMathTest, ExpWithin2Ulp) {
  // Both signs down to the smallest normal result, then the top of the range.
  ExpectUlps("Exp", fm::Exp, [](double x) { return std::exp(x); }, 0.0f, 87.33f, 2);
  Sweep s = SweepRange(fm::Exp, [](double x) { return std::exp(x); }, 87.33f, 88.72f);
  EXPECT_LE(s.max_ulp, 2) << "Exp(" << s.worst << ")";
}

TEST(FastMathTest, ExpSpecialValues) {
  EXPECT_EQ(fm::Exp(0.0f), 1.0f);
  EXPECT_EQ(fm::Exp(-kInf), 0.0f);
  EXPECT_EQ(fm::Exp(kInf), kInf);
  EXPECT_EQ(fm::Exp(88.8f), kInf);
  EXPECT_EQ(fm::Exp(-104.5f), 0.0f);
  EXPECT_EQ(fm::Exp(-87.4f), 0.0f);  // subnormal results flush to zero
  EXPECT_GE(fm::Exp(-87.336f), std::numeric_limits<float>::min());
  EXPECT_TRUE(std::isnan(fm::Exp(NAN)));
  EXPECT_EQ(fm::Exp(88.72283f), std::exp(88.72283f));  // the largest finite result
}

TEST(FastMathTest, LogWithin2Ulp) {
  Sweep s = SweepRange(fm::Log, [](double x) { return std::log(x); }, kMinSub,
                       std::numeric_limits<float>::max());
  EXPECT_LE(s.max_ulp, 2) << "Log(" << s.worst << ")";
}

TEST(FastMathTest, LogSpecialValues) {
  EXPECT_EQ(fm::Log(1.0f), 0.0f);
  EXPECT_EQ(fm::Log(0.0f), -kInf);
  EXPECT_EQ(fm::Log(-0.0f), -kInf);
  EXPECT_EQ(fm::Log(kInf), kInf);
  EXPECT_TRUE(std::isnan(fm::Log(-1.0f)));
  EXPECT_TRUE(std::isnan(fm::Log(-kInf)));
  EXPECT_TRUE(std::isnan(fm::Log(NAN)));
  EXPECT_FLOAT_EQ(fm::Log(kMinSub), std::log(static_cast<double>(kMinSub)));
}

TEST(FastMathTest, ErfWithin2Ulp) {
  // From tiny arguments (erf(x) ~ 2x/sqrt(pi)) through both pieces to where erf rounds to 1.
  ExpectUlps("Erf", fm::Erf, [](double x) { return std::erf(x); }, 1e-30f, 6.0f, 2);
}

TEST(FastMathTest, ErfSpecialValues) {
  EXPECT_EQ(fm::Erf(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(fm::Erf(-0.0f)));
  EXPECT_EQ(fm::Erf(kInf), 1.0f);
  EXPECT_EQ(fm::Erf(-kInf), -1.0f);
  EXPECT_EQ(fm::Erf(1e10f), 1.0f);
  EXPECT_TRUE(std::isnan(fm::Erf(NAN)));
}

TEST(FastMathTest, TanhWithin2Ulp) {
  ExpectUlps("Tanh", fm::Tanh, [](double x) { return std::tanh(x); }, 1e-30f, 12.0f, 2);
}

TEST(FastMathTest, TanhSpecialValues) {
  EXPECT_EQ(fm::Tanh(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(fm::Tanh(-0.0f)));
  EXPECT_EQ(fm::Tanh(kInf), 1.0f);
  EXPECT_EQ(fm::Tanh(-kInf), -1.0f);
  EXPECT_TRUE(std::isnan(fm::Tanh(NAN)));
}

TEST(FastMathTest, SigmoidAndGelusWithinFewUlp) {
  ExpectUlps("Sigmoid", fm::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, 1e-30f,
             80.0f, 3);
  EXPECT_EQ(fm::Sigmoid(-kInf), 0.0f);
  EXPECT_EQ(fm::Sigmoid(kInf), 1.0f);
  // Gelu is x * (1 + erf) / 2; for x < 0 the sum cancels, so measure where it does not.
  ExpectUlps("Gelu", [](float x) { return fm::Gelu(std::fabs(x)); },
             [](double x) { return 0.5 * std::fabs(x) * (1 + std::erf(std::fabs(x) / std::sqrt(2.0))); },
             1e-30f, 20.0f, 3);
  ExpectUlps("GeluTanh", [](float x) { return fm::GeluTanh(std::fabs(x)); },
             [](double x) {
               double a = std::fabs(x);
               return 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)));
             },
             1e-30f, 20.0f, 4);
  // The tanh form as x * sigmoid(2u) has no such sum: relative accuracy for x < 0 too, down
  // to where the result leaves the normal floats, within the float rounding of the exponent 2u
  // (an error of |2u| * 2^-24 in it is that much relative error in e^-2u).
  for (float x = -10.0f; x < 0.0f; x += 0.001f) {
    const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * double(x) * x * x);
    const double want = x / (1 + std::exp(-2 * u));
    EXPECT_NEAR(fm::GeluTanh(x), want, 4e-7 * (1 + 2 * std::fabs(u)) * std::fabs(want)) << x;
  }
  // Negative arguments: absolute error against float spacing near 1 (the `1 + erf` sum).
  for (float x = -10.0f; x < 0.0f; x += 0.001f) {
    double want = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    EXPECT_NEAR(fm::Gelu(x), want, 4e-7 * std::fabs(x)) << x;
  }
}

// The kernels call these in `omp simd` loops; the vector code must compute what the scalar
// calls do (the loop is a template over the function so it inlines and vectorizes).
template <float (*F)(float)>
void ExpectVectorLoopMatches(const char* name) {
  std::vector<float> x(4099), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = -20.0f + 40.0f * i / x.size();
  x[7] = NAN;
  x[8] = kInf;
  x[9] = -kInf;
  x[10] = 0.0f;
  float* xp = x.data();
  float* yp = y.data();
  const int64_t n = static_cast<int64_t>(x.size());
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) yp[i] = F(xp[i]);
  for (size_t i = 0; i < x.size(); ++i) {
    volatile float xi = x[i];  // keeps this call scalar
    float want = F(xi);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(y[i])) << name << "(" << x[i] << ")";
    else EXPECT_EQ(y[i], want) << name << "(" << x[i] << ")";
  }
}

TEST(FastMathTest, VectorLoopMatchesScalar) {
  ExpectVectorLoopMatches<fm::Exp>("Exp");
  ExpectVectorLoopMatches<fm::Log>("Log");
  ExpectVectorLoopMatches<fm::Erf>("Erf");
  ExpectVectorLoopMatches<fm::Tanh>("Tanh");
  ExpectVectorLoopMatches<fm::Sigmoid>("Sigmoid");
  ExpectVectorLoopMatches<fm::Gelu>("Gelu");
}

}  // namespace
}  // namespace mixtrain
