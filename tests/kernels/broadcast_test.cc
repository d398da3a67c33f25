// kernels/common/broadcast: dim merging, strides, and that the CPU row walker and the per-element
// offsets (what CUDA threads use) agree with a plain multi-index reference for any split point.
#include "kernels/common/broadcast.h"

#include <random>

#include "gtest/gtest.h"

namespace mixtrain {
namespace {

using Dims = std::vector<int64_t>;

TEST(BroadcastTest, BroadcastDimsAndErrors) {
  EXPECT_EQ(*BroadcastDims(Dims{2, 3, 4}, Dims{3, 1}), (Dims{2, 3, 4}));
  EXPECT_EQ(*BroadcastDims(Dims{}, Dims{5}), (Dims{5}));
  EXPECT_EQ(*BroadcastDims(Dims{1, 0}, Dims{3, 1}), (Dims{3, 0}));
  auto bad = BroadcastDims(Dims{2, 3}, Dims{4});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[2,3]"), std::string::npos);
}

TEST(BroadcastTest, StridesAreZeroOnBroadcastDims) {
  EXPECT_EQ(BroadcastStrides(Dims{3, 1}, Dims{2, 3, 4}), (Dims{0, 1, 0}));
  EXPECT_EQ(BroadcastStrides(Dims{2, 3, 4}, Dims{2, 3, 4}), (Dims{12, 4, 1}));
  EXPECT_EQ(BroadcastStrides(Dims{}, Dims{2, 3}), (Dims{0, 0}));
}

TEST(BroadcastTest, LayoutMergesContiguousDims) {
  Dims out = {2, 3, 4, 5}, same = {2, 3, 4, 5}, bias = {3, 1, 1};
  auto l = MakeBroadcastLayout({same, same}, out);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->rank, 1);
  EXPECT_EQ(l->dims[0], 120);
  l = MakeBroadcastLayout({same, bias}, out);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->rank, 3);  // [N, C, H*W] with the bias walking only C
  EXPECT_EQ(l->dims[2], 20);
  EXPECT_EQ(l->strides[1][0], 0);
  EXPECT_EQ(l->strides[1][1], 1);
  EXPECT_EQ(l->inner_stride(0), 1);
  EXPECT_EQ(l->inner_stride(1), 0);
  Dims scalar = {};
  l = MakeBroadcastLayout({scalar, scalar}, scalar);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->rank, 0);
  EXPECT_EQ(l->numel, 1);
  Dims bad = {4};
  EXPECT_FALSE(MakeBroadcastLayout({bad}, Dims{2, 3}).ok());
}

// Offset of output element e in an input of dims `in` (reference by multi-index).
int64_t RefOffset(const Dims& in, const Dims& out, int64_t e) {
  Dims idx(out.size());
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    idx[d] = e % out[d];
    e /= out[d];
  }
  int64_t off = 0;
  for (size_t k = 0; k < in.size(); ++k)
    off = off * in[k] + (in[k] == 1 ? 0 : idx[out.size() - in.size() + k]);
  return off;
}

TEST(BroadcastTest, RowWalkAndOffsetsMatchReferenceForAnySplit) {
  const std::vector<std::vector<Dims>> cases = {
      {{2, 3, 4}, {3, 1}, {1}},        {{5, 1, 7}, {1, 6, 1}, {5, 6, 7}},
      {{4, 1, 3, 1, 2}, {1, 5, 1, 6, 1}}, {{9}, {}},
      {{1, 1, 8}, {2, 3, 1}},          {{2, 3, 4, 5, 6}, {3, 1, 5, 1}, {6}, {2, 1, 1, 1, 1}},
  };
  std::mt19937 rng(3);
  for (const auto& ins : cases) {
    Dims out = ins[0];
    for (const Dims& d : ins) out = *BroadcastDims(out, d);
    std::vector<std::span<const int64_t>> spans(ins.begin(), ins.end());
    auto l = MakeBroadcastLayout(spans, out);
    ASSERT_TRUE(l.ok()) << l.status();
    for (int64_t e = 0; e < l->numel; ++e)
      for (size_t i = 0; i < ins.size(); ++i)
        ASSERT_EQ(l->InputOffset(static_cast<int>(i), e), RefOffset(ins[i], out, e));
    for (int trial = 0; trial < 20; ++trial) {
      int64_t a = rng() % (l->numel + 1), b = rng() % (l->numel + 1);
      if (a > b) std::swap(a, b);
      int64_t next = a;
      ForEachRow(*l, a, b, [&](int64_t pos, const int64_t* offs, int64_t len) {
        ASSERT_EQ(pos, next);
        ASSERT_GT(len, 0);
        for (int64_t k = 0; k < len; ++k)
          for (size_t i = 0; i < ins.size(); ++i)
            ASSERT_EQ(offs[i] + k * l->inner_stride(static_cast<int>(i)),
                      RefOffset(ins[i], out, pos + k));
        next = pos + len;
      });
      EXPECT_EQ(next, b);
    }
  }
}

}  // namespace
}  // namespace mixtrain
