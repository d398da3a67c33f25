// Tests of the less common ops (shape rules in graph/ops/onnx_coverage_ops.cc,
// index_layout_ops.cc and einsum.cc; kernels in kernels/cpu/: elementwise_unary_math.cc,
// elementwise_binary_math.cc, reduce_double.cc, axis_norm.cc, movement_rearrange.cc,
// gather_scatter.cc, resize.cc, quantize.cc, signal.cc, rnn.cc, grid_sample.cc, einsum.cc): each
// runs its shape rule and CPU kernel on small inputs whose expected outputs are worked out by
// hand or with <cmath> here, covering the attribute forms and the branches (sign conventions,
// ties, negative indices, opset-dependent defaults, low-precision dtypes).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/reduce_test_util.h"

namespace mixtrain {
namespace {

using red_test::Make;
using red_test::Values;
using testing_util::MakeNode;
using testing_util::RunCpuKernel;

const double kInf = std::numeric_limits<double>::infinity();

// Runs `op` on `inputs` and returns its outputs (failing the test on an error).
std::vector<Tensor> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                        std::vector<Attribute> attrs = {}, int num_outputs = 1,
                        int64_t opset = 17) {
  auto n = MakeNode(op, inputs, num_outputs, std::move(attrs));
  auto out = RunCpuKernel(*n.node, inputs, opset);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  return out.ok() ? *out : std::vector<Tensor>(num_outputs);
}

void ExpectValues(const Tensor& t, const std::vector<double>& want, double tol = 1e-6) {
  std::vector<double> got = Values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
  }
}

TEST(ElementwiseUnaryMath, MathMatchesCmath) {
  const std::vector<double> x = {-0.9, -0.25, 0.0, 0.3, 0.8};
  struct Case {
    const char* op;
    double (*f)(double);
  } cases[] = {{"Sin", std::sin},   {"Cos", std::cos},     {"Tan", std::tan},
               {"Asin", std::asin}, {"Acos", std::acos},   {"Atan", std::atan},
               {"Sinh", std::sinh}, {"Cosh", std::cosh},   {"Asinh", std::asinh},
               {"Atanh", std::atanh}, {"Floor", std::floor}, {"Ceil", std::ceil}};
  for (const Case& c : cases) {
    std::vector<double> want;
    for (double v : x) want.push_back(c.f(v));
    SCOPED_TRACE(c.op);
    ExpectValues(RunOp(c.op, {Make(DType::kF32, {5}, x)})[0], want);
    ExpectValues(RunOp(c.op, {Make(DType::kF64, {5}, x)})[0], want, 1e-12);
  }
  ExpectValues(RunOp("Acosh", {Make(DType::kF32, {2}, {1.0, 2.5})})[0],
               {0.0, std::acosh(2.5)});
}

TEST(ElementwiseUnaryMath, RoundHalvesToEvenAndSign) {
  ExpectValues(RunOp("Round", {Make(DType::kF32, {6}, {0.5, 1.5, 2.5, -0.5, -1.5, 2.4})})[0],
               {0, 2, 2, -0.0, -2, 2});
  ExpectValues(RunOp("Sign", {Make(DType::kF32, {3}, {-2.5, 0, 7})})[0], {-1, 0, 1});
  ExpectValues(RunOp("Sign", {Make(DType::kI64, {3}, {-9, 0, 4})})[0], {-1, 0, 1});
}

TEST(ElementwiseUnaryMath, ActivationsWithAttributes) {
  const std::vector<double> x = {-2.0, -0.5, 0.0, 0.5, 3.0};
  auto each = [&](auto f) {
    std::vector<double> v;
    for (double e : x) v.push_back(f(e));
    return v;
  };
  Tensor t = Make(DType::kF32, {5}, x);
  ExpectValues(RunOp("Elu", {t}, {Attribute::Float("alpha", 2.0f)})[0],
               each([](double e) { return e < 0 ? 2.0 * (std::exp(e) - 1) : e; }));
  const double a = 1.67326319217681884765625, g = 1.05070102214813232421875;
  ExpectValues(RunOp("Selu", {t})[0],
               each([&](double e) { return g * (e <= 0 ? a * (std::exp(e) - 1) : e); }));
  ExpectValues(RunOp("Celu", {t}, {Attribute::Float("alpha", 0.5f)})[0],
               each([](double e) { return e > 0 ? e : 0.5 * (std::exp(e / 0.5) - 1); }));
  ExpectValues(RunOp("HardSigmoid", {t}, {Attribute::Float("alpha", 0.5f)})[0],
               {0.0, 0.25, 0.5, 0.75, 1.0});
  ExpectValues(RunOp("HardSwish", {t})[0],
               each([](double e) { return e * std::clamp(e / 6 + 0.5, 0.0, 1.0); }));
  ExpectValues(RunOp("Softsign", {t})[0], each([](double e) { return e / (1 + std::fabs(e)); }));
  ExpectValues(RunOp("ThresholdedRelu", {t}, {Attribute::Float("alpha", 0.4f)})[0],
               {0, 0, 0, 0.5, 3.0});
  ExpectValues(RunOp("Mish", {t})[0],
               each([](double e) { return e * std::tanh(std::log1p(std::exp(e))); }));
  ExpectValues(RunOp("Shrink", {t}, {Attribute::Float("bias", 1.0f), Attribute::Float("lambd", 0.5f)})[0],
               {-1.0, 0.0, 0.0, 0.0, 2.0});
  // bf16 computes in float and rounds once on store.
  ExpectValues(RunOp("Elu", {Make(DType::kBF16, {5}, x)})[0],
               each([](double e) { return e < 0 ? std::exp(e) - 1 : e; }), 8e-3);
}

TEST(ElementwiseUnaryMath, IsNaNAndIsInfFlags) {
  Tensor t = Make(DType::kF32, {4}, {std::nan(""), kInf, -kInf, 1.0});
  ExpectValues(RunOp("IsNaN", {t})[0], {1, 0, 0, 0});
  EXPECT_EQ(RunOp("IsNaN", {t})[0].dtype(), DType::kBool);
  ExpectValues(RunOp("IsInf", {t})[0], {0, 1, 1, 0});
  ExpectValues(RunOp("IsInf", {t}, {Attribute::Int("detect_negative", 0)})[0], {0, 1, 0, 0});
  ExpectValues(RunOp("IsInf", {t}, {Attribute::Int("detect_positive", 0)})[0], {0, 0, 1, 0});
}

TEST(ElementwiseBinaryMath, ModSignConventions) {
  Tensor a = Make(DType::kI32, {4}, {7, -7, 7, -7});
  Tensor b = Make(DType::kI32, {4}, {3, 3, -3, -3});
  ExpectValues(RunOp("Mod", {a, b})[0], {1, 2, -2, -1});                             // Python %
  ExpectValues(RunOp("Mod", {a, b}, {Attribute::Int("fmod", 1)})[0], {1, -1, 1, -1});  // C fmod
  Tensor fa = Make(DType::kF32, {2}, {5.5, -5.5});
  Tensor fb = Make(DType::kF32, {1}, {2.0});
  ExpectValues(RunOp("Mod", {fa, fb}, {Attribute::Int("fmod", 1)})[0], {1.5, -1.5});
  auto n = MakeNode("Mod", {fa, fb}, 1);
  EXPECT_FALSE(RunCpuKernel(*n.node, {fa, fb}).ok()) << "float Mod needs fmod=1";
}

TEST(ElementwiseBinaryMath, BitShiftPReluSumMean) {
  Tensor u(DType::kU8, {3});
  Tensor s(DType::kU8, {3});
  const uint8_t uv[] = {16, 4, 1}, sv[] = {1, 2, 3};
  for (int i = 0; i < 3; ++i) {
    u.data_as<uint8_t>()[i] = uv[i];
    s.data_as<uint8_t>()[i] = sv[i];
  }
  ExpectValues(RunOp("BitShift", {u, s}, {Attribute::String("direction", "LEFT")})[0], {32, 16, 8});
  ExpectValues(RunOp("BitShift", {u, s}, {Attribute::String("direction", "RIGHT")})[0], {8, 1, 0});

  // PRelu: a per-channel slope [C, 1, 1] broadcast to [N, C, H, W].
  Tensor px = Make(DType::kF32, {1, 2, 1, 2}, {-1, 2, -3, 4});
  Tensor slope = Make(DType::kF32, {2, 1, 1}, {0.1, 0.5});
  ExpectValues(RunOp("PRelu", {px, slope})[0], {-0.1, 2, -1.5, 4});

  // Before opset 7 a 1-D slope of C elements is per channel (dim 1), not trailing-aligned.
  Tensor px3 = Make(DType::kF32, {1, 2, 3}, {-1, -2, 3, -4, 5, -6});
  Tensor slope2 = Make(DType::kF32, {2}, {0.5, 2});
  ExpectValues(RunOp("PRelu", {px3, slope2}, {}, 1, 6)[0], {-0.5, -1, 3, -8, 5, -12});

  Tensor a = Make(DType::kF32, {2, 2}, {1, 2, 3, 4});
  Tensor b = Make(DType::kF32, {2}, {10, 20});
  Tensor c = Make(DType::kF32, {2, 1}, {100, 200});
  ExpectValues(RunOp("Sum", {a, b, c})[0], {111, 122, 213, 224});
  ExpectValues(RunOp("Mean", {a, b, c})[0], {37, 122.0 / 3, 71, 224.0 / 3});
  ExpectValues(RunOp("Sum", {a})[0], {1, 2, 3, 4});
}

TEST(ReduceDouble, EveryKindOverAxes) {
  // [2, 3], reduced over axis 1 (attribute form) and over everything.
  Tensor x = Make(DType::kF32, {2, 3}, {1, -2, 3, 0.5, 4, -1});
  std::vector<Attribute> ax1 = {Attribute::Ints("axes", {1}), Attribute::Int("keepdims", 0)};
  ExpectValues(RunOp("ReduceMin", {x}, ax1)[0], {-2, -1});
  ExpectValues(RunOp("ReduceProd", {x}, ax1)[0], {-6, -2});
  ExpectValues(RunOp("ReduceL1", {x}, ax1)[0], {6, 5.5});
  ExpectValues(RunOp("ReduceL2", {x}, ax1)[0], {std::sqrt(14.0), std::sqrt(17.25)});
  Tensor pos = Make(DType::kF32, {2, 2}, {1, 2, 3, 4});
  ExpectValues(RunOp("ReduceLogSum", {pos})[0], {std::log(10.0)});
  EXPECT_EQ(RunOp("ReduceLogSum", {pos})[0].dims(), (std::vector<int64_t>{1, 1}));
  // LogSumExp stays finite where exp alone would overflow.
  Tensor big = Make(DType::kF32, {2}, {1000, 1000});
  ExpectValues(RunOp("ReduceLogSumExp", {big}, {Attribute::Int("keepdims", 0)})[0],
               {1000 + std::log(2.0)});
  // Axes as input 1 (opset 18) and fp16 storage.
  Tensor h = Make(DType::kF16, {2, 3}, {1, -2, 3, 0.5, 4, -1});
  ExpectValues(RunOp("ReduceMin", {h, Make(DType::kI64, {1}, {0})}, {}, 1, 18)[0], {0.5, -2, -1});
}

TEST(ReduceDouble, ArgMinTiesAndNaN) {
  Tensor x = Make(DType::kF32, {2, 4}, {3, 1, 1, 2, 5, std::nan(""), 0, std::nan("")});
  std::vector<Attribute> a = {Attribute::Int("axis", 1), Attribute::Int("keepdims", 0)};
  ExpectValues(RunOp("ArgMin", {x}, a)[0], {1, 1});
  a.push_back(Attribute::Int("select_last_index", 1));
  ExpectValues(RunOp("ArgMin", {x}, a)[0], {2, 1});
  Tensor y = RunOp("ArgMin", {x})[0];
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 4}));
  ExpectValues(y, {0, 1, 1, 1});  // NaN counts as the minimum
}

TEST(AxisNorm, HardmaxOpsetDefaults) {
  Tensor x = Make(DType::kF32, {1, 2, 2}, {1, 3, 4, 2});
  // opset 13: along the last axis.
  ExpectValues(RunOp("Hardmax", {x}, {}, 1, 13)[0], {0, 1, 1, 0});
  // opset 11: axis 1 and the input coerced to [1, 4]: one 1 at the overall maximum.
  ExpectValues(RunOp("Hardmax", {x}, {}, 1, 11)[0], {0, 0, 1, 0});
  // Ties go to the first maximum.
  ExpectValues(RunOp("Hardmax", {Make(DType::kF32, {3}, {2, 2, 1})})[0], {1, 0, 0});
}

TEST(AxisNorm, LpInstanceLrn) {
  Tensor x = Make(DType::kF32, {2, 2}, {3, 4, -1, 1});
  ExpectValues(RunOp("LpNormalization", {x})[0], {0.6, 0.8, -1 / std::sqrt(2.0), 1 / std::sqrt(2.0)});
  ExpectValues(RunOp("LpNormalization", {x}, {Attribute::Int("p", 1), Attribute::Int("axis", 0)})[0],
               {0.75, 0.8, -0.25, 0.2});

  // [N=1, C=2, 2]: channel 0 = {1, 3} (mean 2, var 1), channel 1 = {5, 5} (var 0).
  Tensor in = Make(DType::kF32, {1, 2, 2}, {1, 3, 5, 5});
  Tensor scale = Make(DType::kF32, {2}, {2, 1});
  Tensor bias = Make(DType::kF32, {2}, {0.5, -1});
  const double k = 2 / std::sqrt(1 + 1e-5);
  ExpectValues(RunOp("InstanceNormalization", {in, scale, bias})[0], {0.5 - k, 0.5 + k, -1, -1}, 1e-5);

  // LRN, size 3 over 3 channels at one pixel.
  Tensor l = Make(DType::kF32, {1, 3, 1, 1}, {1, 2, 3});
  std::vector<double> want;
  const double sq[] = {1 + 4, 1 + 4 + 9, 4 + 9};
  for (int c = 0; c < 3; ++c) want.push_back((c + 1) / std::pow(2.0 + 0.3 / 3 * sq[c], 0.5));
  ExpectValues(RunOp("LRN", {l}, {Attribute::Int("size", 3), Attribute::Float("alpha", 0.3f),
                                Attribute::Float("beta", 0.5f), Attribute::Float("bias", 2.0f)})[0],
               want, 1e-5);
}

TEST(MovementRearrange, TriluUpperLowerWithK) {
  Tensor x = Make(DType::kI64, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  ExpectValues(RunOp("Trilu", {x})[0], {1, 2, 3, 0, 5, 6, 0, 0, 9});
  ExpectValues(RunOp("Trilu", {x, Make(DType::kI64, {}, {1})})[0], {0, 2, 3, 0, 0, 6, 0, 0, 0});
  ExpectValues(RunOp("Trilu", {x, Make(DType::kI64, {}, {-1})}, {Attribute::Int("upper", 0)})[0],
               {0, 0, 0, 4, 0, 0, 7, 8, 0});
}

TEST(MovementRearrange, DepthToSpaceModesAndInverse) {
  // [1, 4, 1, 1] with blocksize 2 -> [1, 1, 2, 2].
  Tensor x = Make(DType::kF32, {1, 4, 1, 1}, {0, 1, 2, 3});
  std::vector<Attribute> b2 = {Attribute::Int("blocksize", 2)};
  ExpectValues(RunOp("DepthToSpace", {x}, b2)[0], {0, 1, 2, 3});
  // [1, 8, 1, 1] -> [1, 2, 2, 2]: DCR interleaves channels, CRD keeps them in blocks.
  std::vector<double> v8 = {0, 1, 2, 3, 4, 5, 6, 7};
  Tensor x8 = Make(DType::kF32, {1, 8, 1, 1}, v8);
  ExpectValues(RunOp("DepthToSpace", {x8}, b2)[0], {0, 2, 4, 6, 1, 3, 5, 7});
  std::vector<Attribute> crd = {Attribute::Int("blocksize", 2), Attribute::String("mode", "CRD")};
  ExpectValues(RunOp("DepthToSpace", {x8}, crd)[0], v8);
  Tensor space = RunOp("DepthToSpace", {x8}, b2)[0];
  Tensor back = RunOp("SpaceToDepth", {space}, b2)[0];
  EXPECT_EQ(back.dims(), x8.dims());
  ExpectValues(back, v8);
}

TEST(GatherScatter, GatherAndScatterElements) {
  Tensor data = Make(DType::kF32, {2, 2}, {1, 2, 3, 4});
  Tensor idx = Make(DType::kI64, {2, 2}, {0, 0, 1, -2});
  ExpectValues(RunOp("GatherElements", {data, idx}, {Attribute::Int("axis", 1)})[0], {1, 1, 4, 3});
  ExpectValues(RunOp("GatherElements", {data, idx})[0], {1, 2, 3, 2});

  Tensor z = Make(DType::kF32, {3}, {0, 0, 0});
  Tensor si = Make(DType::kI64, {3}, {1, 1, -1});
  Tensor up = Make(DType::kF32, {3}, {5, 6, 7});
  ExpectValues(RunOp("ScatterElements", {z, si, up}, {Attribute::String("reduction", "add")})[0],
               {0, 11, 7});
  ExpectValues(RunOp("Scatter", {z, Make(DType::kI64, {1}, {2}), Make(DType::kF32, {1}, {9})})[0],
               {0, 0, 9});
  auto n = MakeNode("GatherElements", {data, Make(DType::kI64, {2, 2}, {0, 0, 0, 2})}, 1,
                    {Attribute::Int("axis", 1)});
  EXPECT_FALSE(RunCpuKernel(*n.node, {data, Make(DType::kI64, {2, 2}, {0, 0, 0, 2})}).ok())
      << "index 2 is out of range for a dim of 2";
}

TEST(GatherScatter, GatherNDAndScatterND) {
  Tensor data = Make(DType::kI32, {2, 2}, {0, 1, 2, 3});
  ExpectValues(RunOp("GatherND", {data, Make(DType::kI64, {2, 2}, {0, 0, 1, 1})})[0], {0, 3});
  Tensor rows = RunOp("GatherND", {data, Make(DType::kI64, {2, 1}, {1, 0})})[0];
  EXPECT_EQ(rows.dims(), (std::vector<int64_t>{2, 2}));
  ExpectValues(rows, {2, 3, 0, 1});
  // batch_dims = 1: row b picks element idx[b] of data[b].
  ExpectValues(RunOp("GatherND", {data, Make(DType::kI64, {2, 1}, {1, 0})},
                   {Attribute::Int("batch_dims", 1)})[0],
               {1, 2});
  Tensor d = Make(DType::kF32, {4}, {1, 2, 3, 4});
  ExpectValues(RunOp("ScatterND", {d, Make(DType::kI64, {2, 1}, {3, 0}), Make(DType::kF32, {2}, {9, 8})})[0],
               {8, 2, 3, 9});
}

TEST(GatherScatter, OneHotEyeLikeTopK) {
  Tensor idx = Make(DType::kI64, {3}, {0, -1, 5});
  Tensor depth = Make(DType::kF32, {}, {3});
  Tensor values = Make(DType::kF32, {2}, {0, 2});
  Tensor oh = RunOp("OneHot", {idx, depth, values})[0];
  EXPECT_EQ(oh.dims(), (std::vector<int64_t>{3, 3}));
  ExpectValues(oh, {2, 0, 0, 0, 0, 2, 0, 0, 0});
  Tensor oh0 = RunOp("OneHot", {idx, depth, values}, {Attribute::Int("axis", 0)})[0];
  ExpectValues(oh0, {2, 0, 0, 0, 0, 0, 0, 2, 0});

  Tensor eye = RunOp("EyeLike", {Make(DType::kI32, {2, 3}, {0, 0, 0, 0, 0, 0})},
                   {Attribute::Int("k", 1), Attribute::Int("dtype", 1)})[0];
  EXPECT_EQ(eye.dtype(), DType::kF32);
  ExpectValues(eye, {0, 1, 0, 0, 0, 1});

  Tensor x = Make(DType::kF32, {2, 4}, {1, 4, 4, 2, 0, -1, 3, 3});
  Tensor k = Make(DType::kI64, {1}, {2});
  auto out = RunOp("TopK", {x, k}, {}, 2);
  ExpectValues(out[0], {4, 4, 3, 3});
  ExpectValues(out[1], {1, 2, 2, 3});
  out = RunOp("TopK", {x, k}, {Attribute::Int("largest", 0)}, 2);
  ExpectValues(out[0], {1, 2, -1, 0});
  ExpectValues(out[1], {0, 3, 1, 0});
  // Opset 1: K is an attribute.
  out = RunOp("TopK", {x}, {Attribute::Int("k", 1), Attribute::Int("axis", 0)}, 2, 9);
  ExpectValues(out[0], {1, 4, 4, 3});
  ExpectValues(out[1], {0, 0, 0, 1});
}

// The Keys cubic kernel as a function of distance (an independent form of the tap weights).
double Keys(double t, double a) {
  t = std::fabs(t);
  if (t <= 1) return (a + 2) * t * t * t - (a + 3) * t * t + 1;
  if (t < 2) return a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a;
  return 0;
}

TEST(Resize, NearestLinearCubic) {
  // Upsample-9 (and Resize-10): nearest is input[floor(x / scale)].
  Tensor x = Make(DType::kF32, {1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor up = RunOp("Upsample", {x, Make(DType::kF32, {4}, {1, 1, 2, 2})}, {}, 1, 9)[0];
  EXPECT_EQ(up.dims(), (std::vector<int64_t>{1, 1, 4, 4}));
  ExpectValues(up, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});

  Tensor none;  // an omitted optional input
  Tensor v = Make(DType::kF32, {4}, {0, 10, 20, 30});
  // half_pixel linear, 4 -> 2: x = (i + 0.5) * 2 - 0.5 = 0.5, 2.5.
  ExpectValues(RunOp("Resize", {v, none, none, Make(DType::kI64, {1}, {2})},
                     {Attribute::String("mode", "linear")}, 1, 13)[0],
               {5, 25});
  // align_corners linear, 2 -> 3: 0, 0.5, 1 in input coordinates.
  ExpectValues(RunOp("Resize", {Make(DType::kF32, {2}, {0, 10}), none, none, Make(DType::kI64, {1}, {3})},
                     {Attribute::String("mode", "linear"),
                      Attribute::String("coordinate_transformation_mode", "align_corners")},
                     1, 13)[0],
               {0, 5, 10});
  // Nearest with scales 0.5 (half_pixel, round_prefer_floor): x = 0.5 -> 0, 2.5 -> 2.
  ExpectValues(RunOp("Resize", {v, none, Make(DType::kF32, {1}, {0.5})}, {}, 1, 13)[0], {0, 20});

  // Cubic, 4 -> 8 half_pixel: x = (i + 0.5) / 2 - 0.5; taps floor(x)-1..floor(x)+2 read the
  // clamped edge element.
  Tensor c = Make(DType::kF32, {4}, {1, 4, 2, 8});
  const double cv[] = {1, 4, 2, 8};
  std::vector<double> want;
  for (int i = 0; i < 8; ++i) {
    const double xo = (i + 0.5) / 2 - 0.5;
    double sum = 0;
    for (int k = static_cast<int>(std::floor(xo)) - 1; k <= static_cast<int>(std::floor(xo)) + 2; ++k)
      sum += Keys(xo - k, -0.75) * cv[std::clamp(k, 0, 3)];
    want.push_back(sum);
  }
  ExpectValues(RunOp("Resize", {c, none, none, Make(DType::kI64, {1}, {8})},
                     {Attribute::String("mode", "cubic")}, 1, 13)[0],
               want, 1e-5);
  // tf_crop_and_resize: coordinates outside the crop box read extrapolation_value.
  ExpectValues(RunOp("Resize", {v, Make(DType::kF32, {2}, {0.5, 1.5}), none, Make(DType::kI64, {1}, {3})},
                     {Attribute::String("mode", "linear"),
                      Attribute::String("coordinate_transformation_mode", "tf_crop_and_resize"),
                      Attribute::Float("extrapolation_value", -1)},
                     1, 13)[0],
               {15, 30, -1});
}

Tensor U8(std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  return Tensor::FromVector(DType::kU8, std::move(dims), v);
}

TEST(Quantize, QuantizeDequantizeDynamic) {
  // Per tensor: round half to even, then saturate to [0, 255].
  Tensor x = Make(DType::kF32, {5}, {0, 1, 3, -10, 1000});
  Tensor q = RunOp("QuantizeLinear", {x, Make(DType::kF32, {}, {2}), U8({}, {10})})[0];
  EXPECT_EQ(q.dtype(), DType::kU8);
  ExpectValues(q, {10, 10, 12, 5, 255});
  // Per axis 1 with int8 zero points: [1, 2] channels with scales 1 and 0.5.
  Tensor x2 = Make(DType::kF32, {1, 2, 2}, {1.5, -200, 1, 2});
  Tensor zp8(DType::kI8, {2});
  zp8.data_as<int8_t>()[0] = 0;
  zp8.data_as<int8_t>()[1] = -1;
  ExpectValues(RunOp("QuantizeLinear", {x2, Make(DType::kF32, {2}, {1, 0.5}), zp8})[0], {2, -128, 1, 3});
  ExpectValues(RunOp("DequantizeLinear", {U8({4}, {0, 3, 128, 255}), Make(DType::kF32, {}, {0.5}),
                                          U8({}, {128})})[0],
               {-64, -62.5, 0, 63.5});
  // Dynamic: range [min(x, 0), max(x, 0)] = [-1, 2] -> scale 3/255, zero point round(255/3) = 85.
  auto d = RunOp("DynamicQuantizeLinear", {Make(DType::kF32, {3}, {-1, 0, 2})}, {}, 3);
  ExpectValues(d[1], {3.0 / 255}, 1e-6);
  ExpectValues(d[2], {85});
  ExpectValues(d[0], {0, 85, 255});
}

TEST(Signal, WindowsAndDet) {
  const double pi = std::acos(-1.0);
  Tensor n4 = Make(DType::kI64, {}, {4});
  std::vector<double> hann, hamming_sym, blackman;
  for (int i = 0; i < 4; ++i) {
    hann.push_back(std::pow(std::sin(pi * i / 4), 2));  // 0.5 - 0.5 cos(2 pi i / 4)
    hamming_sym.push_back(25.0 / 46 - 21.0 / 46 * std::cos(2 * pi * i / 3));
    blackman.push_back(0.42 - 0.5 * std::cos(2 * pi * i / 4) + 0.08 * std::cos(4 * pi * i / 4));
  }
  ExpectValues(RunOp("HannWindow", {n4})[0], hann);
  ExpectValues(RunOp("HammingWindow", {n4}, {Attribute::Int("periodic", 0)})[0], hamming_sym);
  ExpectValues(RunOp("BlackmanWindow", {n4})[0], blackman);

  // det [[0, 2], [3, 4]] = -6 (needs a row swap); a singular 3x3 gives 0; batched.
  Tensor m = Make(DType::kF32, {2, 2, 2}, {0, 2, 3, 4, 2, 0, 0, 5});
  ExpectValues(RunOp("Det", {m})[0], {-6, 10});
  ExpectValues(RunOp("Det", {Make(DType::kF32, {3, 3}, {1, 2, 3, 2, 4, 6, 0, 1, 1})})[0], {0});
}

TEST(AxisNorm, MeanVarianceNormalizationAndReverseSequence) {
  // axes [1]: each row normalized to zero mean, unit (biased) deviation.
  Tensor x = Make(DType::kF32, {2, 2}, {1, 3, 10, 10});
  ExpectValues(RunOp("MeanVarianceNormalization", {x}, {Attribute::Ints("axes", {1})})[0],
               {-1, 1, 0, 0}, 1e-6);
  // [time=3, batch=2]: batch 0 reverses its first 3 steps, batch 1 its first 2.
  Tensor s = Make(DType::kF32, {3, 2}, {0, 10, 1, 11, 2, 12});
  ExpectValues(RunOp("ReverseSequence", {s, Make(DType::kI64, {2}, {3, 2})})[0], {2, 11, 1, 10, 0, 12});
  // batch_axis 0, time_axis 1.
  Tensor t = Make(DType::kF32, {2, 3}, {0, 1, 2, 10, 11, 12});
  ExpectValues(RunOp("ReverseSequence", {t, Make(DType::kI64, {2}, {1, 3})},
                     {Attribute::Int("batch_axis", 0), Attribute::Int("time_axis", 1)})[0],
               {0, 1, 2, 12, 11, 10});
}

double Sig(double v) { return 1 / (1 + std::exp(-v)); }

TEST(Rnn, RnnGruLstmOneUnit) {
  // One input feature, one hidden unit, batch 1, two steps x = 1, 2 ([seq, batch, input]).
  Tensor x = Make(DType::kF32, {2, 1, 1}, {1, 2});
  std::vector<Attribute> h1 = {Attribute::Int("hidden_size", 1)};
  // RNN: h_t = tanh(0.5 x_t + 0.25 h_{t-1}).
  auto rnn = RunOp("RNN", {x, Make(DType::kF32, {1, 1, 1}, {0.5}), Make(DType::kF32, {1, 1, 1}, {0.25})},
                   h1, 2);
  const double r1 = std::tanh(0.5), r2 = std::tanh(1 + 0.25 * r1);
  EXPECT_EQ(rnn[0].dims(), (std::vector<int64_t>{2, 1, 1, 1}));
  ExpectValues(rnn[0], {r1, r2});
  ExpectValues(rnn[1], {r2});
  // Reverse: step 2 first.
  std::vector<Attribute> rev = {Attribute::Int("hidden_size", 1), Attribute::String("direction", "reverse")};
  auto back = RunOp("RNN", {x, Make(DType::kF32, {1, 1, 1}, {0.5}), Make(DType::kF32, {1, 1, 1}, {0.25})},
                    rev, 2);
  const double b2 = std::tanh(1.0), b1 = std::tanh(0.5 + 0.25 * b2);
  ExpectValues(back[0], {b1, b2});
  ExpectValues(back[1], {b1});

  // GRU with weights z: 1, r: 2, h: 3 on x, recurrent 0.5 each, no bias.
  Tensor gw = Make(DType::kF32, {1, 3, 1}, {1, 2, 3});
  Tensor gr = Make(DType::kF32, {1, 3, 1}, {0.5, 0.5, 0.5});
  double h = 0;
  std::vector<double> ys;
  for (double xv : {1.0, 2.0}) {
    const double z = Sig(xv + 0.5 * h), r = Sig(2 * xv + 0.5 * h);
    const double hh = std::tanh(3 * xv + 0.5 * (r * h));
    h = (1 - z) * hh + z * h;
    ys.push_back(h);
  }
  ExpectValues(RunOp("GRU", {x, gw, gr}, h1, 2)[0], ys);

  // LSTM (gates i, o, f, c) with peepholes P = [p_i, p_o, p_f] and a bias on W only.
  Tensor lw = Make(DType::kF32, {1, 4, 1}, {0.1, 0.2, 0.3, 0.4});
  Tensor lr = Make(DType::kF32, {1, 4, 1}, {0.5, 0.6, 0.7, 0.8});
  Tensor lb = Make(DType::kF32, {1, 8}, {0.1, 0, 0, -0.1, 0, 0, 0, 0});
  Tensor none;
  Tensor lp = Make(DType::kF32, {1, 3}, {0.2, 0.3, 0.4});
  double hs = 0, cs = 0;
  std::vector<double> lys;
  for (double xv : {1.0, 2.0}) {
    const double i = Sig(0.1 * xv + 0.5 * hs + 0.1 + 0.2 * cs);
    const double f = Sig(0.3 * xv + 0.7 * hs + 0.4 * cs);
    const double c = std::tanh(0.4 * xv + 0.8 * hs - 0.1);
    cs = f * cs + i * c;
    const double o = Sig(0.2 * xv + 0.6 * hs + 0.3 * cs);
    hs = o * std::tanh(cs);
    lys.push_back(hs);
  }
  auto lstm = RunOp("LSTM", {x, lw, lr, lb, none, none, none, lp}, h1, 3);
  ExpectValues(lstm[0], lys);
  ExpectValues(lstm[1], {hs});
  ExpectValues(lstm[2], {cs});
}

TEST(GridSample, GridSampleModesAndPadding) {
  Tensor x = Make(DType::kF32, {1, 1, 2, 2}, {1, 2, 3, 4});
  // Points (x, y): the corners and the centre, then a point half a pixel outside.
  Tensor grid = Make(DType::kF32, {1, 1, 4, 2}, {-1, -1, 1, 1, 0, 0, 0.1, -0.6});
  ExpectValues(RunOp("GridSample", {x, grid}, {Attribute::Int("align_corners", 1)})[0],
               {1, 4, 2.5, 1 + 0.55 + 2 * 0.2});
  ExpectValues(RunOp("GridSample", {x, grid}, {Attribute::Int("align_corners", 1),
                                               Attribute::String("mode", "nearest")})[0],
               {1, 4, 1, 2});  // the centre (0.5, 0.5) rounds half to even, to pixel (0, 0)
  // align_corners = 0: the corner point (-1, -1) is half a pixel outside, at (-0.5, -0.5).
  Tensor corner = Make(DType::kF32, {1, 1, 1, 2}, {-1, -1});
  ExpectValues(RunOp("GridSample", {x, corner})[0], {0.25});  // zeros: 3 of 4 taps read 0
  ExpectValues(RunOp("GridSample", {x, corner}, {Attribute::String("padding_mode", "border")})[0], {1});
  ExpectValues(RunOp("GridSample", {x, corner}, {Attribute::String("padding_mode", "reflection")})[0], {1});
}

TEST(Einsum, TraceMatmulImplicitEllipsis) {
  Tensor m = Make(DType::kF32, {2, 2}, {1, 2, 3, 4});
  ExpectValues(RunOp("Einsum", {m}, {Attribute::String("equation", "ii")})[0], {5});
  ExpectValues(RunOp("Einsum", {m}, {Attribute::String("equation", "ii->i")})[0], {1, 4});
  // Implicit output: the labels used once, alphabetically ("ij,jk" -> "ik").
  Tensor n = Make(DType::kF32, {2, 1}, {5, 6});
  Tensor mm = RunOp("Einsum", {m, n}, {Attribute::String("equation", "ij,jk")})[0];
  EXPECT_EQ(mm.dims(), (std::vector<int64_t>{2, 1}));
  ExpectValues(mm, {17, 39});
  // Ellipsis dims broadcast (size 1 against 2) and come first in the output.
  Tensor a = Make(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Make(DType::kF32, {1, 3}, {1, 0, -1});
  ExpectValues(RunOp("Einsum", {a, b}, {Attribute::String("equation", "...i,...i->...")})[0], {-2, -2});
  auto bad = MakeNode("Einsum", {a, n}, 1, {Attribute::String("equation", "ij,jk->ik")});
  EXPECT_FALSE(RunCpuKernel(*bad.node, {a, n}).ok()) << "j is 3 in one input and 2 in the other";
}

TEST(Signal, DftForwardOnesidedInverse) {
  // DFT of [1, 2, 3, 4]: 10, -2+2i, -2, -2-2i.
  Tensor x = Make(DType::kF32, {1, 4, 1}, {1, 2, 3, 4});
  Tensor f = RunOp("DFT", {x})[0];
  EXPECT_EQ(f.dims(), (std::vector<int64_t>{1, 4, 2}));
  ExpectValues(f, {10, 0, -2, 2, -2, 0, -2, -2}, 1e-6);
  ExpectValues(RunOp("DFT", {x}, {Attribute::Int("onesided", 1)})[0], {10, 0, -2, 2, -2, 0}, 1e-6);
  // The inverse of the spectrum gives the signal back (imaginary parts 0).
  ExpectValues(RunOp("DFT", {f}, {Attribute::Int("inverse", 1)})[0], {1, 0, 2, 0, 3, 0, 4, 0}, 1e-6);
}

TEST(Signal, StftFramesAndWindow) {
  // Frames {1, 2} and {3, 4} (step 2, length 2), onesided: bins 0 and 1 (sum and difference).
  Tensor sig = Make(DType::kF32, {1, 4, 1}, {1, 2, 3, 4});
  Tensor step = Make(DType::kI64, {}, {2});
  Tensor none;
  Tensor out = RunOp("STFT", {sig, step, none, Make(DType::kI64, {}, {2})})[0];
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{1, 2, 2, 2}));
  ExpectValues(out, {3, 0, -1, 0, 7, 0, -1, 0}, 1e-6);
  // The window's length is the frame length; it scales each frame's samples.
  ExpectValues(RunOp("STFT", {sig, step, Make(DType::kF32, {2}, {0.5, 1})})[0],
               {2.5, 0, -1.5, 0, 5.5, 0, -2.5, 0}, 1e-6);
}

TEST(GatherScatter, MaxUnpoolDefaultAndLargerShape) {
  Tensor x = Make(DType::kF32, {1, 1, 1, 2}, {5, 6});
  Tensor i = Make(DType::kI64, {1, 1, 1, 2}, {1, 2});
  std::vector<Attribute> a = {Attribute::Ints("kernel_shape", {1, 2}), Attribute::Ints("strides", {1, 2})};
  Tensor y = RunOp("MaxUnpool", {x, i}, a)[0];
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 1, 1, 4}));
  ExpectValues(y, {0, 5, 6, 0});
  // A larger output_shape keeps the unpooled result in its leading corner.
  ExpectValues(RunOp("MaxUnpool", {x, i, Make(DType::kI64, {4}, {1, 1, 2, 5})}, a)[0],
               {0, 5, 6, 0, 0, 0, 0, 0, 0, 0});
}

TEST(Quantize, MatMulIntegerAndQLinearMatMul) {
  Tensor a = U8({2, 2}, {1, 2, 3, 4});
  Tensor b = U8({2, 1}, {5, 6});
  // (A - 1) B = [[0, 1], [2, 3]] [5, 6]^T = [6, 28], int32.
  Tensor y = RunOp("MatMulInteger", {a, b, U8({}, {1})})[0];
  EXPECT_EQ(y.dtype(), DType::kI32);
  ExpectValues(y, {6, 28});
  // Requantized by 0.5 * 1 / 2: 1.5 rounds to even 2, then + 10.
  Tensor one = Make(DType::kF32, {}, {1});
  ExpectValues(RunOp("QLinearMatMul", {a, Make(DType::kF32, {}, {0.5}), U8({}, {1}), b, one, U8({}, {0}),
                                       Make(DType::kF32, {}, {2}), U8({}, {10})})[0],
               {12, 17});
}

}  // namespace
}  // namespace mixtrain
