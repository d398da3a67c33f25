// The AVX-512 short-row kernels (kernels/cpu/rows_avx512.h) against scalar references: the bf16
// store bit for bit on every bf16 pattern and on float patterns around every rounding case
// (ties, subnormals, NaN, overflow to inf); softmax, log-softmax, masked softmax, the softmax
// gradient and layer normalization on odd row lengths, -inf and NaN entries, fp32 and bf16 storage. Skipped (with
// a message) on CPUs without AVX-512, where the kernels are never called.
#include "kernels/cpu/rows_avx512.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "graph/half.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

#define SKIP_WITHOUT_AVX512() \
  if (!Avx512Enabled()) GTEST_SKIP() << "no AVX-512 on this CPU"

TEST(RowsAvx512, Bf16StoreIsExactOnEveryBf16PatternAndItsNeighbours) {
  SKIP_WITHOUT_AVX512();
  // Each bf16 pattern as float, and the float patterns just around it and around the midpoint
  // to the next pattern (the ties), which covers subnormals, NaN payloads and inf.
  std::vector<float> in;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t u = h << 16;
    for (uint32_t d : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      in.push_back(BitsToFloat(u + d));
  }
  std::vector<uint16_t> out(in.size());
  avx512::FloatToBFloat16Row(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i], FloatToBFloat16(in[i])) << std::hex << FloatToBits(in[i]);
  // Odd lengths: the tail is written and nothing past it.
  for (int64_t n : {1, 15, 17, 33}) {
    std::vector<uint16_t> y(n + 1, 0xabcd);
    avx512::FloatToBFloat16Row(in.data() + 1000, y.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], FloatToBFloat16(in[1000 + i]));
    EXPECT_EQ(y[n], 0xabcd);
  }
}

// Reference softmax in double (log-softmax when `log`), of v already masked and scaled.
std::vector<double> RefSoftmax(const std::vector<float>& v, bool log) {
  double m = -INFINITY;
  bool nan = false;
  for (float x : v) {
    nan |= std::isnan(x);
    m = std::max<double>(m, x);
  }
  std::vector<double> y(v.size());
  double s = 0;
  for (float x : v) s += std::exp(x - m);
  for (size_t i = 0; i < v.size(); ++i)
    y[i] = nan ? NAN : log ? (v[i] - m) - std::log(s) : std::exp(v[i] - m) / s;
  return y;
}

void ExpectNear(double got, double want, double tol, const char* what, int64_t n, int64_t i) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << " n=" << n << " i=" << i;
  } else if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what << " n=" << n << " i=" << i;
  } else {
    EXPECT_NEAR(got, want, tol * (1 + std::fabs(want))) << what << " n=" << n << " i=" << i;
  }
}

std::vector<float> RandomRow(int64_t n, std::mt19937& rng, float spread) {
  std::uniform_real_distribution<float> u(-spread, spread);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(RowsAvx512, SoftmaxAndLogSoftmaxMatchTheReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(3);
  for (bool log : {false, true}) {
    for (int64_t n : {1, 5, 16, 17, 31, 32, 33, 64}) {
      const int64_t rows = 7;  // a group of four, then three single rows
      std::vector<float> x;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> row = RandomRow(n, rng, 20);
        if (r == 1 || r == 5) row[n / 2] = -INFINITY;  // a masked score
        if ((r == 2 || r == 6) && n > 1) row[n - 1] = NAN;
        x.insert(x.end(), row.begin(), row.end());
      }
      std::vector<float> y(x.size());
      avx512::SoftmaxRows(x.data(), y.data(), rows, n, log);
      std::vector<uint16_t> xb(x.size()), yb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = FloatToBFloat16(x[i]);
      avx512::SoftmaxRows(xb.data(), yb.data(), rows, n, log);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
        std::vector<float> rowb(n);
        for (int64_t i = 0; i < n; ++i) rowb[i] = BFloat16ToFloat(xb[r * n + i]);
        std::vector<double> want = RefSoftmax(row, log), wantb = RefSoftmax(rowb, log);
        for (int64_t i = 0; i < n; ++i) {
          ExpectNear(y[r * n + i], want[i], 2e-6, "f32", n, i);
          ExpectNear(BFloat16ToFloat(yb[r * n + i]), wantb[i], 1.0 / 128, "bf16", n, i);
        }
      }
    }
  }
}

TEST(RowsAvx512, MaskedSoftmaxMatchesWhereThenSoftmax) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(5);
  for (int64_t n : {1, 7, 16, 32, 45, 64}) {
    for (int64_t inner : {0, 1}) {
      for (float fill : {-INFINITY, -1e4f, 0.5f}) {
        std::vector<float> x = RandomRow(n, rng, 4);
        std::vector<uint8_t> mask(n);
        for (int64_t i = 0; i < n; ++i) mask[i] = inner ? (rng() % 3 != 0) : 1;
        mask[0] = 1;  // at least one score kept
        const float scale = 0.37f;
        std::vector<float> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = mask[inner ? i : 0] ? x[i] * scale : fill;
        std::vector<double> want = RefSoftmax(v, false);
        // Five copies of the row: one group of four, then a single row.
        const int64_t rows = 5;
        std::vector<float> xs, y(rows * n);
        for (int64_t r = 0; r < rows; ++r) xs.insert(xs.end(), x.begin(), x.end());
        std::vector<const uint8_t*> masks(rows, mask.data());
        avx512::MaskedSoftmaxRows(xs.data(), y.data(), rows, n, masks.data(), inner, scale, fill);
        std::vector<uint16_t> xb(rows * n), yb(rows * n);
        for (int64_t i = 0; i < rows * n; ++i) xb[i] = FloatToBFloat16(xs[i]);
        avx512::MaskedSoftmaxRows(xb.data(), yb.data(), rows, n, masks.data(), inner, scale, fill);
        for (int64_t i = 0; i < rows * n; ++i) {
          ExpectNear(y[i], want[i % n], 2e-6, "f32", n, i);
          ExpectNear(BFloat16ToFloat(yb[i]), want[i % n], 2.0 / 128, "bf16", n, i);
        }
      }
    }
  }
  // A row whose mask is all false and whose fill is -inf is NaN, as Where + Softmax give.
  std::vector<float> x(32, 1.0f), y(32);
  const uint8_t off = 0;
  const uint8_t* row_mask = &off;
  avx512::MaskedSoftmaxRows(x.data(), y.data(), 1, 32, &row_mask, 0, 1.0f, -INFINITY);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

// SoftmaxGrad rows against scale * y * (dy - sum(dy * y)) in double: odd lengths, no mask, a
// whole-row mask (inner 0: kept rows and a zeroed row) and per-element masks, a NaN in dy making
// its row NaN; the bf16 rows against the same formula on their rounded inputs.
TEST(RowsAvx512, SoftmaxGradMatchesTheReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(11);
  for (int64_t n : {1, 5, 16, 17, 31, 32, 33, 64}) {
    for (int mode : {0, 1, 2}) {  // no mask, whole-row masks, per-element masks
      const int64_t rows = 4;
      const float scale = 0.75f;
      std::vector<float> dy, y;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> a = RandomRow(n, rng, 3), b = RandomRow(n, rng, 1);
        if (r == 3) a[n / 2] = NAN;
        dy.insert(dy.end(), a.begin(), a.end());
        y.insert(y.end(), b.begin(), b.end());
      }
      std::vector<std::vector<uint8_t>> masks(rows, std::vector<uint8_t>(n, 1));
      if (mode == 1) masks[1][0] = 0;  // row 1 dropped whole
      if (mode == 2)
        for (auto& m : masks)
          for (uint8_t& b : m) b = rng() % 3 != 0;
      std::vector<const uint8_t*> mp;
      for (const auto& m : masks) mp.push_back(m.data());
      const uint8_t* const* mask = mode == 0 ? nullptr : mp.data();
      const int64_t inner = mode == 2 ? 1 : 0;
      std::vector<float> dx(rows * n);
      avx512::SoftmaxGradRows(dy.data(), y.data(), dx.data(), rows, n, scale, mask, inner);
      std::vector<uint16_t> dyb(rows * n), yb(rows * n), dxb(rows * n);
      for (int64_t i = 0; i < rows * n; ++i) {
        dyb[i] = FloatToBFloat16(dy[i]);
        yb[i] = FloatToBFloat16(y[i]);
      }
      avx512::SoftmaxGradRows(dyb.data(), yb.data(), dxb.data(), rows, n, scale, mask, inner);
      for (int64_t r = 0; r < rows; ++r) {
        double dot = 0, dotb = 0;
        for (int64_t i = 0; i < n; ++i) {
          dot += double(dy[r * n + i]) * y[r * n + i];
          dotb += double(BFloat16ToFloat(dyb[r * n + i])) * BFloat16ToFloat(yb[r * n + i]);
        }
        for (int64_t i = 0; i < n; ++i) {
          const bool keep = mode == 0 || masks[r][mode == 2 ? i : 0] != 0;
          const double want = keep ? scale * y[r * n + i] * (dy[r * n + i] - dot) : 0.0;
          const double wantb = keep ? scale * double(BFloat16ToFloat(yb[r * n + i])) *
                                          (BFloat16ToFloat(dyb[r * n + i]) - dotb)
                                    : 0.0;
          ExpectNear(dx[r * n + i], want, 1e-5, "f32", n, i);
          ExpectNear(BFloat16ToFloat(dxb[r * n + i]), wantb, 1.0 / 128, "bf16", n, i);
        }
      }
    }
  }
}

TEST(RowsAvx512, LayerNormMatchesTheReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(9);
  for (int64_t n : {1, 7, 16, 64, 100, 128}) {
    for (bool with_bias : {true, false}) {
      const int64_t rows = 4;
      std::vector<float> x;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> row = RandomRow(n, rng, 3);
        for (float& v : row) v += 100.0f * r;  // a large mean over a small spread
        x.insert(x.end(), row.begin(), row.end());
      }
      std::vector<float> scale = RandomRow(n, rng, 2), bias = RandomRow(n, rng, 1);
      const float* b = with_bias ? bias.data() : nullptr;
      std::vector<float> y(x.size()), mean(rows), inv(rows);
      avx512::LayerNormRows(x.data(), y.data(), rows, n, scale.data(), b, 1e-5f, mean.data(),
                            inv.data());
      std::vector<uint16_t> xb(x.size()), yb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = FloatToBFloat16(x[i]);
      std::vector<float> meanb(rows), invb(rows);
      avx512::LayerNormRows(xb.data(), yb.data(), rows, n, scale.data(), b, 1e-5f, meanb.data(),
                            invb.data());
      for (int64_t r = 0; r < rows; ++r) {
        double m = 0, q = 0, mb = 0, qb = 0;
        for (int64_t i = 0; i < n; ++i) {
          m += x[r * n + i];
          mb += BFloat16ToFloat(xb[r * n + i]);
        }
        m /= n;
        mb /= n;
        for (int64_t i = 0; i < n; ++i) {
          q += (x[r * n + i] - m) * (x[r * n + i] - m);
          const double d = BFloat16ToFloat(xb[r * n + i]) - mb;
          qb += d * d;
        }
        const double iv = 1 / std::sqrt(q / n + 1e-5), ivb = 1 / std::sqrt(qb / n + 1e-5);
        EXPECT_NEAR(mean[r], m, 1e-6 * (1 + std::fabs(m)));
        EXPECT_NEAR(inv[r], iv, 1e-5 * iv);
        for (int64_t i = 0; i < n; ++i) {
          const double want = (x[r * n + i] - m) * iv * scale[i] + (b ? b[i] : 0.0);
          const double wantb =
              (BFloat16ToFloat(xb[r * n + i]) - mb) * ivb * scale[i] + (b ? b[i] : 0.0);
          ExpectNear(y[r * n + i], want, 2e-4, "f32", n, i);  // |x - m| ~ 1e2 ulps of the mean
          ExpectNear(BFloat16ToFloat(yb[r * n + i]), wantb, 1.0 / 128, "bf16", n, i);
        }
      }
    }
  }
}

}  // namespace
}  // namespace mixtrain::cpu
