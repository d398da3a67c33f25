// Correctness of Where's vectorized rows (kernels/cpu/elementwise_binary.cc: a bit blend per
// inner-stride pattern): every combination of condition, X and Y being full rows or broadcast
// scalars along the inner axis, for each element width, with rows long enough for the vector
// body and a tail.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/elementwise_test_util.h"

namespace mixtrain {
namespace {

using ew_test::Make;
using ew_test::RefMap;
using ew_test::RunOp;
using ew_test::Values;

TEST(PerfWhereTest, EveryInnerStridePatternAndWidth) {
  const int64_t rows = 3, n = 77;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI64, DType::kI32,
                  DType::kU8, DType::kBool}) {
    for (int pattern = 0; pattern < 8; ++pattern) {
      // Bit 2: condition varies along the inner axis; bit 1: X does; bit 0: Y does.
      auto dims = [&](bool full) { return std::vector<int64_t>{rows, full ? n : 1}; };
      auto values = [&](bool full, int seed, bool boolean) {
        std::vector<double> v(rows * (full ? n : 1));
        for (size_t i = 0; i < v.size(); ++i)
          v[i] = boolean ? static_cast<double>((i * 7 + seed) % 3 == 0)
                         : static_cast<double>((i * 13 + seed) % 11) - 5;
        return v;
      };
      const bool fc = pattern & 4, fx = pattern & 2, fy = pattern & 1;
      const bool is_bool = t == DType::kBool;
      const bool is_unsigned = t == DType::kU8;
      auto vals = [&](bool full, int seed) {
        std::vector<double> v = values(full, seed, is_bool);
        if (is_unsigned)
          for (double& e : v) e += 5;
        return v;
      };
      Tensor c = Make(DType::kBool, dims(fc), values(fc, 1, true));
      Tensor x = Make(t, dims(fx), vals(fx, 2));
      Tensor y = Make(t, dims(fy), vals(fy, 3));
      Tensor o = RunOp("Where", {c, x, y});
      ASSERT_EQ(o.dims(), (std::vector<int64_t>{rows, fc || fx || fy ? n : 1}));
      EXPECT_EQ(Values(o),
                RefMap({c, x, y}, [](const std::vector<double>& v) { return v[0] ? v[1] : v[2]; }))
          << DTypeName(t) << " pattern " << pattern;
    }
  }
}

}  // namespace
}  // namespace mixtrain
