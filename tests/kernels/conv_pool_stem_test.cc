// The stem conv + max pool (kernels/cpu/conv_pool_stem.h) against a double-precision reference
// conv -> bias -> Relu (or none) -> max pool with ONNX's geometry: 1-4 input channels, 3x3 and
// 5x5 kernels, pads (asymmetric too), conv strides 1 and 2, odd N/H/W where the pool drops the
// last conv row or column, every tile width of the AVX-512 path, pools it does not take (the
// plain path), fp32/bf16/fp16 storage. Each case runs on the AVX-512 path (when the CPU has it)
// and on the plain C++ path.
#include "kernels/cpu/conv_pool_stem.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "graph/half.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

struct Case {
  int64_t n, c, h, w, m, kh, kw;
  int64_t sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
  int64_t pkh = 2, pkw = 2, psh = 2, psw = 2;
  bool relu = true;

  StemGeometry Geometry() const {
    StemGeometry g;
    g.n = n, g.c = c, g.h = h, g.w = w, g.m = m, g.kh = kh, g.kw = kw, g.sh = sh, g.sw = sw;
    g.pt = pt, g.pl = pl, g.pkh = pkh, g.pkw = pkw, g.psh = psh, g.psw = psw;
    g.oh = (h + pt + pb - kh) / sh + 1;
    g.ow = (w + pl + pr - kw) / sw + 1;
    return g;
  }
  std::string Name() const {
    return absl::StrCat("n", n, " c", c, " ", h, "x", w, " m", m, " k", kh, "x", kw, " s", sh,
                        ",", sw, " pads", pt, ",", pl, ",", pb, ",", pr, " pool", pkh, "x", pkw,
                        "/", psh, ",", psw, relu ? " relu" : "");
  }
};

// Reference Y [N, M/16, qh, qw, 16] in double, and per output the largest sum of |terms| over
// its window (the scale of its fp32 rounding error).
void Reference(const Case& k, const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, std::vector<double>* y, std::vector<double>* scale) {
  const StemGeometry g = k.Geometry();
  const int64_t qh = g.qh(), qw = g.qw();
  y->assign(k.n * k.m * qh * qw, 0.0);
  scale->assign(y->size(), 0.0);
  for (int64_t i = 0; i < k.n; ++i)
    for (int64_t o = 0; o < k.m; ++o)
      for (int64_t qy = 0; qy < qh; ++qy)
        for (int64_t qx = 0; qx < qw; ++qx) {
          double best = -INFINITY, s = 0;
          for (int64_t py = 0; py < k.pkh; ++py)
            for (int64_t px = 0; px < k.pkw; ++px) {
              const int64_t oy = qy * k.psh + py, ox = qx * k.psw + px;
              double acc = b[o], abs_sum = std::abs(b[o]);
              for (int64_t c = 0; c < k.c; ++c)
                for (int64_t ky = 0; ky < k.kh; ++ky)
                  for (int64_t kx = 0; kx < k.kw; ++kx) {
                    const int64_t iy = oy * k.sh - k.pt + ky, ix = ox * k.sw - k.pl + kx;
                    if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                    const double t = static_cast<double>(x[((i * k.c + c) * k.h + iy) * k.w + ix]) *
                                     w[((o * k.c + c) * k.kh + ky) * k.kw + kx];
                    acc += t;
                    abs_sum += std::abs(t);
                  }
              if (k.relu) acc = std::max(acc, 0.0);
              best = std::max(best, acc);
              s = std::max(s, abs_sum);
            }
          const int64_t at = (((i * (k.m / 16) + o / 16) * qh + qy) * qw + qx) * 16 + o % 16;
          (*y)[at] = best;
          (*scale)[at] = s;
        }
}

float Stored(const std::vector<uint16_t>& y, DType t, size_t i) {
  return t == DType::kBF16 ? BFloat16ToFloat(y[i]) : HalfToFloat(y[i]);
}

// Runs case k with inputs stored as x_type and outputs as every type; returns false on failure
// (gtest has recorded it).
void Check(const Case& k, DType x_type = DType::kF32) {
  SCOPED_TRACE(k.Name() + (x_type == DType::kBF16 ? " bf16 X" : ""));
  const StemGeometry g = k.Geometry();
  ASSERT_TRUE(StemValid(g));
  std::mt19937 rng(static_cast<uint32_t>(k.n * 131 + k.c * 17 + k.h * 7 + k.kw + k.pt));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(k.n * k.c * k.h * k.w), w(k.m * k.c * k.kh * k.kw), b(k.m);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng) * 0.3f;
  for (float& v : b) v = dist(rng) * 0.1f;
  std::vector<uint16_t> x16(x.size());
  if (x_type == DType::kBF16)
    for (size_t i = 0; i < x.size(); ++i) {
      x16[i] = FloatToBFloat16(x[i]);
      x[i] = BFloat16ToFloat(x16[i]);  // what the kernel sees
    }
  const void* xp = x_type == DType::kF32 ? static_cast<const void*>(x.data()) : x16.data();
  std::vector<double> ref, scale;
  Reference(k, x, w, b, &ref, &scale);
  const std::vector<float> packed = PackStemWeights(g, w.data());
  const float floor = k.relu ? 0.0f : -INFINITY;

  // fp32 output (with a guard element that must stay untouched).
  std::vector<float> y(ref.size() + 1, 12345.0f);
  ConvPoolStem(g, xp, x_type, packed.data(), b.data(), floor, y.data(), DType::kF32);
  EXPECT_EQ(y.back(), 12345.0f);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(y[i], ref[i], 2e-6 * scale[i] + 1e-7) << "at " << i;

  // Narrow outputs are the fp32 result rounded to nearest even.
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> y16(ref.size() + 1, 0xabcd);
    ConvPoolStem(g, xp, x_type, packed.data(), b.data(), floor, y16.data(), t);
    EXPECT_EQ(y16.back(), 0xabcd);
    for (size_t i = 0; i < ref.size(); ++i) {
      const uint16_t want = t == DType::kBF16 ? FloatToBFloat16(y[i]) : FloatToHalf(y[i]);
      ASSERT_EQ(y16[i], want) << "at " << i << ": " << Stored(y16, t, i) << " vs " << y[i];
    }
  }
}

// Runs fn on the AVX-512 path (where the CPU has one) and on the plain path.
template <typename Fn>
void OnBothPaths(const Fn& fn) {
  const bool had = Avx512Enabled();
  for (bool avx512 : {true, false}) {
    if (avx512 && !had) continue;
    SCOPED_TRACE(avx512 ? "avx512" : "plain");
    Avx512Enabled() = avx512;
    fn();
    Avx512Enabled() = had;
    if (testing::Test::HasFatalFailure()) return;
  }
}

TEST(ConvPoolStem, FashionCnnStem) {
  // 1 -> 32 channels, 3x3 pad 1 on 28x28, Relu, 2x2 pool: fashion_cnn's conv1 + pool1.
  Case k{.n = 3, .c = 1, .h = 28, .w = 28, .m = 32, .kh = 3, .kw = 3};
  k.pt = k.pl = k.pb = k.pr = 1;
  StemGeometry g = k.Geometry();
  EXPECT_EQ(g.qh(), 14);
  EXPECT_EQ(g.qw(), 14);
  if (Avx512Enabled()) EXPECT_TRUE(StemFastPath(g));
  OnBothPaths([&] { Check(k); });
}

TEST(ConvPoolStem, ChannelsKernelsAndPads) {
  OnBothPaths([] {
    for (int64_t c = 1; c <= 4; ++c)
      for (int64_t kk : {3, 5})
        for (int64_t pad : {0, 1, 2}) {
          Case k{.n = 3, .c = c, .h = 11, .w = 13, .m = 16 * (1 + c % 2), .kh = kk, .kw = kk};
          k.pt = k.pl = k.pb = k.pr = pad;
          k.relu = pad != 1;
          Check(k);
        }
  });
}

TEST(ConvPoolStem, OddSizesDropTheLastRowAndColumn) {
  // Conv outputs of odd size: the floor-mode pool never reads the last row/column, which the
  // kernel must neither compute into the result nor read past the image for.
  OnBothPaths([] {
    for (int64_t h : {2, 3, 7, 9})
      for (int64_t w : {2, 5, 9}) {
        Case k{.n = 1, .c = 2, .h = h, .w = w, .m = 16, .kh = 1, .kw = 1};
        Check(k);
        Case k3{.n = 2, .c = 3, .h = h + 2, .w = w + 2, .m = 16, .kh = 3, .kw = 3};
        k3.pt = 1;
        k3.pr = 1;  // asymmetric
        Check(k3);
      }
  });
}

TEST(ConvPoolStem, EveryTileWidth) {
  // Pooled widths 1..20 split into 1..4 tiles of 1..6 pixels.
  OnBothPaths([] {
    for (int64_t qw = 1; qw <= 20; ++qw) {
      Case k{.n = 1, .c = 1, .h = 6, .w = 2 * qw + 1, .m = 16, .kh = 3, .kw = 3};
      k.pt = k.pl = k.pb = k.pr = 1;
      Check(k);
    }
  });
}

TEST(ConvPoolStem, ConvStridesAndWideKernels) {
  OnBothPaths([] {
    for (int64_t sh : {1, 2})
      for (int64_t sw : {1, 2, 3}) {
        Case k{.n = 2, .c = 3, .h = 23, .w = 21, .m = 32, .kh = 7, .kw = 5};
        k.sh = sh, k.sw = sw, k.pt = 3, k.pl = 2, k.pb = 3, k.pr = 2;
        Check(k);
      }
  });
}

TEST(ConvPoolStem, OtherPoolsAndManyChannelsTakeThePlainPath) {
  Case overlapping{.n = 2, .c = 1, .h = 15, .w = 14, .m = 16, .kh = 3, .kw = 3};
  overlapping.pkh = overlapping.pkw = 3;  // 3x3 stride 2, as after a ResNet stem
  overlapping.pt = overlapping.pl = overlapping.pb = overlapping.pr = 1;
  Case stride1{.n = 1, .c = 2, .h = 9, .w = 10, .m = 16, .kh = 3, .kw = 3};
  stride1.psh = stride1.psw = 1;
  Case wide{.n = 1, .c = 6, .h = 9, .w = 9, .m = 16, .kh = 3, .kw = 3};
  Case big_kernel{.n = 1, .c = 1, .h = 12, .w = 12, .m = 16, .kh = 9, .kw = 9};
  big_kernel.pt = big_kernel.pl = big_kernel.pb = big_kernel.pr = 2;
  for (const Case& k : {overlapping, stride1, wide, big_kernel}) {
    EXPECT_FALSE(StemFastPath(k.Geometry())) << k.Name();
    OnBothPaths([&] { Check(k); });
  }
}

TEST(ConvPoolStem, Bf16Input) {
  OnBothPaths([] {
    Case k{.n = 3, .c = 3, .h = 17, .w = 16, .m = 32, .kh = 3, .kw = 3};
    k.pt = k.pl = k.pb = k.pr = 1;
    Check(k, DType::kBF16);
  });
}

}  // namespace
}  // namespace mixtrain::cpu
