// Float elementwise kernels against straightforward double-precision reference math, in fp32,
// fp16 and bf16, with broadcasting shapes (trailing/leading/scalar/both-sided) and sizes large
// enough to go through ParallelFor and the fp16/bf16 conversion blocks.
#include <cmath>

#include "gtest/gtest.h"
#include "tests/kernels/elementwise_test_util.h"

namespace mixtrain {
namespace {

using ew_test::ExpectNear;
using ew_test::Make;
using ew_test::RefMap;
using ew_test::RunOp;
using ew_test::Uniform;
using ew_test::Values;

const DType kFloats[] = {DType::kF32, DType::kF16, DType::kBF16};

struct UnaryCase {
  std::string op;
  std::vector<Attribute> attrs;
  double (*ref)(double);
  double lo, hi;
};

double Gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double GeluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> UnaryCases() {
  return {
      {"Sqrt", {}, [](double x) { return std::sqrt(x); }, 0, 10},
      {"Reciprocal", {}, [](double x) { return 1 / x; }, 0.25, 4},
      {"Neg", {}, [](double x) { return -x; }, -5, 5},
      {"Abs", {}, [](double x) { return std::fabs(x); }, -5, 5},
      {"Exp", {}, [](double x) { return std::exp(x); }, -10, 10},
      {"Log", {}, [](double x) { return std::log(x); }, 0.01, 100},
      {"Erf", {}, [](double x) { return std::erf(x); }, -3, 3},
      {"Relu", {}, [](double x) { return x > 0 ? x : 0; }, -5, 5},
      {"LeakyRelu", {Attribute::Float("alpha", 0.2f)},
       [](double x) { return x > 0 ? x : 0.2 * x; }, -5, 5},
      {"LeakyRelu", {}, [](double x) { return x > 0 ? x : 0.01 * x; }, -5, 5},
      {"Sigmoid", {}, [](double x) { return 1 / (1 + std::exp(-x)); }, -20, 20},
      {"Tanh", {}, [](double x) { return std::tanh(x); }, -8, 8},
      {"Softplus", {}, [](double x) { return std::log1p(std::exp(x)); }, -30, 30},
      {"Gelu", {}, Gelu, -6, 6},
      {"Gelu", {Attribute::String("approximate", "none")}, Gelu, -6, 6},
      {"Gelu", {Attribute::String("approximate", "tanh")}, GeluTanh, -6, 6},
  };
}

TEST(ElementwiseTest, UnaryFloatOps) {
  for (const UnaryCase& c : UnaryCases()) {
    for (DType t : kFloats) {
      // A small odd shape and one past the parallel grain and many conversion blocks.
      for (std::vector<int64_t> dims : {std::vector<int64_t>{2, 3, 5}, {70001}}) {
        Tensor x = Make(t, dims, Uniform(ew_test::Count(dims), c.lo, c.hi, 7));
        int64_t opset = c.op == "Gelu" ? 20 : 17;
        Tensor y = RunOp(c.op, {x}, c.attrs, opset);
        ASSERT_EQ(y.dtype(), t);
        ASSERT_EQ(y.dims(), dims);
        std::vector<double> want = RefMap({x}, [&](const std::vector<double>& a) {
          return c.ref(a[0]);
        });
        ExpectNear(Values(y), want, t, c.op + " " + DTypeName(t));
        if (HasFailure()) return;
      }
    }
  }
}

TEST(ElementwiseTest, UnaryEdgeValues) {
  Tensor x = Make(DType::kF32, {5}, {-INFINITY, -100, 0, 100, NAN});
  std::vector<double> s = Values(RunOp("Sigmoid", {x}));
  EXPECT_EQ(s[0], 0);
  EXPECT_EQ(s[2], 0.5);
  EXPECT_EQ(s[3], 1);
  EXPECT_TRUE(std::isnan(s[4]));
  std::vector<double> sp = Values(RunOp("Softplus", {x}));
  EXPECT_EQ(sp[3], 100);  // no overflow for large inputs
  EXPECT_EQ(sp[1], static_cast<float>(std::exp(-100.0)));
  std::vector<double> r = Values(RunOp("Relu", {x}));
  EXPECT_TRUE(std::isnan(r[4])) << "Relu keeps NaN";
  EXPECT_EQ(Values(RunOp("Log", {Make(DType::kF32, {1}, {0})}))[0], -INFINITY);
}

TEST(ElementwiseTest, GeluRejectsUnknownApproximation) {
  Tensor x = Make(DType::kF32, {2}, {1, 2});
  absl::Status st = ew_test::RunStatus("Gelu", {x}, {Attribute::String("approximate", "fast")}, 20);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("approximate"), std::string::npos) << st;
}

using Shapes = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
const std::vector<Shapes> kBroadcastShapes = {
    {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {3, 1}}, {{2, 3, 4}, {1}},     {{2, 3, 4}, {}},
    {{}, {2, 3, 4}},        {{3, 1}, {2, 1, 4}}, {{4}, {2, 3, 4}},     {{}, {}},
    {{2, 1, 4}, {1, 3, 1}}, {{300, 257}, {300, 1}}, {{1, 257}, {300, 1}}, {{4, 0}, {1}},
};

struct BinaryCase {
  std::string op;
  double (*ref)(double, double);
  double alo, ahi, blo, bhi;
};

TEST(ElementwiseTest, BinaryFloatOpsBroadcast) {
  const std::vector<BinaryCase> cases = {
      {"Add", [](double a, double b) { return a + b; }, -5, 5, -5, 5},
      {"Sub", [](double a, double b) { return a - b; }, -5, 5, -5, 5},
      {"Mul", [](double a, double b) { return a * b; }, -5, 5, -5, 5},
      {"Div", [](double a, double b) { return a / b; }, -5, 5, 0.5, 3},
      {"Pow", [](double a, double b) { return std::pow(a, b); }, 0.1, 3, -2, 2},
      {"Max", [](double a, double b) { return std::max(a, b); }, -5, 5, -5, 5},
      {"Min", [](double a, double b) { return std::min(a, b); }, -5, 5, -5, 5},
  };
  for (const BinaryCase& c : cases) {
    for (DType t : kFloats) {
      for (const auto& [da, db] : kBroadcastShapes) {
        Tensor a = Make(t, da, Uniform(ew_test::Count(da), c.alo, c.ahi, 1));
        Tensor b = Make(t, db, Uniform(ew_test::Count(db), c.blo, c.bhi, 2));
        Tensor y = RunOp(c.op, {a, b});
        ASSERT_EQ(y.dtype(), t);
        ASSERT_EQ(y.dims(), ew_test::RefBroadcast({da, db}));
        std::vector<double> want =
            RefMap({a, b}, [&](const std::vector<double>& v) { return c.ref(v[0], v[1]); });
        ExpectNear(Values(y), want, t, c.op + " " + DTypeName(t));
        if (HasFailure()) return;
      }
    }
  }
}

TEST(ElementwiseTest, FloatComparisonsGiveBool) {
  const std::vector<std::pair<std::string, bool (*)(double, double)>> cases = {
      {"Equal", [](double a, double b) { return a == b; }},
      {"Less", [](double a, double b) { return a < b; }},
      {"LessOrEqual", [](double a, double b) { return a <= b; }},
      {"Greater", [](double a, double b) { return a > b; }},
      {"GreaterOrEqual", [](double a, double b) { return a >= b; }},
  };
  for (const auto& [op, ref] : cases) {
    for (DType t : kFloats) {
      for (const auto& [da, db] : kBroadcastShapes) {
        // Small integers, so that equal values (ties) occur often.
        auto ints = [](int64_t n, uint32_t seed) {
          std::vector<double> v = Uniform(n, -3, 3, seed);
          for (double& x : v) x = std::round(x);
          return v;
        };
        Tensor a = Make(t, da, ints(ew_test::Count(da), 3));
        Tensor b = Make(t, db, ints(ew_test::Count(db), 4));
        Tensor y = RunOp(op, {a, b});
        ASSERT_EQ(y.dtype(), DType::kBool) << op;
        std::vector<double> want =
            RefMap({a, b}, [&ref = ref](const std::vector<double>& v) { return ref(v[0], v[1]) ? 1. : 0.; });
        ASSERT_EQ(Values(y), want) << op << " " << DTypeName(t);
      }
    }
  }
}

TEST(ElementwiseTest, PowSpecialForms) {
  for (DType t : kFloats) {
    Tensor x = Make(t, {3, 700}, Uniform(2100, -4, 4, 5));
    Tensor two = Make(t, {}, {2});
    Tensor y = RunOp("Pow", {x, two});  // the x*x fast path
    ExpectNear(Values(y), RefMap({x}, [](const std::vector<double>& v) { return v[0] * v[0]; }),
               t, "Pow x^2");
    Tensor three = Make(t, {}, {3});
    Tensor y3 = RunOp("Pow", {x, three});  // the x*x*x fast path (tanh-GELU's)
    ExpectNear(Values(y3), RefMap({x}, [](const std::vector<double>& v) { return v[0] * v[0] * v[0]; }),
               t, "Pow x^3");
  }
  // Exponent of another dtype: fp32 base, int64 exponent, broadcast.
  Tensor base = Make(DType::kF32, {2, 3}, {1, 2, 3, -2, 0.5, 4});
  Tensor e = Make(DType::kI64, {3}, {2, 3, -1});
  Tensor y = RunOp("Pow", {base, e});
  ASSERT_EQ(y.dtype(), DType::kF32);
  ExpectNear(Values(y), {1, 8, 1.0 / 3, 4, 0.125, 0.25}, DType::kF32, "Pow f32^i64");
  // Integer powers, and an int base with a float exponent (numpy: float64 math, then truncation).
  Tensor ib = Make(DType::kI64, {4}, {2, -3, 5, 7});
  Tensor ie = Make(DType::kI64, {4}, {10, 3, 0, 2});
  EXPECT_EQ(Values(RunOp("Pow", {ib, ie})), (std::vector<double>{1024, -27, 1, 49}));
  Tensor i32 = Make(DType::kI32, {3}, {2, 9, 10});
  Tensor f = Make(DType::kF32, {3}, {0.5, 0.5, 2});
  Tensor yi = RunOp("Pow", {i32, f});
  ASSERT_EQ(yi.dtype(), DType::kI32);
  EXPECT_EQ(Values(yi), (std::vector<double>{1, 3, 100}));
}

TEST(ElementwiseTest, MaxMinVariadic) {
  for (DType t : kFloats) {
    Tensor a = Make(t, {2, 3, 1}, Uniform(6, -5, 5, 11));
    Tensor b = Make(t, {3, 4}, Uniform(12, -5, 5, 12));
    Tensor c = Make(t, {1}, {0.5});
    Tensor mx = RunOp("Max", {a, b, c});
    Tensor mn = RunOp("Min", {a, b, c});
    ASSERT_EQ(mx.dims(), (std::vector<int64_t>{2, 3, 4}));
    ExpectNear(Values(mx), RefMap({a, b, c}, [](const std::vector<double>& v) {
                 return std::max({v[0], v[1], v[2]});
               }), t, "Max3");
    ExpectNear(Values(mn), RefMap({a, b, c}, [](const std::vector<double>& v) {
                 return std::min({v[0], v[1], v[2]});
               }), t, "Min3");
    // One input: a copy.
    ExpectNear(Values(RunOp("Max", {b})), Values(b), t, "Max1");
  }
  // NaN from either side propagates (numpy.maximum).
  Tensor n1 = Make(DType::kF32, {3}, {NAN, 1, 2});
  Tensor n2 = Make(DType::kF32, {3}, {1, NAN, 0});
  std::vector<double> m = Values(RunOp("Max", {n1, n2}));
  EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[1]));
  EXPECT_EQ(m[2], 2);
  std::vector<double> mi = Values(RunOp("Min", {n1, n2}));
  EXPECT_TRUE(std::isnan(mi[0]) && std::isnan(mi[1]));
  EXPECT_EQ(mi[2], 0);
}

TEST(ElementwiseTest, ClipBothOpsetForms) {
  for (DType t : kFloats) {
    Tensor x = Make(t, {2, 50}, Uniform(100, -3, 3, 21));
    auto clip = [](double lo, double hi) {
      return [lo, hi](const std::vector<double>& v) { return std::min(std::max(v[0], lo), hi); };
    };
    // opset 6: attributes.
    Tensor y6 = RunOp("Clip", {x}, {Attribute::Float("min", -1), Attribute::Float("max", 0.5f)}, 6);
    ExpectNear(Values(y6), RefMap({x}, clip(-1, 0.5)), t, "Clip attrs");
    Tensor y6min = RunOp("Clip", {x}, {Attribute::Float("min", 0)}, 6);
    ExpectNear(Values(y6min), RefMap({x}, clip(0, INFINITY)), t, "Clip attr min");
    // opset 11+: optional inputs (min only, max only, both, none).
    Tensor lo = Make(t, {}, {-1}), hi = Make(t, {}, {0.5});
    ExpectNear(Values(RunOp("Clip", {x, lo, hi}, {}, 13)), RefMap({x}, clip(-1, 0.5)), t, "Clip");
    ExpectNear(Values(RunOp("Clip", {x, lo}, {}, 13)), RefMap({x}, clip(-1, INFINITY)), t, "min");
    ExpectNear(Values(RunOp("Clip", {x, Tensor(), hi}, {}, 13)), RefMap({x}, clip(-INFINITY, 0.5)),
               t, "Clip max only");
    ExpectNear(Values(RunOp("Clip", {x}, {}, 13)), Values(x), t, "Clip no bounds");
  }
  Tensor xi = Make(DType::kI64, {5}, {-10, -1, 0, 3, 100});
  Tensor y = RunOp("Clip", {xi, Make(DType::kI64, {}, {-2}), Make(DType::kI64, {}, {5})}, {}, 13);
  EXPECT_EQ(Values(y), (std::vector<double>{-2, -1, 0, 3, 5}));
  Tensor xi8 = Make(DType::kI8, {3}, {-100, 0, 100});
  EXPECT_EQ(Values(RunOp("Clip", {xi8, Tensor(), Make(DType::kI8, {}, {50})}, {}, 13)),
            (std::vector<double>{-100, 0, 50}));
}

TEST(ElementwiseTest, WhereBroadcastsAllThree) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32}) {
    Tensor c = Make(DType::kBool, {2, 1, 4}, {1, 0, 0, 1, 0, 1, 1, 0});
    Tensor x = Make(t, {3, 1}, {1, 2, 3});
    Tensor y = Make(t, {}, {-7});
    Tensor o = RunOp("Where", {c, x, y});
    ASSERT_EQ(o.dtype(), t);
    ASSERT_EQ(o.dims(), (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(Values(o),
              RefMap({c, x, y}, [](const std::vector<double>& v) { return v[0] ? v[1] : v[2]; }));
  }
  Tensor c = Make(DType::kBool, {4}, {1, 0, 1, 0});
  Tensor x = Make(DType::kF32, {4}, {1, 2, 3, 4});
  Tensor y = Make(DType::kF32, {4}, {5, 6, 7, 8});
  EXPECT_EQ(Values(RunOp("Where", {c, x, y})), (std::vector<double>{1, 6, 3, 8}));
}

}  // namespace
}  // namespace mixtrain
