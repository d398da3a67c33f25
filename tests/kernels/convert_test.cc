// kernels/cpu/convert.h's vector conversions against graph/half.h's portable scalar
// code (itself checked against independent references in half_test.cc): bit for bit, on every
// 16-bit pattern, on the fp32 values around every rounding boundary, on random bit patterns,
// and on every tail length. Also the F16C scalar functions of half.h against the portable ones.
#include "kernels/cpu/convert.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "graph/half.h"

namespace mixtrain::cpu {
namespace {

std::vector<uint16_t> AllPatterns() {
  std::vector<uint16_t> v(65536);
  for (uint32_t h = 0; h < 65536; ++h) v[h] = static_cast<uint16_t>(h);
  return v;
}

// Every value of a 16-bit format widened, its neighbours' midpoints and the floats next to them,
// and random bit patterns (NaNs with every kind of payload among them).
std::vector<float> Probes(float (*widen)(uint16_t)) {
  std::vector<float> v;
  for (uint32_t h = 0; h < 65535; ++h) {
    float a = widen(static_cast<uint16_t>(h)), b = widen(static_cast<uint16_t>(h + 1));
    float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
    for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) v.push_back(x);
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 1000000; ++i) v.push_back(BitsToFloat(rng()));
  return v;
}

TEST(ConvertTest, HalfWidensLikeThePortableCodeOnEveryPattern) {
  const std::vector<uint16_t> in = AllPatterns();
  std::vector<float> out(in.size());
  HalfToFloatN(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(FloatToBits(out[i]), FloatToBits(HalfToFloatPortable(in[i]))) << std::hex << in[i];
    ASSERT_EQ(FloatToBits(HalfToFloat(in[i])), FloatToBits(HalfToFloatPortable(in[i]))) << std::hex << in[i];
  }
}

TEST(ConvertTest, BFloat16WidensLikeThePortableCodeOnEveryPattern) {
  const std::vector<uint16_t> in = AllPatterns();
  std::vector<float> out(in.size());
  BFloat16ToFloatN(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(FloatToBits(out[i]), FloatToBits(BFloat16ToFloat(in[i]))) << std::hex << in[i];
}

TEST(ConvertTest, HalfNarrowsLikeThePortableCode) {
  const std::vector<float> in = Probes(HalfToFloatPortable);
  std::vector<uint16_t> out(in.size());
  FloatToHalfN(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i], FloatToHalfPortable(in[i])) << "bits 0x" << std::hex << FloatToBits(in[i]);
    ASSERT_EQ(FloatToHalf(in[i]), FloatToHalfPortable(in[i])) << "bits 0x" << std::hex << FloatToBits(in[i]);
  }
}

TEST(ConvertTest, BFloat16NarrowsLikeThePortableCode) {
  const std::vector<float> in = Probes(BFloat16ToFloat);
  std::vector<uint16_t> out(in.size());
  FloatToBFloat16N(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i], FloatToBFloat16(in[i])) << "bits 0x" << std::hex << FloatToBits(in[i]);
}

// Every length up to three vectors, at every misalignment: tails convert like bodies and nothing
// outside [0, n) is written.
TEST(ConvertTest, TailsAndOffsets) {
  std::mt19937 rng(5);
  for (int64_t off = 0; off < 8; ++off) {
    for (int64_t n = 0; n <= 24; ++n) {
      std::vector<uint16_t> h(off + n + 8);
      std::vector<float> f(off + n + 8);
      for (auto& x : h) x = static_cast<uint16_t>(rng());
      for (auto& x : f) x = static_cast<float>(rng() % 20000) / 7.0f - 1000.0f;
      std::vector<float> wide(off + n + 8, -7.0f);
      std::vector<uint16_t> narrow(off + n + 8, 0xabcd);
      HalfToFloatRow(h.data() + off, wide.data() + off, n);
      FloatToBFloat16Row(f.data() + off, narrow.data() + off, n);
      for (int64_t i = 0; i < off + n + 8; ++i) {
        const bool inside = i >= off && i < off + n;
        if (inside) {
          ASSERT_EQ(FloatToBits(wide[i]), FloatToBits(HalfToFloatPortable(h[i])));
          ASSERT_EQ(narrow[i], FloatToBFloat16(f[i]));
        } else {
          ASSERT_EQ(wide[i], -7.0f) << "wrote outside the row at " << i;
          ASSERT_EQ(narrow[i], 0xabcd) << "wrote outside the row at " << i;
        }
      }
      std::vector<uint16_t> h2(off + n + 8, 0x1234);
      FloatToHalfRow(f.data() + off, h2.data() + off, n);
      std::vector<float> back(off + n + 8, -9.0f);
      BFloat16ToFloatRow(h.data() + off, back.data() + off, n);
      for (int64_t i = 0; i < off + n + 8; ++i) {
        const bool inside = i >= off && i < off + n;
        ASSERT_EQ(h2[i], inside ? FloatToHalfPortable(f[i]) : uint16_t{0x1234});
        if (inside) ASSERT_EQ(FloatToBits(back[i]), FloatToBits(BFloat16ToFloat(h[i])));
        else ASSERT_EQ(back[i], -9.0f);
      }
    }
  }
}

}  // namespace
}  // namespace mixtrain::cpu
