// CPU kernels that rearrange, select and join elements: Transpose, Expand, Tile, Slice, Gather,
// Concat, Split, Pad. Each output is checked element by element against source indices computed
// with plain multi-index arithmetic (or numpy results for Slice/Pad), for every dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "tests/kernels/movement_test_util.h"

namespace mixtrain {
namespace {

using movement_test::ExpectGathered;
using movement_test::I64;
using movement_test::Iota;
using movement_test::kAllTypes;
using movement_test::Ravel;
using movement_test::RunOp;
using movement_test::RunError;
using movement_test::Unravel;

std::vector<int64_t> RefTranspose(const std::vector<int64_t>& in_dims,
                                  const std::vector<int64_t>& perm, std::vector<int64_t>* out_dims) {
  out_dims->clear();
  for (int64_t p : perm) out_dims->push_back(in_dims[p]);
  std::vector<int64_t> src(NumElements(*out_dims));
  for (size_t i = 0; i < src.size(); ++i) {
    std::vector<int64_t> o = Unravel(i, *out_dims), in(in_dims.size());
    for (size_t d = 0; d < perm.size(); ++d) in[perm[d]] = o[d];
    src[i] = Ravel(in, in_dims);
  }
  return src;
}

void CheckTranspose(DType t, const std::vector<int64_t>& dims, const std::vector<int64_t>& perm) {
  Tensor x = Iota(t, dims);
  std::vector<int64_t> out_dims;
  std::vector<int64_t> src = RefTranspose(dims, perm, &out_dims);
  auto out = RunOp("Transpose", {x}, {Attribute::Ints("perm", perm)});
  ExpectGathered(out[0], out_dims, x, src);
}

TEST(MovementTest, TransposeAllPermutationsOfRank4) {
  std::vector<int64_t> perm = {0, 1, 2, 3};
  do {
    CheckTranspose(DType::kF32, {2, 3, 4, 5}, perm);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(MovementTest, TransposeBlockedPathsEveryDtype) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    CheckTranspose(t, {67, 129}, {1, 0});                // 2-D, ragged tiles
    CheckTranspose(t, {2, 16, 9, 7}, {0, 2, 3, 1});      // NCHW -> NHWC
    CheckTranspose(t, {2, 9, 7, 16}, {0, 3, 1, 2});      // NHWC -> NCHW
    CheckTranspose(t, {2, 3, 33, 65}, {0, 1, 3, 2});     // attention's last-two swap
    CheckTranspose(t, {2, 5, 3, 8}, {0, 2, 1, 3});       // heads split: inner dim kept
    CheckTranspose(t, {1, 40, 1, 50}, {3, 2, 1, 0});     // size-1 dims dropped
  }
}

TEST(MovementTest, TransposeDefaultPermReversesAndNegativePermWraps) {
  Tensor x = Iota(DType::kI64, {2, 3, 4});
  std::vector<int64_t> out_dims;
  auto src = RefTranspose({2, 3, 4}, {2, 1, 0}, &out_dims);
  ExpectGathered(RunOp("Transpose", {x})[0], out_dims, x, src);
  src = RefTranspose({2, 3, 4}, {1, 2, 0}, &out_dims);
  ExpectGathered(RunOp("Transpose", {x}, {Attribute::Ints("perm", {-2, -1, 0})})[0], out_dims, x,
                 src);
  EXPECT_FALSE(RunError("Transpose", {x}, {Attribute::Ints("perm", {0, 0, 1})}).ok());
}

std::vector<int64_t> RefExpand(const std::vector<int64_t>& in_dims,
                               const std::vector<int64_t>& out_dims) {
  std::vector<int64_t> src(NumElements(out_dims));
  const size_t off = out_dims.size() - in_dims.size();
  for (size_t i = 0; i < src.size(); ++i) {
    std::vector<int64_t> o = Unravel(i, out_dims), in(in_dims.size());
    for (size_t d = 0; d < in_dims.size(); ++d) in[d] = in_dims[d] == 1 ? 0 : o[off + d];
    src[i] = Ravel(in, in_dims);
  }
  return src;
}

TEST(MovementTest, ExpandBroadcastsBothWays) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {3, 1});
    ExpectGathered(RunOp("Expand", {x, I64({2, 1, 6})})[0], {2, 3, 6}, x,
                   RefExpand({3, 1}, {2, 3, 6}));
    Tensor y = Iota(t, {2, 1, 4, 1});
    ExpectGathered(RunOp("Expand", {y, I64({3, 4, 5})})[0], {2, 3, 4, 5}, y,
                   RefExpand({2, 1, 4, 1}, {2, 3, 4, 5}));
  }
  Tensor z = Iota(DType::kF32, {3, 4});  // a shape smaller than the input keeps the input dims
  ExpectGathered(RunOp("Expand", {z, I64({1})})[0], {3, 4}, z, RefExpand({3, 4}, {3, 4}));
  EXPECT_FALSE(RunError("Expand", {z, I64({2, 4})}).ok());
}

TEST(MovementTest, TileRepeatsEachDim) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {2, 3});
    std::vector<int64_t> out_dims = {4, 9}, src;
    for (int64_t i = 0; i < 36; ++i) {
      auto o = Unravel(i, out_dims);
      src.push_back(Ravel({o[0] % 2, o[1] % 3}, {2, 3}));
    }
    ExpectGathered(RunOp("Tile", {x, I64({2, 3})})[0], out_dims, x, src);
  }
  Tensor x = Iota(DType::kF32, {2, 3});
  ExpectGathered(RunOp("Tile", {x, I64({1, 1})})[0], {2, 3}, x, {0, 1, 2, 3, 4, 5});
  ExpectGathered(RunOp("Tile", {x, I64({0, 2})})[0], {0, 6}, x, {});
  EXPECT_FALSE(RunError("Tile", {x, I64({2})}).ok());
}

TEST(MovementTest, SliceOpset10FormsEveryDtype) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {3, 4, 5});
    // numpy: x[2:0:-1, ::-2, 1:4]
    auto out = RunOp("Slice", {x, I64({2, -1, 1}), I64({0, std::numeric_limits<int64_t>::min(), 4}),
                             I64({0, 1, 2}), I64({-1, -2, 1})});
    ExpectGathered(out[0], {2, 2, 3}, x, {56, 57, 58, 46, 47, 48, 36, 37, 38, 26, 27, 28});
  }
  Tensor x = Iota(DType::kF32, {3, 4, 5});
  // numpy: x[:, -1:-1000:-2, 3:] through negative axes and out-of-range ends
  auto out = RunOp("Slice", {x, I64({-1, 3}), I64({-1000, 1000}), I64({-2, -1}), I64({-2, 1})});
  ExpectGathered(out[0], {3, 2, 2}, x, {18, 19, 8, 9, 38, 39, 28, 29, 58, 59, 48, 49});
  // numpy: x[-100:100, 10:20] -> empty; default axes and steps
  out = RunOp("Slice", {x, I64({-100, 10}), I64({100, 20})});
  ExpectGathered(out[0], {3, 0, 5}, x, {});
  // default steps with axes given; int32 parameters
  auto i32 = [](std::vector<int32_t> v) {
    return Tensor::FromVector<int32_t>(DType::kI32, {static_cast<int64_t>(v.size())}, v);
  };
  out = RunOp("Slice", {x, i32({1}), i32({3}), i32({1})});
  std::vector<int64_t> src;
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 1; b < 3; ++b)
      for (int64_t c = 0; c < 5; ++c) src.push_back(Ravel({a, b, c}, {3, 4, 5}));
  ExpectGathered(out[0], {3, 2, 5}, x, src);
  EXPECT_FALSE(RunError("Slice", {x, I64({0}), I64({1}), I64({0}), I64({0})}).ok());
  EXPECT_FALSE(RunError("Slice", {x, I64({0, 0}), I64({1, 1}), I64({1, -2})}).ok());
}

TEST(MovementTest, SliceOpset1Attributes) {
  Tensor x = Iota(DType::kI64, {4, 3});
  auto out = RunOp("Slice", {x},
                 {Attribute::Ints("starts", {1}), Attribute::Ints("ends", {-1}),
                  Attribute::Ints("axes", {0})},
                 1, 9);
  ExpectGathered(out[0], {2, 3}, x, {3, 4, 5, 6, 7, 8});
}

std::vector<int64_t> RefGather(const std::vector<int64_t>& dims, int64_t axis,
                               const std::vector<int64_t>& idx, const std::vector<int64_t>& idx_dims,
                               std::vector<int64_t>* out_dims) {
  *out_dims = std::vector<int64_t>(dims.begin(), dims.begin() + axis);
  out_dims->insert(out_dims->end(), idx_dims.begin(), idx_dims.end());
  out_dims->insert(out_dims->end(), dims.begin() + axis + 1, dims.end());
  std::vector<int64_t> src(NumElements(*out_dims));
  const size_t q = idx_dims.size();
  for (size_t i = 0; i < src.size(); ++i) {
    std::vector<int64_t> o = Unravel(i, *out_dims);
    std::vector<int64_t> ii(o.begin() + axis, o.begin() + axis + q);
    int64_t k = idx[Ravel(ii, idx_dims)];
    if (k < 0) k += dims[axis];
    std::vector<int64_t> in(o.begin(), o.begin() + axis);
    in.push_back(k);
    in.insert(in.end(), o.begin() + axis + q, o.end());
    src[i] = Ravel(in, dims);
  }
  return src;
}

TEST(MovementTest, GatherAnyAxisNegativeIndicesBothIndexTypes) {
  const std::vector<int64_t> dims = {3, 4, 5};
  const std::vector<int64_t> idx = {2, -1, 0, 1, -3, 2};
  for (DType t : kAllTypes) {
    for (int64_t axis : {0, 1, 2, -1}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(t), " axis ", axis));
      Tensor x = Iota(t, dims);
      Tensor i64 = Tensor::FromVector<int64_t>(DType::kI64, {2, 3}, idx);
      std::vector<int32_t> idx32(idx.begin(), idx.end());
      Tensor i32 = Tensor::FromVector<int32_t>(DType::kI32, {2, 3}, idx32);
      std::vector<int64_t> out_dims;
      auto src = RefGather(dims, axis < 0 ? axis + 3 : axis, idx, {2, 3}, &out_dims);
      ExpectGathered(RunOp("Gather", {x, i64}, {Attribute::Int("axis", axis)})[0], out_dims, x, src);
      ExpectGathered(RunOp("Gather", {x, i32}, {Attribute::Int("axis", axis)})[0], out_dims, x, src);
    }
  }
  Tensor x = Iota(DType::kF32, {3, 4});
  std::vector<int64_t> out_dims;  // scalar index: the axis disappears
  auto src = RefGather({3, 4}, 1, {2}, {}, &out_dims);
  ExpectGathered(RunOp("Gather", {x, Tensor::ScalarI64(2)}, {Attribute::Int("axis", 1)})[0],
                 out_dims, x, src);
  EXPECT_FALSE(RunError("Gather", {x, I64({3})}).ok());
  EXPECT_FALSE(RunError("Gather", {x, I64({-4})}).ok());
}

TEST(MovementTest, ConcatAlongEveryAxis) {
  for (DType t : kAllTypes) {
    for (int64_t axis : {0, 1, 2, -1}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(t), " axis ", axis));
      const int64_t ax = axis < 0 ? axis + 3 : axis;
      std::vector<Tensor> parts;
      std::vector<int64_t> sizes = {2, 1, 3};
      for (int64_t s : sizes) {
        std::vector<int64_t> d = {2, 3, 4};
        d[ax] = s;
        parts.push_back(Iota(t, d));
      }
      std::vector<int64_t> out_dims = {2, 3, 4};
      out_dims[ax] = 6;
      auto out = RunOp("Concat", parts, {Attribute::Int("axis", axis)});
      // Check per part: element o of the output at axis position p belongs to the part covering p.
      ASSERT_EQ(out[0].dims(), out_dims);
      const size_t es = DTypeSize(t);
      for (int64_t i = 0; i < out[0].numel(); ++i) {
        std::vector<int64_t> o = Unravel(i, out_dims);
        int64_t p = o[ax], k = 0;
        while (p >= sizes[k]) p -= sizes[k++];
        std::vector<int64_t> pd = parts[k].dims(), pi = o;
        pi[ax] = p;
        ASSERT_EQ(std::memcmp(static_cast<const uint8_t*>(out[0].data()) + i * es,
                              static_cast<const uint8_t*>(parts[k].data()) + Ravel(pi, pd) * es, es),
                  0) << "element " << i;
      }
    }
  }
  EXPECT_FALSE(RunError("Concat", {Iota(DType::kF32, {2, 3}), Iota(DType::kF32, {3, 2})},
                        {Attribute::Int("axis", 0)})
                   .ok());
}

// Output k of a split along `axis` starts at offset `begin[k]` along it.
void ExpectSplit(const std::vector<Tensor>& outs, const Tensor& x, int64_t axis,
                 const std::vector<int64_t>& sizes) {
  ASSERT_EQ(outs.size(), sizes.size());
  int64_t begin = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<int64_t> d = x.dims();
    d[axis] = sizes[k];
    std::vector<int64_t> src(NumElements(d));
    for (size_t i = 0; i < src.size(); ++i) {
      std::vector<int64_t> o = Unravel(i, d);
      o[axis] += begin;
      src[i] = Ravel(o, x.dims());
    }
    ExpectGathered(outs[k], d, x, src);
    begin += sizes[k];
  }
}

TEST(MovementTest, SplitEveryOpsetForm) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {4, 7});
    // opset 11: `split` attribute
    ExpectSplit(RunOp("Split", {x}, {Attribute::Int("axis", 1), Attribute::Ints("split", {2, 5})}, 2,
                    11),
                x, 1, {2, 5});
    // opset 13: `split` input, negative axis, a zero-size part
    ExpectSplit(RunOp("Split", {x, I64({3, 0, 4})}, {Attribute::Int("axis", -1)}, 3, 13), x, 1,
                {3, 0, 4});
    // no sizes: equal parts
    ExpectSplit(RunOp("Split", {x}, {}, 2, 13), x, 0, {2, 2});
    // opset 18: num_outputs, the last part smaller
    ExpectSplit(RunOp("Split", {x}, {Attribute::Int("axis", 1), Attribute::Int("num_outputs", 3)}, 3,
                    18),
                x, 1, {3, 3, 1});
  }
  Tensor x = Iota(DType::kF32, {4, 7});
  EXPECT_FALSE(RunError("Split", {x, I64({3, 3})}, {Attribute::Int("axis", 1)}, 2, 13).ok());
  EXPECT_FALSE(RunError("Split", {x}, {Attribute::Int("axis", 1)}, 2, 13).ok());
}

TEST(MovementTest, PadModesMatchNumpy) {
  // numpy.pad(arange(12).reshape(3, 4), ((2, 3), (3, 5)), mode=...)
  const std::vector<int64_t> reflect = {
      11, 10, 9, 8, 9, 10, 11, 10, 9, 8, 9, 10, 7, 6, 5, 4, 5, 6, 7, 6, 5, 4, 5, 6,
      3,  2,  1, 0, 1, 2,  3,  2,  1, 0, 1, 2,  7, 6, 5, 4, 5, 6, 7, 6, 5, 4, 5, 6,
      11, 10, 9, 8, 9, 10, 11, 10, 9, 8, 9, 10, 7, 6, 5, 4, 5, 6, 7, 6, 5, 4, 5, 6,
      3,  2,  1, 0, 1, 2,  3,  2,  1, 0, 1, 2,  7, 6, 5, 4, 5, 6, 7, 6, 5, 4, 5, 6};
  const std::vector<int64_t> edge = {
      0, 0, 0, 0, 1, 2, 3, 3, 3, 3, 3,  3,  0, 0, 0, 0, 1, 2, 3,  3,  3,  3,  3,  3,
      0, 0, 0, 0, 1, 2, 3, 3, 3, 3, 3,  3,  4, 4, 4, 4, 5, 6, 7,  7,  7,  7,  7,  7,
      8, 8, 8, 8, 9, 10, 11, 11, 11, 11, 11, 11, 8, 8, 8, 8, 9, 10, 11, 11, 11, 11, 11, 11,
      8, 8, 8, 8, 9, 10, 11, 11, 11, 11, 11, 11, 8, 8, 8, 8, 9, 10, 11, 11, 11, 11, 11, 11};
  const std::vector<int64_t> wrap = {
      5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8,
      1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 5, 6,  7,  4, 5, 6,  7,  4, 5, 6,  7,  4,
      9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0,
      5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8};
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {3, 4});
    Tensor pads = I64({2, 3, 3, 5});
    for (auto [mode, want] : {std::pair{"reflect", &reflect}, {"edge", &edge}, {"wrap", &wrap}})
      ExpectGathered(RunOp("Pad", {x, pads}, {Attribute::String("mode", mode)}, 1, 19)[0], {8, 12},
                     x, *want);
    // constant with a value (input 2), and a negative pad that crops
    Tensor value = Iota(t, {1, 1}).Reshaped({});
    std::vector<int64_t> src;
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 5; ++c) src.push_back(r < 3 && c < 3 ? r * 4 + c + 1 : -1);
    std::vector<uint8_t> fill(DTypeSize(t), 0);  // Iota's element 0 is zero for every dtype
    if (t == DType::kBool) fill[0] = 1;
    ExpectGathered(RunOp("Pad", {x, I64({0, -1, 1, 2}), value})[0], {4, 5}, x, src, fill);
  }
}

TEST(MovementTest, PadOpset18AxesAndOpset2Attributes) {
  Tensor x = Iota(DType::kF32, {2, 3});
  // axes = [-1]: pads apply to the last dim only; default fill zero
  auto out = RunOp("Pad", {x, I64({1, 2}), Tensor(), I64({-1})}, {}, 1, 18);
  std::vector<uint8_t> zero(4, 0);
  ExpectGathered(out[0], {2, 6}, x, {-1, 0, 1, 2, -1, -1, -1, 3, 4, 5, -1, -1}, zero);
  // opset 2: pads and value as attributes
  out = RunOp("Pad", {x}, {Attribute::Ints("pads", {1, 0, 0, 1}), Attribute::Float("value", 2.5f)},
            1, 2);
  float v = 2.5f;
  std::vector<uint8_t> fill(4);
  std::memcpy(fill.data(), &v, 4);
  ExpectGathered(out[0], {3, 4}, x, {-1, -1, -1, -1, 0, 1, 2, -1, 3, 4, 5, -1}, fill);
  EXPECT_FALSE(RunError("Pad", {x, I64({1, 2, 3})}).ok());
  EXPECT_FALSE(RunError("Pad", {x, I64({0, 0, 0, 0})}, {Attribute::String("mode", "mirror")}).ok());
}

TEST(MovementTest, LargeCopiesUseBothThreadsCorrectly) {
  // Past the parallel grain: Concat along axis 0, Slice with a long inner run, Expand rows.
  Tensor a = Iota(DType::kF32, {300, 1000}), b = Iota(DType::kF32, {200, 1000});
  auto out = RunOp("Concat", {a, b}, {Attribute::Int("axis", 0)});
  for (int64_t i : {0L, 299999L, 300000L, 499999L})
    EXPECT_EQ(out[0].data_as<float>()[i], static_cast<float>(i < 300000 ? i : i - 300000));
  out = RunOp("Slice", {a, I64({1}), I64({999}), I64({1})});
  for (int64_t r = 0; r < 300; r += 37)
    EXPECT_EQ(out[0].data_as<float>()[r * 998 + 5], static_cast<float>(r * 1000 + 6));
  Tensor row = Iota(DType::kF32, {1, 1000});
  out = RunOp("Expand", {row, I64({500, 1000})});
  for (int64_t r = 0; r < 500; r += 61) EXPECT_EQ(out[0].data_as<float>()[r * 1000 + 7], 7.0f);
}

}  // namespace
}  // namespace mixtrain
