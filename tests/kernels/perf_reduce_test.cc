// Correctness of the reduction fast path for several reduced blocks whose last one is contiguous
// (kernels/cpu/reduce.cc's ReduceGeneral folding whole runs, as a Conv bias gradient's
// ReduceSum over N, H, W does), against a double-precision index walk, in every float dtype and
// reduction kind, including a NaN that ReduceMax must propagate.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/reduce_test_util.h"

namespace mixtrain {
namespace {

using red_test::Make;
using red_test::Rounded;
using red_test::Uniform;
using red_test::Values;

// Reference: out[kept index] = reduce over the masked axes, in double.
std::vector<double> Ref(const std::vector<double>& x, const std::vector<int64_t>& dims,
                        const std::vector<bool>& mask, const std::string& op) {
  std::vector<int64_t> out_dims;
  for (size_t i = 0; i < dims.size(); ++i) out_dims.push_back(mask[i] ? 1 : dims[i]);
  int64_t out_n = 1, count = 1;
  for (size_t i = 0; i < dims.size(); ++i) (mask[i] ? count : out_n) *= dims[i];
  std::vector<double> acc(out_n, op == "ReduceMax" ? -INFINITY : 0.0);
  std::vector<int64_t> idx(dims.size(), 0);
  for (size_t q = 0; q < x.size(); ++q) {
    int64_t o = 0;
    for (size_t i = 0; i < dims.size(); ++i) o = o * out_dims[i] + (mask[i] ? 0 : idx[i]);
    double v = x[q];
    if (op == "ReduceMax") acc[o] = (v > acc[o] || std::isnan(v)) && !std::isnan(acc[o]) ? v : acc[o];
    else acc[o] += op == "ReduceSumSquare" ? v * v : v;
    for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
  if (op == "ReduceMean")
    for (double& a : acc) a /= static_cast<double>(count);
  return acc;
}

TEST(PerfReduceTest, SeveralReducedBlocksEndingContiguous) {
  struct Case {
    std::vector<int64_t> dims, axes;
  };
  const Case cases[] = {
      {{8, 6, 5, 7}, {0, 2, 3}},  // bias gradient of a conv: [N, C, H, W] over N, H, W
      {{3, 4, 5, 6}, {0, 3}},     // reduced, kept (merged 4x5), reduced
      {{2, 3, 2, 3, 9}, {0, 2, 4}},  // three reduced blocks
  };
  for (const std::string op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceSumSquare"}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (const Case& c : cases) {
        std::vector<double> x = Uniform(red_test::Count(c.dims), -2, 2, 11);
        std::vector<bool> mask(c.dims.size(), false);
        for (int64_t a : c.axes) mask[a] = true;
        std::vector<double> want = Ref(Rounded(t, x), c.dims, mask, op);
        Tensor y = red_test::Run(op, {Make(t, c.dims, x)},
                       {Attribute::Ints("axes", c.axes), Attribute::Int("keepdims", 0)}, 11);
        ASSERT_TRUE(y.defined());
        std::vector<double> got = Values(y);
        ASSERT_EQ(got.size(), want.size());
        const double tol = t == DType::kF32 ? 1e-5 : (t == DType::kF16 ? 2e-3 : 1e-2);
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i])))
              << op << " " << DTypeName(t) << " output " << i;
      }
    }
  }
}

TEST(PerfReduceTest, MaxPropagatesNaNThroughContiguousRuns) {
  std::vector<int64_t> dims = {4, 3, 10};
  std::vector<double> x = Uniform(120, -1, 1, 3);
  x[1 * 30 + 2 * 10 + 7] = NAN;  // n = 1, c = 2
  Tensor y = red_test::Run("ReduceMax", {Make(DType::kF32, dims, x)},
                 {Attribute::Ints("axes", {0, 2}), Attribute::Int("keepdims", 0)}, 11);
  std::vector<double> got = Values(y);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_FALSE(std::isnan(got[0]));
  EXPECT_FALSE(std::isnan(got[1]));
  EXPECT_TRUE(std::isnan(got[2]));
}

}  // namespace
}  // namespace mixtrain
