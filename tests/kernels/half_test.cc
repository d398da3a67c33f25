// Exhaustive checks of graph/half.h: every fp16 and bf16 bit pattern widens to fp32
// exactly, and fp32 -> fp16/bf16 rounds to nearest even bit-exactly. The references are computed a
// different way: widening from sign/exponent/mantissa with long double arithmetic, narrowing by
// searching the sorted table of representable values and applying the tie rule explicitly.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "graph/half.h"

namespace mixtrain {
namespace {

bool IsNanBits32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

// Value of an fp16 pattern from its fields (fields: 1 sign, 5 exponent, 10 mantissa).
long double HalfValue(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  long double v = exp == 0 ? std::ldexp(static_cast<long double>(man), -24)
                           : std::ldexp(static_cast<long double>(1024 + man), exp - 25);
  return sign ? -v : v;
}

// Value of a bf16 pattern from its fields (1 sign, 8 exponent, 7 mantissa).
long double BFloat16Value(uint16_t h) {
  int sign = h >> 15, exp = (h >> 7) & 0xff, man = h & 0x7f;
  long double v = exp == 0 ? std::ldexp(static_cast<long double>(man), -133)
                           : std::ldexp(static_cast<long double>(128 + man), exp - 134);
  return sign ? -v : v;
}

TEST(HalfTest, EveryHalfPatternWidensExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    uint32_t u = FloatToBits(f);
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    ASSERT_EQ(u >> 31, h >> 15) << "sign of 0x" << std::hex << h;
    if (exp == 0x1f && man != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ((u >> 13) & 0x3ff, static_cast<uint32_t>(man)) << "payload of 0x" << std::hex << h;
    } else if (exp == 0x1f) {
      ASSERT_TRUE(std::isinf(f)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<long double>(f), HalfValue(static_cast<uint16_t>(h)))
          << "0x" << std::hex << h;
    }
  }
}

TEST(HalfTest, EveryBFloat16PatternWidensExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = BFloat16ToFloat(static_cast<uint16_t>(h));
    int exp = (h >> 7) & 0xff, man = h & 0x7f;
    ASSERT_EQ(FloatToBits(f) >> 31, h >> 15);
    if (exp == 0xff && man != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    } else if (exp == 0xff) {
      ASSERT_TRUE(std::isinf(f)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<long double>(f), BFloat16Value(static_cast<uint16_t>(h)))
          << "0x" << std::hex << h;
    }
  }
}

// Round-to-nearest-even reference over a table of the non-negative finite values of a 16-bit
// format, indexed by bit pattern (monotonic for non-negative patterns). The pattern after the
// largest finite one is infinity and takes the value 2^(emax+1) for rounding, as IEEE specifies.
class NearestEven {
 public:
  NearestEven(long double (*value)(uint16_t), uint16_t inf_bits, int inf_exp)
      : inf_bits_(inf_bits) {
    for (uint32_t h = 0; h < inf_bits; ++h) table_.push_back(value(static_cast<uint16_t>(h)));
    table_.push_back(std::ldexp(1.0L, inf_exp));
  }
  uint16_t Round(float f) const {
    uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    long double a = std::fabs(static_cast<long double>(f));
    if (std::isinf(f) || a >= table_.back()) return sign | inf_bits_;
    // Largest index with table_[i] <= a.
    size_t lo = 0, hi = table_.size() - 1;
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      (table_[mid] <= a ? lo : hi) = mid;
    }
    long double dlo = a - table_[lo], dhi = table_[hi] - a;
    size_t pick = dlo < dhi ? lo : (dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi));
    return static_cast<uint16_t>(sign | pick);
  }

 private:
  uint16_t inf_bits_;
  std::vector<long double> table_;
};

// Inputs that stress rounding: every representable value, every midpoint between neighbours and
// the floats right next to them, subnormals, ties, overflow, plus random bit patterns.
std::vector<float> Probes(float (*widen)(uint16_t), uint16_t inf_bits) {
  std::vector<float> v;
  for (uint32_t h = 0; h < inf_bits; ++h) {
    float a = widen(static_cast<uint16_t>(h));
    double b = h + 1 == inf_bits ? 2.0 * a - widen(static_cast<uint16_t>(h - 1))
                                 : widen(static_cast<uint16_t>(h + 1));
    float mid = static_cast<float>((a + b) / 2);  // exact: midpoints need one more bit
    for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 1000000; ++i) v.push_back(BitsToFloat(rng()));
  for (float x : {0.0f, -0.0f, 1e-45f, 1e-40f, 1e-30f, 1e-8f, 65504.0f, 65519.99f, 65520.0f,
                  65536.0f, 1e10f, 3.4e38f, INFINITY, -INFINITY})
    v.push_back(x);
  return v;
}

TEST(HalfTest, FloatToHalfRoundsToNearestEven) {
  NearestEven ref(HalfValue, 0x7c00, 16);
  for (float f : Probes(HalfToFloat, 0x7c00)) {
    uint16_t got = FloatToHalf(f);
    if (IsNanBits32(FloatToBits(f))) {
      ASSERT_TRUE((got & 0x7c00) == 0x7c00 && (got & 0x3ff) != 0) << "NaN must stay NaN";
      ASSERT_EQ(got >> 15, FloatToBits(f) >> 31);
      continue;
    }
    ASSERT_EQ(got, ref.Round(f)) << "f=" << f << " bits=0x" << std::hex << FloatToBits(f);
  }
}

TEST(HalfTest, FloatToBFloat16RoundsToNearestEven) {
  NearestEven ref(BFloat16Value, 0x7f80, 128);
  for (float f : Probes(BFloat16ToFloat, 0x7f80)) {
    uint16_t got = FloatToBFloat16(f);
    if (IsNanBits32(FloatToBits(f))) {
      ASSERT_TRUE((got & 0x7f80) == 0x7f80 && (got & 0x7f) != 0) << "NaN must stay NaN";
      ASSERT_EQ(got >> 15, FloatToBits(f) >> 31);
      continue;
    }
    ASSERT_EQ(got, ref.Round(f)) << "f=" << f << " bits=0x" << std::hex << FloatToBits(f);
  }
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // the tie above the largest half rounds to inf
  EXPECT_EQ(FloatToHalf(5.9604644775390625e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(2.98023223876953125e-8f), 0x0000);  // half of it: tie to even (zero)
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);      // tie between 1 and 1+2^-10: even
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 1.0f / 256), 0x3f80);   // tie: even
  EXPECT_EQ(FloatToBFloat16(3.4028235e38f), 0x7f80);      // FLT_MAX rounds up to inf
}

}  // namespace
}  // namespace mixtrain
