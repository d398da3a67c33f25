// Tests of the CPU reduction and softmax kernels (kernels/cpu/reduce.cc, softmax.cc) and their
// shape rules, against plain reference loops in double written here: every opset form of the
// axes (attribute, input, opset 18), keepdims, noop_with_empty_axes, each internal path (row,
// column, general), fp32/fp16/bf16 and the integer types.
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/reduce.h"
#include "tests/kernels/reduce_test_util.h"

namespace mixtrain {
namespace {

using red_test::ExpectNear;
using red_test::Make;
using red_test::Rounded;
using red_test::Tol;
using red_test::Uniform;
using red_test::Values;

const DType kFloats[] = {DType::kF32, DType::kF16, DType::kBF16};

enum class Kind { kSum, kMean, kMax, kSumSquare };

// Reference reduction over the axes in `mask`; output in row-major order of the kept dims.
std::vector<double> RefReduce(const std::vector<double>& x, const std::vector<int64_t>& dims,
                              const std::vector<bool>& mask, Kind k) {
  const int64_t r = dims.size();
  std::vector<int64_t> out_dims;
  for (int64_t i = 0; i < r; ++i) out_dims.push_back(mask[i] ? 1 : dims[i]);
  std::vector<double> acc(red_test::Count(out_dims),
                          k == Kind::kMax ? -std::numeric_limits<double>::infinity() : 0.0);
  std::vector<int64_t> idx(r, 0);
  int64_t count = 1;
  for (int64_t i = 0; i < r; ++i)
    if (mask[i]) count *= dims[i];
  for (size_t q = 0; q < x.size(); ++q) {
    int64_t o = 0;
    for (int64_t i = 0; i < r; ++i) o = o * out_dims[i] + (mask[i] ? 0 : idx[i]);
    double v = x[q];
    if (k == Kind::kMax) acc[o] = std::max(acc[o], v);
    else acc[o] += k == Kind::kSumSquare ? v * v : v;
    for (int64_t i = r - 1; i >= 0; --i) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
  if (k == Kind::kMean)
    for (double& a : acc) a /= static_cast<double>(count);
  return acc;
}

const char* OpName(Kind k) {
  switch (k) {
    case Kind::kSum: return "ReduceSum";
    case Kind::kMean: return "ReduceMean";
    case Kind::kMax: return "ReduceMax";
    case Kind::kSumSquare: return "ReduceSumSquare";
  }
  return "";
}

struct AxesCase {
  std::vector<int64_t> dims;
  std::vector<int64_t> axes;  // empty: all axes
};

// Every kind x dtype x axes pattern, with axes as an attribute (opset 11), as an input (opset 18),
// with keepdims 0 and 1.
TEST(ReduceTest, AllKindsDtypesAndAxesForms) {
  const AxesCase cases[] = {
      {{4, 37}, {1}},          // contiguous rows
      {{3, 50, 6}, {1}},       // columns (inner > 1)
      {{2, 3, 4, 5}, {0, 2}},  // two separate reduced blocks: general path
      {{2, 3, 4}, {}},         // all axes
      {{5, 1, 7}, {-1, 1}},    // a size-1 axis and a negative axis
      {{3, 2048}, {0}},        // inner wider than one accumulator chunk
      {{1000, 300}, {0}},      // many rows into one row (a bias gradient): sliced rows
      {{2, 257, 33}, {1}},     // sliced, with rows that do not divide evenly and two outputs
      {{300, 2048}, {0}},      // sliced, inner over two accumulator chunks
  };
  for (Kind k : {Kind::kSum, Kind::kMean, Kind::kMax, Kind::kSumSquare}) {
    for (DType t : kFloats) {
      for (const AxesCase& c : cases) {
        std::vector<double> x = Uniform(red_test::Count(c.dims), -2, 2, 7);
        std::vector<bool> mask(c.dims.size(), c.axes.empty());
        for (int64_t a : c.axes) mask[a < 0 ? a + c.dims.size() : a] = true;
        std::vector<double> want = RefReduce(Rounded(t, x), c.dims, mask, k);
        for (int keep : {0, 1}) {
          for (bool as_input : {false, true}) {
            std::vector<Tensor> in = {Make(t, c.dims, x)};
            std::vector<Attribute> attrs = {Attribute::Int("keepdims", keep)};
            if (as_input)
              in.push_back(Tensor::FromVector<int64_t>(
                  DType::kI64, {static_cast<int64_t>(c.axes.size())}, c.axes));
            else if (!c.axes.empty())
              attrs.push_back(Attribute::Ints("axes", c.axes));
            Tensor y = red_test::Run(OpName(k), in, attrs, as_input ? 18 : 11);
            ASSERT_TRUE(y.defined());
            std::vector<int64_t> want_dims;
            for (size_t i = 0; i < c.dims.size(); ++i)
              if (!mask[i]) want_dims.push_back(c.dims[i]);
              else if (keep) want_dims.push_back(1);
            EXPECT_EQ(y.dims(), want_dims);
            EXPECT_EQ(y.dtype(), t);
            double atol = k == Kind::kMax ? 0 : Tol(t) * 4;  // sums of mixed signs cancel
            ExpectNear(Values(y), want, Tol(t), atol,
                       std::string(OpName(k)) + " " + DTypeName(t) + " " +
                           testing::PrintToString(c.dims));
          }
        }
      }
    }
  }
}

TEST(ReduceTest, ReduceSumOpset13AxesInputAndNoop) {
  std::vector<double> x = Uniform(12, -1, 1, 3);
  Tensor xt = Make(DType::kF32, {3, 4}, x);
  Tensor empty = Tensor::FromVector<int64_t>(DType::kI64, {0}, {});
  // Empty axes reduce everything, unless noop_with_empty_axes makes the op the identity.
  Tensor all = red_test::Run("ReduceSum", {xt, empty}, {Attribute::Int("keepdims", 0)}, 13);
  EXPECT_EQ(all.dims(), std::vector<int64_t>{});
  EXPECT_NEAR(all.GetDouble(0), RefReduce(Rounded(DType::kF32, x), {3, 4}, {true, true},
                                          Kind::kSum)[0], 1e-5);
  Tensor same = red_test::Run("ReduceSum", {xt, empty}, {Attribute::Int("noop_with_empty_axes", 1)},
                             13);
  EXPECT_TRUE(same.Identical(xt));
  // Omitted axes input behaves like empty axes.
  Tensor omitted = red_test::Run("ReduceSum", {xt}, {}, 13);
  EXPECT_EQ(omitted.dims(), (std::vector<int64_t>{1, 1}));
  // noop for ReduceSumSquare still squares (ONNX's reference).
  Tensor sq = red_test::Run("ReduceSumSquare", {xt, empty},
                           {Attribute::Int("noop_with_empty_axes", 1)}, 18);
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(sq.GetDouble(i), xt.GetDouble(i) * xt.GetDouble(i), 1e-6);
}

TEST(ReduceTest, IntegerTypes) {
  for (DType t : {DType::kI32, DType::kI64}) {
    std::vector<double> x = {1, -7, 3, 100000, 2, 5, -9, 4};
    Tensor xt = Make(t, {2, 4}, x);
    Tensor s = red_test::Run("ReduceSum", {xt}, {Attribute::Ints("axes", {1})}, 11);
    EXPECT_EQ(Values(s), (std::vector<double>{1 - 7 + 3 + 100000, 2 + 5 - 9 + 4}));
    EXPECT_EQ(s.dtype(), t);
    Tensor m = red_test::Run("ReduceMax", {xt}, {Attribute::Ints("axes", {0})}, 11);
    EXPECT_EQ(Values(m), (std::vector<double>{2, 5, 3, 100000}));
    Tensor mean = red_test::Run("ReduceMean", {xt}, {Attribute::Ints("axes", {1})}, 11);
    EXPECT_EQ(Values(mean), (std::vector<double>{(1 - 7 + 3 + 100000) / 4, 0}));
  }
  // int32 sums accumulate in int64: no overflow in the middle of a row that ends in range.
  Tensor big = Make(DType::kI32, {4}, {2e9, 2e9, -2e9, -2e9});
  EXPECT_EQ(red_test::Run("ReduceSum", {big}, {}, 11).GetDouble(0), 0);
}

TEST(ReduceTest, MaxPropagatesNaNAndEmptySetIdentities) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = Make(DType::kF32, {2, 3}, {1, nan, 3, 4, 5, 6});
  Tensor m = red_test::Run("ReduceMax", {x}, {Attribute::Ints("axes", {1})}, 11);
  EXPECT_TRUE(std::isnan(m.GetDouble(0)));
  EXPECT_EQ(m.GetDouble(1), 6);
  Tensor e = Make(DType::kF32, {2, 0}, {});
  EXPECT_EQ(red_test::Run("ReduceSum", {e}, {Attribute::Ints("axes", {1})}, 11).GetDouble(1), 0);
  EXPECT_EQ(red_test::Run("ReduceMax", {e}, {Attribute::Ints("axes", {1})}, 11).GetDouble(0),
            -std::numeric_limits<double>::infinity());
}

TEST(ReduceTest, LongFp16SumAccumulatesWide) {
  // 100000 copies of 0.1 in fp16: an fp16 or naive fp32 running sum drifts; ours is exact enough.
  const int64_t n = 100000;
  Tensor x = Make(DType::kF16, {n}, std::vector<double>(n, 0.1));
  const double v = x.GetDouble(0);
  Tensor fp32 = red_test::Run("ReduceSum", {Make(DType::kF32, {n}, std::vector<double>(n, v))});
  EXPECT_NEAR(fp32.GetDouble(0), v * n, 1e-7 * v * n);
  Tensor fp16 = red_test::Run("ReduceSum", {x});
  EXPECT_NEAR(fp16.GetDouble(0), v * n, 1e-3 * v * n);  // one fp16 rounding of the result
}

TEST(ReduceTest, BadAxisIsAnErrorNamingTheNode) {
  Tensor x = Make(DType::kF32, {2, 3}, Uniform(6, 0, 1, 1));
  absl::Status st = red_test::RunStatus("ReduceMean", {x}, {Attribute::Ints("axes", {2})}, 11);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ReduceMean"), absl::string_view::npos) << st;
  st = red_test::RunStatus("ReduceMean", {x}, {Attribute::Ints("axes", {1, -1})}, 11);
  EXPECT_FALSE(st.ok());
}

TEST(ReduceShapeTest, UnknownAxesValue) {
  Graph g;
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), Dim(1), Dim(5)}));
  Value* axes = g.AddValue("axes", DType::kI64, Shape({Dim(2)}));
  for (int keep : {0, 1}) {
    Node* n = g.AddNode("ReduceSum", {x, axes}, 1, "r" + std::to_string(keep));
    n->SetAttr(Attribute::Int("keepdims", keep));
    TypeInfo xi{DType::kF32, x->shape}, ai{DType::kI64, axes->shape};
    std::vector<TypeInfo> out;
    ASSERT_TRUE(InferNode(*n, 18, {xi, ai}, &out).ok());
    ASSERT_TRUE(out[0].shape.rank_known);
    if (keep) {
      // Rank survives; the size-1 dim stays 1 whatever is reduced; the others are unknown.
      EXPECT_EQ(out[0].shape.rank(), 3);
      EXPECT_EQ(out[0].shape.dims[1].value, 1);
      EXPECT_FALSE(out[0].shape.dims[2].known());
    } else {
      EXPECT_EQ(out[0].shape.rank(), 1);  // two of three axes go
    }
  }
}

TEST(ArgMaxTest, AxesKeepdimsTiesAndLastIndex) {
  // [2, 3, 2] with ties along axis 1.
  std::vector<double> x = {1, 5, 3, 5, 3, 0, 7, 7, 7, 1, 2, 9};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64}) {
    Tensor xt = Make(t, {2, 3, 2}, x);
    Tensor first = red_test::Run("ArgMax", {xt}, {Attribute::Int("axis", 1)});
    EXPECT_EQ(first.dims(), (std::vector<int64_t>{2, 1, 2}));
    EXPECT_EQ(first.dtype(), DType::kI64);
    EXPECT_EQ(Values(first), (std::vector<double>{1, 0, 0, 2})) << DTypeName(t);
    Tensor last = red_test::Run("ArgMax", {xt}, {Attribute::Int("axis", 1),
                                                 Attribute::Int("select_last_index", 1),
                                                 Attribute::Int("keepdims", 0)});
    EXPECT_EQ(last.dims(), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(Values(last), (std::vector<double>{2, 1, 1, 2})) << DTypeName(t);
    Tensor lastaxis = red_test::Run("ArgMax", {xt}, {Attribute::Int("axis", -1)});
    EXPECT_EQ(Values(lastaxis), (std::vector<double>{1, 1, 0, 0, 0, 1}));
  }
}

TEST(CumSumTest, ExclusiveReverseAxesAndTypes) {
  std::vector<double> x = {1, 2, 3, 4, 5, 6};  // [2, 3]
  struct Case {
    int64_t axis;
    int exclusive, reverse;
    std::vector<double> want;
  };
  const Case cases[] = {
      {1, 0, 0, {1, 3, 6, 4, 9, 15}},  {1, 1, 0, {0, 1, 3, 0, 4, 9}},
      {1, 0, 1, {6, 5, 3, 15, 11, 6}}, {1, 1, 1, {5, 3, 0, 11, 6, 0}},
      {0, 0, 0, {1, 2, 3, 5, 7, 9}},   {-2, 1, 0, {0, 0, 0, 1, 2, 3}},
  };
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kI64}) {
    for (const Case& c : cases) {
      for (DType at : {DType::kI32, DType::kI64}) {
        Tensor axis = Make(at, {}, {static_cast<double>(c.axis)});
        Tensor y = red_test::Run("CumSum", {Make(t, {2, 3}, x), axis},
                                {Attribute::Int("exclusive", c.exclusive),
                                 Attribute::Int("reverse", c.reverse)},
                                14);
        EXPECT_EQ(y.dtype(), t);
        EXPECT_EQ(Values(y), c.want) << DTypeName(t) << " axis " << c.axis;
      }
    }
  }
}

TEST(CumSumTest, LongFloatScanStaysAccurate) {
  const int64_t n = 50000;
  Tensor y = red_test::Run("CumSum", {Make(DType::kF32, {n}, std::vector<double>(n, 0.1)),
                                     Tensor::ScalarI64(0)});
  EXPECT_NEAR(y.GetDouble(n - 1), static_cast<double>(0.1f) * n, 1e-6 * n);
}

// Reference softmax of x viewed as [outer, n, inner] along n.
std::vector<double> RefSoftmax(const std::vector<double>& x, int64_t outer, int64_t n,
                               int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t r = 0; r < n; ++r) m = std::max(m, x[(o * n + r) * inner + i]);
      for (int64_t r = 0; r < n; ++r) s += std::exp(x[(o * n + r) * inner + i] - m);
      for (int64_t r = 0; r < n; ++r) {
        double v = x[(o * n + r) * inner + i] - m;
        y[(o * n + r) * inner + i] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
  return y;
}

TEST(SoftmaxTest, Opset13AlongOneAxis) {
  const std::vector<int64_t> dims = {2, 3, 4, 5};
  std::vector<double> x = Uniform(120, -5, 5, 11);
  for (bool log : {false, true}) {
    for (DType t : kFloats) {
      for (int64_t axis : {0, 1, 2, 3, -1}) {
        int64_t a = axis < 0 ? axis + 4 : axis, outer = 1, inner = 1;
        for (int64_t i = 0; i < a; ++i) outer *= dims[i];
        for (int64_t i = a + 1; i < 4; ++i) inner *= dims[i];
        std::vector<double> want = RefSoftmax(Rounded(t, x), outer, dims[a], inner, log);
        Tensor y = red_test::Run(log ? "LogSoftmax" : "Softmax", {Make(t, dims, x)},
                                {Attribute::Int("axis", axis)}, 13);
        ExpectNear(Values(y), want, Tol(t), log ? Tol(t) : 1e-6,
                   std::string(log ? "log" : "") + "softmax axis " + std::to_string(axis));
      }
    }
  }
}

TEST(SoftmaxTest, Opset11CoercesTo2DAndDefaultsDiffer) {
  const std::vector<int64_t> dims = {2, 3, 4};
  std::vector<double> x = Uniform(24, -3, 3, 5);
  std::vector<double> xr = Rounded(DType::kF32, x);
  for (bool log : {false, true}) {
    const char* op = log ? "LogSoftmax" : "Softmax";
    // opset 11, axis 1: each of the 2 rows of 12 is normalized as a whole.
    Tensor y11 = red_test::Run(op, {Make(DType::kF32, dims, x)}, {Attribute::Int("axis", 1)}, 11);
    ExpectNear(Values(y11), RefSoftmax(xr, 2, 12, 1, log), 1e-5, 1e-6, "opset 11 axis 1");
    // The default axis is 1 before opset 13 and -1 from 13.
    Tensor d11 = red_test::Run(op, {Make(DType::kF32, dims, x)}, {}, 11);
    ExpectNear(Values(d11), RefSoftmax(xr, 2, 12, 1, log), 1e-5, 1e-6, "opset 11 default");
    Tensor d13 = red_test::Run(op, {Make(DType::kF32, dims, x)}, {}, 13);
    ExpectNear(Values(d13), RefSoftmax(xr, 6, 4, 1, log), 1e-5, 1e-6, "opset 13 default");
    // opset 13, axis 1: only dim 1 is normalized.
    Tensor y13 = red_test::Run(op, {Make(DType::kF32, dims, x)}, {Attribute::Int("axis", 1)}, 13);
    ExpectNear(Values(y13), RefSoftmax(xr, 2, 3, 4, log), 1e-5, 1e-6, "opset 13 axis 1");
  }
}

TEST(SoftmaxTest, LargeInputsAndLongRows) {
  // Huge logits overflow a naive exp; long rows exercise the vector sum.
  std::vector<double> x = {10000, 10001, 10002, -10000};
  Tensor y = red_test::Run("Softmax", {Make(DType::kF32, {1, 4}, x)});
  ExpectNear(Values(y), RefSoftmax(x, 1, 4, 1, false), 1e-5, 1e-7, "large");
  Tensor ly = red_test::Run("LogSoftmax", {Make(DType::kF32, {1, 4}, x)});
  ExpectNear(Values(ly), RefSoftmax(x, 1, 4, 1, true), 1e-5, 1e-5, "large log");
  std::vector<double> row = Uniform(30000, -20, 20, 9);
  Tensor r = red_test::Run("LogSoftmax", {Make(DType::kF32, {1, 30000}, row)});
  ExpectNear(Values(r), RefSoftmax(Rounded(DType::kF32, row), 1, 30000, 1, true), 1e-5, 1e-4,
             "long row");
}

TEST(SoftmaxTest, FastExpMatchesStdExp) {
  for (double v = -87; v < 88; v += 0.0137) {
    float f = static_cast<float>(v);
    ASSERT_NEAR(red::FastExp(f), std::exp(f), 3e-7 * std::exp(f)) << f;
  }
  EXPECT_EQ(red::FastExp(-1000.0f), 0.0f);
  EXPECT_EQ(red::FastExp(1000.0f), INFINITY);
  EXPECT_EQ(red::FastExp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(red::FastExp(NAN)));
}

}  // namespace
}  // namespace mixtrain
