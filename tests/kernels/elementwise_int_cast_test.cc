// Elementwise kernels on integer and bool tensors (ONNX shape arithmetic, masks), Cast/CastLike
// between every dtype pair with ONNX's conversion rules, and the shape-inference errors a user
// sees for bad elementwise nodes.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "tests/kernels/elementwise_test_util.h"

namespace mixtrain {
namespace {

using ew_test::Make;
using ew_test::RefMap;
using ew_test::RunOp;
using ew_test::RunStatus;
using ew_test::Values;

TEST(ElementwiseIntTest, ArithmeticTruncatesAndBroadcasts) {
  for (DType t : {DType::kI64, DType::kI32, DType::kI8}) {
    Tensor a = Make(t, {2, 3}, {-7, 7, 9, -9, 100, 0});
    Tensor b = Make(t, {3}, {2, -2, 4});
    EXPECT_EQ(Values(RunOp("Add", {a, b})), (std::vector<double>{-5, 5, 13, -7, 98, 4}));
    EXPECT_EQ(Values(RunOp("Sub", {a, b})), (std::vector<double>{-9, 9, 5, -11, 102, -4}));
    EXPECT_EQ(Values(RunOp("Mul", {a, b})), (std::vector<double>{-14, -14, 36, -18, -200. + 256 * (t == DType::kI8), 0}));
    // Integer division truncates toward zero, like C++ and ONNX's reference.
    EXPECT_EQ(Values(RunOp("Div", {a, b})), (std::vector<double>{-3, -3, 2, -4, -50, 0}));
    EXPECT_EQ(Values(RunOp("Max", {a, b})), (std::vector<double>{2, 7, 9, 2, 100, 4}));
    EXPECT_EQ(Values(RunOp("Min", {a, b})), (std::vector<double>{-7, -2, 4, -9, -2, 0}));
    EXPECT_EQ(Values(RunOp("Neg", {b})), (std::vector<double>{-2, 2, -4}));
    EXPECT_EQ(Values(RunOp("Abs", {a})), (std::vector<double>{7, 7, 9, 9, 100, 0}));
    EXPECT_EQ(Values(RunOp("Relu", {a})), (std::vector<double>{0, 7, 9, 0, 100, 0}));
  }
  Tensor u = Make(DType::kU8, {3}, {200, 10, 7});
  Tensor v = Make(DType::kU8, {3}, {100, 20, 2});
  EXPECT_EQ(Values(RunOp("Add", {u, v})), (std::vector<double>{44, 30, 9}));  // wraps mod 256
  EXPECT_EQ(Values(RunOp("Div", {u, v})), (std::vector<double>{2, 0, 3}));
}

TEST(ElementwiseIntTest, DivisionByZeroDoesNotTrap) {
  Tensor a = Make(DType::kI64, {3}, {5, std::numeric_limits<int64_t>::min(), 0});
  Tensor b = Make(DType::kI64, {3}, {0, -1, 0});
  std::vector<int64_t> got = RunOp("Div", {a, b}).ToInt64Vector();
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], std::numeric_limits<int64_t>::min());  // wraps, as two's complement
  EXPECT_EQ(got[2], 0);
}

TEST(ElementwiseIntTest, ShapeArithmeticOnLargeInt64) {
  // Large values must not go through float: 2^53 + 1 survives Add/Mul.
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor a = Make(DType::kI64, {1}, {0});
  a.data_as<int64_t>()[0] = big;
  Tensor one = Make(DType::kI64, {}, {1});
  EXPECT_EQ(RunOp("Add", {a, one}).ToInt64Vector()[0], big + 1);
  EXPECT_EQ(RunOp("Mul", {a, one}).ToInt64Vector()[0], big);
  EXPECT_EQ(Values(RunOp("Equal", {a, a}))[0], 1);
}

TEST(ElementwiseIntTest, ComparisonsOnIntsAndBools) {
  Tensor a = Make(DType::kI64, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Make(DType::kI64, {2, 1}, {2, 5});
  auto ref = [&](bool (*f)(double, double)) {
    return RefMap({a, b}, [f](const std::vector<double>& v) { return f(v[0], v[1]) ? 1. : 0.; });
  };
  EXPECT_EQ(Values(RunOp("Equal", {a, b})), ref([](double x, double y) { return x == y; }));
  EXPECT_EQ(Values(RunOp("Less", {a, b})), ref([](double x, double y) { return x < y; }));
  EXPECT_EQ(Values(RunOp("Greater", {a, b})), ref([](double x, double y) { return x > y; }));
  EXPECT_EQ(Values(RunOp("LessOrEqual", {a, b})), ref([](double x, double y) { return x <= y; }));
  EXPECT_EQ(Values(RunOp("GreaterOrEqual", {a, b})),
            ref([](double x, double y) { return x >= y; }));
  Tensor p = Make(DType::kBool, {4}, {0, 0, 1, 1});
  Tensor q = Make(DType::kBool, {4}, {0, 1, 0, 1});
  EXPECT_EQ(Values(RunOp("Equal", {p, q})), (std::vector<double>{1, 0, 0, 1}));
}

TEST(ElementwiseIntTest, LogicOps) {
  Tensor a = Make(DType::kBool, {2, 2}, {0, 1, 0, 1});
  Tensor b = Make(DType::kBool, {2, 1}, {0, 1});
  Tensor r = RunOp("And", {a, b});
  ASSERT_EQ(r.dtype(), DType::kBool);
  EXPECT_EQ(Values(r), (std::vector<double>{0, 0, 0, 1}));
  EXPECT_EQ(Values(RunOp("Or", {a, b})), (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(Values(RunOp("Xor", {a, b})), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(Values(RunOp("Not", {a})), (std::vector<double>{1, 0, 1, 0}));
  Tensor big = Make(DType::kBool, {50000}, std::vector<double>(50000, 1));
  Tensor nb = RunOp("Not", {big});
  EXPECT_EQ(Values(nb), std::vector<double>(50000, 0));
}

// --- Cast ----------------------------------------------------------------------------------------

Tensor CastTo(const Tensor& x, DType to, int64_t opset = 13) {
  std::vector<Attribute> attrs = {Attribute::Int("to", ToOnnxType(to))};
  if (opset >= 19) attrs.push_back(Attribute::Int("saturate", 1));
  Tensor y = RunOp("Cast", {x}, attrs, opset);
  EXPECT_EQ(y.dtype(), to);
  return y;
}

TEST(ElementwiseCastTest, FloatToIntTruncatesTowardZero) {
  for (DType from : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    Tensor x = Make(from, {6}, {-2.75, -0.5, 0, 0.5, 2.75, 100.5});
    for (DType to : {DType::kI32, DType::kI64, DType::kI8}) {
      EXPECT_EQ(Values(CastTo(x, to)), (std::vector<double>{-2, 0, 0, 0, 2, 100}))
          << DTypeName(from) << "->" << DTypeName(to);
    }
    EXPECT_EQ(Values(CastTo(Make(from, {2}, {3.9, 200.5}), DType::kU8)),
              (std::vector<double>{3, 200}));
  }
}

TEST(ElementwiseCastTest, BoolRules) {
  Tensor x = Make(DType::kF32, {5}, {0, -0.0, 1.5, -3, 0});
  x.data_as<float>()[4] = NAN;
  EXPECT_EQ(Values(CastTo(x, DType::kBool)), (std::vector<double>{0, 0, 1, 1, 1}));
  Tensor b = Make(DType::kBool, {2}, {1, 0});
  for (DType to : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI8, DType::kI32,
                   DType::kI64, DType::kU8, DType::kBool})
    EXPECT_EQ(Values(CastTo(b, to)), (std::vector<double>{1, 0})) << DTypeName(to);
  EXPECT_EQ(Values(CastTo(Make(DType::kI64, {3}, {0, 7, -1}), DType::kBool)),
            (std::vector<double>{0, 1, 1}));
}

TEST(ElementwiseCastTest, FloatNarrowingRoundsToNearestEvenOnce) {
  // fp32 -> fp16/bf16 matches half.h bit for bit, over a range with subnormals and overflow.
  std::vector<double> v = ew_test::Uniform(4000, -70000, 70000, 9);
  for (double& x : v) x = x * std::pow(2.0, static_cast<int>(std::fabs(x)) % 40 - 30);
  Tensor x = Make(DType::kF32, {4000}, v);
  Tensor h = CastTo(x, DType::kF16, 19), bf = CastTo(x, DType::kBF16);
  for (int i = 0; i < 4000; ++i) {
    ASSERT_EQ(h.data_as<uint16_t>()[i], FloatToHalf(x.data_as<float>()[i])) << i;
    ASSERT_EQ(bf.data_as<uint16_t>()[i], FloatToBFloat16(x.data_as<float>()[i])) << i;
  }
  // double -> fp16: 1 + 2^-11 + 2^-40 is just above the tie between 1 and 1 + 2^-10, so it rounds
  // up; going through fp32 first would make it an exact tie and round down to 1.
  Tensor d = Make(DType::kF64, {2}, {1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                     -(1 + std::ldexp(1.0, -11) - std::ldexp(1.0, -40))});
  Tensor dh = CastTo(d, DType::kF16);
  EXPECT_EQ(dh.data_as<uint16_t>()[0], 0x3c01);
  EXPECT_EQ(dh.data_as<uint16_t>()[1], 0xbc00);
  Tensor db = CastTo(Make(DType::kF64, {1}, {1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)}),
                     DType::kBF16);
  EXPECT_EQ(db.data_as<uint16_t>()[0], 0x3f81);
  // Large ints overflow fp16 to inf; fp16 <-> bf16 goes through exact fp32.
  std::vector<double> big = Values(CastTo(Make(DType::kI64, {2}, {70000, -3}), DType::kF16));
  EXPECT_EQ(big[0], INFINITY);
  EXPECT_EQ(big[1], -3);
  Tensor hb = CastTo(Make(DType::kF16, {3}, {1.5, -65504, 0.1}), DType::kBF16);
  EXPECT_EQ(Values(hb), (std::vector<double>{1.5, -65536, BFloat16ToFloat(FloatToBFloat16(
                                                               HalfToFloat(FloatToHalf(0.1f))))}));
}

TEST(ElementwiseCastTest, EveryPairRoundTripsSmallIntegers) {
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI8,
                       DType::kI32, DType::kI64, DType::kU8};
  std::vector<double> v = {0, 1, 2, 5, 17, 100, 3, 64};
  for (DType from : all) {
    for (DType to : all) {
      Tensor y = CastTo(Make(from, {2, 4}, v), to);
      EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 4}));
      EXPECT_EQ(Values(y), v) << DTypeName(from) << "->" << DTypeName(to);
    }
  }
}

TEST(ElementwiseCastTest, CastLikeTakesTheSecondInputsDtype) {
  Tensor x = Make(DType::kF32, {3}, {1.7, -2.2, 3});
  Tensor like = Make(DType::kI32, {1}, {0});
  Tensor y = RunOp("CastLike", {x, like}, {}, 15);
  ASSERT_EQ(y.dtype(), DType::kI32);
  EXPECT_EQ(Values(y), (std::vector<double>{1, -2, 3}));
}

// --- shape-inference errors --------------------------------------------------------------------

TEST(ElementwiseShapeTest, ErrorsNameTheNode) {
  Tensor a = Make(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Make(DType::kF32, {4}, {1, 2, 3, 4});
  absl::Status st = RunStatus("Add", {a, b});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'node' (Add)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("broadcast"), std::string::npos) << st;

  st = RunStatus("Mul", {a, Make(DType::kI64, {3}, {1, 2, 3})});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dtype"), std::string::npos) << st;

  st = RunStatus("Cast", {a});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'to'"), std::string::npos) << st;

  st = RunStatus("Where", {a, a, a});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("bool"), std::string::npos) << st;

  st = RunStatus("Clip", {a, Make(DType::kF32, {2}, {0, 1})}, {}, 13);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("scalar"), std::string::npos) << st;
}

TEST(ElementwiseShapeTest, SymbolicBroadcast) {
  Graph g;
  Value* x = g.AddValue("x", DType::kF16, Shape({Dim::Symbol("N"), Dim(1), Dim(8)}));
  Value* y = g.AddValue("y", DType::kF16, Shape({Dim(4), Dim(1)}));
  g.AddInput(x);
  g.AddInput(y);
  Node* add = g.AddNode("Add", {x, y}, 1, "add");
  Node* less = g.AddNode("Less", {x, y}, 1, "less");
  ASSERT_TRUE(InferShapes(g).ok());
  EXPECT_EQ(add->output(0)->dtype, DType::kF16);
  EXPECT_EQ(add->output(0)->shape.ToString(), "[N,4,8]");
  EXPECT_EQ(less->output(0)->dtype, DType::kBool);
}

}  // namespace
}  // namespace mixtrain
