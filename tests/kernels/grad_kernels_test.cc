// The ai.mixtrain backward kernels in fp16 and bf16 against their fp32 results (the fp32 results
// themselves are checked by finite differences in tests/passes/*gradcheck_test.cc): storage in
// the low type, arithmetic in fp32, so the low-precision result is the fp32 one up to the
// rounding of inputs and outputs.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "graph/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain {
namespace {

using testing_util::MakeNode;
using testing_util::RunCpuKernel;
using A = Attribute;

Tensor RandomF32(std::vector<int64_t> dims, uint32_t seed) {
  Tensor t(DType::kF32, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
  return t;
}

Tensor ToLow(const Tensor& t, DType to) {
  if (t.dtype() != DType::kF32) return t;
  Tensor o(to, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = t.data_as<float>()[i];
    o.data_as<uint16_t>()[i] = to == DType::kF16 ? FloatToHalf(v) : FloatToBFloat16(v);
  }
  return o;
}

// Runs op on fp32 inputs and on the same inputs in fp16/bf16; every output must agree within
// `tol` of the fp32 output's largest magnitude.
void CheckLowPrecision(const std::string& op, const std::vector<Tensor>& ins, int outputs,
                       std::vector<A> attrs = {}) {
  auto f32 = MakeNode(op, ins, outputs, attrs, "ai.mixtrain");
  auto ref = RunCpuKernel(*f32.node, ins);
  ASSERT_TRUE(ref.ok()) << op << ": " << ref.status().message();
  for (DType low : {DType::kF16, DType::kBF16}) {
    std::vector<Tensor> lin;
    for (const Tensor& t : ins) lin.push_back(t.defined() ? ToLow(t, low) : t);
    auto n = MakeNode(op, lin, outputs, attrs, "ai.mixtrain");
    auto got = RunCpuKernel(*n.node, lin);
    ASSERT_TRUE(got.ok()) << op << " " << DTypeName(low) << ": " << got.status().message();
    const double tol = low == DType::kF16 ? 5e-3 : 3e-2;
    for (size_t o = 0; o < ref->size(); ++o) {
      const Tensor& r = (*ref)[o];
      const Tensor& g = (*got)[o];
      ASSERT_EQ(g.dtype(), low) << op << " output " << o;
      double scale = 1e-6;
      for (int64_t i = 0; i < r.numel(); ++i) scale = std::max(scale, std::abs(r.GetDouble(i)));
      for (int64_t i = 0; i < r.numel(); ++i)
        ASSERT_NEAR(g.GetDouble(i), r.GetDouble(i), tol * scale)
            << op << " " << DTypeName(low) << " output " << o << "[" << i << "]";
    }
  }
}

TEST(GradKernels, ConvGrad) {
  CheckLowPrecision("ConvGrad", {RandomF32({2, 4, 3, 3}, 1), RandomF32({2, 2, 5, 5}, 2), RandomF32({4, 1, 3, 3}, 3)},
                    2, {A::Int("group", 2), A::Ints("pads", {1, 1, 1, 1}), A::Ints("strides", {2, 2})});
}
TEST(GradKernels, Pooling) {
  CheckLowPrecision("MaxPoolGrad", {RandomF32({1, 2, 2, 2}, 1), RandomF32({1, 2, 4, 4}, 2)}, 1,
                    {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})});
  CheckLowPrecision("AveragePoolGrad", {RandomF32({1, 2, 4, 4}, 1), RandomF32({1, 2, 4, 4}, 2)}, 1,
                    {A::Ints("kernel_shape", {3, 3}), A::Ints("pads", {1, 1, 1, 1})});
}
TEST(GradKernels, Normalization) {
  CheckLowPrecision("LayerNormalizationGrad",
                    {RandomF32({3, 8}, 1), RandomF32({3, 8}, 2), RandomF32({8}, 3)}, 3);
  CheckLowPrecision("BatchNormalizationGrad",
                    {RandomF32({4, 3, 2}, 1), RandomF32({4, 3, 2}, 2), RandomF32({3}, 3),
                     RandomF32({3}, 4), Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 0.5f})},
                    3);
}
// LayerNormalizationGrad at a size whose row chunks take the kernel's 8-rows-at-a-time loop and
// its one-row tail (300 rows of 64: 16 chunks of 18-19 rows), with dX and without it, against the
// formulas in double (x - mean over var in two passes; dX = inv (g - mean(g) - h mean(g h)),
// g = dY * scale; dScale = sum dY h; dBias = sum dY).
TEST(GradKernels, LayerNormGradManyShortRowsMatchesTheFormula) {
  const int64_t rows = 300, n = 64;
  const float eps = 1e-5f;
  Tensor dy = RandomF32({rows, n}, 11), x = RandomF32({rows, n}, 12), scale = RandomF32({n}, 13);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = 3.0f + 2.0f * x.data_as<float>()[i];
  std::vector<double> want_dx(rows * n), want_ds(n, 0.0), want_db(n, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data_as<float>() + r * n;
    const float* gr = dy.data_as<float>() + r * n;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(var / n + eps);
    double sg = 0, sgh = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double h = (xr[i] - mean) * inv, g = double(gr[i]) * scale.data_as<float>()[i];
      sg += g;
      sgh += g * h;
      want_ds[i] += gr[i] * h;
      want_db[i] += gr[i];
    }
    for (int64_t i = 0; i < n; ++i) {
      const double h = (xr[i] - mean) * inv, g = double(gr[i]) * scale.data_as<float>()[i];
      want_dx[r * n + i] = inv * (g - sg / n - h * sgh / n);
    }
  }
  auto expect = [](const Tensor& got, const std::vector<double>& want, const char* what) {
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.GetDouble(i), want[i], 2e-5 * (1 + std::abs(want[i]))) << what << "[" << i << "]";
  };
  for (bool with_dx : {true, false}) {
    SCOPED_TRACE(with_dx ? "dX, dScale, dBias" : "dScale, dBias only");
    Graph g;
    std::vector<Value*> ins;
    for (const Tensor* t : {&dy, &x, &scale}) {
      ins.push_back(g.AddValue("in" + std::to_string(ins.size()), DType::kF32, Shape::Of(t->dims())));
      g.AddInput(ins.back());
    }
    std::vector<Value*> outs = {g.AddValue("dx", DType::kF32, Shape()), g.AddValue("ds", DType::kF32, Shape()),
                                g.AddValue("db", DType::kF32, Shape())};
    if (!with_dx) outs[0] = nullptr;
    Node* node = g.AddNode("LayerNormalizationGrad", ins, outs, "node", "ai.mixtrain");
    node->SetAttr(A::Float("epsilon", eps));
    auto got = RunCpuKernel(*node, {dy, x, scale});
    ASSERT_TRUE(got.ok()) << got.status().message();
    if (with_dx) expect((*got)[0], want_dx, "dX");
    expect((*got)[1], want_ds, "dScale");
    expect((*got)[2], want_db, "dBias");
  }
}

TEST(GradKernels, LossesGeluGatherSumTo) {
  Tensor labels = Tensor::FromVector<int64_t>(DType::kI64, {4}, {0, 2, 1, 2});
  CheckLowPrecision("SoftmaxCrossEntropyLossGrad", {Tensor::Scalar(1.0f), RandomF32({4, 3}, 1), labels}, 1);
  CheckLowPrecision("NegativeLogLikelihoodLossGrad", {Tensor::Scalar(0.5f), RandomF32({4, 3}, 1), labels}, 1,
                    {A::String("reduction", "sum")});
  CheckLowPrecision("GeluGrad", {RandomF32({10}, 1), RandomF32({10}, 2)}, 1);
  CheckLowPrecision("GatherGrad", {RandomF32({4, 3}, 1), labels, RandomF32({5, 3}, 2)}, 1);
  CheckLowPrecision("SumToShape", {RandomF32({2, 3, 4}, 1), Tensor::FromVector<int64_t>(DType::kI64, {2}, {3, 1})}, 1);
}

// GatherGradAdd(A, dY, indices) is A + GatherGrad(dY, indices, A): repeated, negative and unique
// indices, along axis 0 and 1, fp32 and bf16 (the sum in float, rounded once).
TEST(GradKernels, GatherGradAddIsTheAddOfGatherGrad) {
  for (int64_t axis : {0, 1}) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(testing::Message() << "axis " << axis << " " << DTypeName(t));
      const std::vector<int64_t> a_dims = axis == 0 ? std::vector<int64_t>{5, 3} : std::vector<int64_t>{2, 5, 3};
      const std::vector<int64_t> idx_v = {4, 0, -1, 2, 4, 0};  // 4 three times (-1 is 4)
      std::vector<int64_t> dy_dims = axis == 0 ? std::vector<int64_t>{6, 3} : std::vector<int64_t>{2, 6, 3};
      Tensor a = ToLow(RandomF32(a_dims, 3), t), dy = ToLow(RandomF32(dy_dims, 4), t);
      Tensor idx = Tensor::FromVector<int64_t>(DType::kI64, {6}, idx_v);
      auto gg = MakeNode("GatherGrad", {dy, idx, a}, 1, {A::Int("axis", axis)}, "ai.mixtrain");
      auto d = RunCpuKernel(*gg.node, {dy, idx, a});
      ASSERT_TRUE(d.ok()) << d.status();
      auto fused = MakeNode("GatherGradAdd", {a, dy, idx}, 1, {A::Int("axis", axis)}, "ai.mixtrain");
      auto got = RunCpuKernel(*fused.node, {a, dy, idx});
      ASSERT_TRUE(got.ok()) << got.status();
      const Tensor& gd = (*d)[0];
      const Tensor& gy = (*got)[0];
      ASSERT_EQ(gy.numel(), a.numel());
      ASSERT_EQ(gy.dtype(), t);
      double moved = 0;
      for (int64_t i = 0; i < gy.numel(); ++i) {
        const double want = a.GetDouble(i) + gd.GetDouble(i);
        EXPECT_NEAR(gy.GetDouble(i), want, t == DType::kF32 ? 1e-6 : 2e-2 * (1 + std::fabs(want))) << i;
        moved += std::fabs(gd.GetDouble(i));
      }
      EXPECT_GT(moved, 0.1);  // the scatter added something
    }
  }
  // An index out of range is an error naming it.
  Tensor a = RandomF32({5, 3}, 3), dy = RandomF32({1, 3}, 4);
  Tensor bad = Tensor::FromVector<int64_t>(DType::kI64, {1}, {5});
  auto fused = MakeNode("GatherGradAdd", {a, dy, bad}, 1, {A::Int("axis", 0)}, "ai.mixtrain");
  auto r = RunCpuKernel(*fused.node, {a, dy, bad});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("index 5 out of range"), std::string::npos) << r.status();
}

// The fp32 row kernel (N x C, classes contiguous) against the formula in double:
// dX[n, c] = coef_n * (softmax(x_n)[c] - [c == y_n]), coef_n = w[y_n] * dL / sum of w over
// non-ignored rows (mean), w[y_n] * dL (sum) or w[y_n] * dL_n (none); 0 for ignored rows.
// 37 classes, so the vector loops have tails; scores up to +-8 so the softmax is far from uniform.
TEST(GradKernels, SoftmaxCrossEntropyRowsMatchTheFormula) {
  constexpr int64_t kN = 6, kC = 37;
  Tensor x = RandomF32({kN, kC}, 7);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] *= 8;
  const std::vector<int64_t> y = {0, 36, -100, 5, 36, 17};
  std::vector<float> w(kC);
  for (int64_t c = 0; c < kC; ++c) w[c] = 0.25f + 0.1f * static_cast<float>(c % 7);
  for (const char* reduction : {"mean", "sum", "none"}) {
    const bool none = std::string(reduction) == "none";
    std::vector<float> dl_v = none ? std::vector<float>{0.5f, -1, 2, 0.25f, 1.5f, -0.75f} : std::vector<float>{1.7f};
    Tensor dl = none ? Tensor::FromVector<float>(DType::kF32, {kN}, dl_v) : Tensor::Scalar(dl_v[0]);
    std::vector<Tensor> ins{dl, x, Tensor::FromVector<int64_t>(DType::kI64, {kN}, y),
                            Tensor::FromVector<float>(DType::kF32, {kC}, w)};
    auto n = MakeNode("SoftmaxCrossEntropyLossGrad", ins, 1,
                      {A::String("reduction", reduction), A::Int("ignore_index", -100)}, "ai.mixtrain");
    auto r = RunCpuKernel(*n.node, ins);
    ASSERT_TRUE(r.ok()) << r.status();
    const Tensor& dx = (*r)[0];
    double wsum = 0;
    for (int64_t i = 0; i < kN; ++i) wsum += y[i] == -100 ? 0 : w[y[i]];
    for (int64_t i = 0; i < kN; ++i) {
      const float* xp = x.data_as<float>() + i * kC;
      double mx = xp[0], z = 0;
      for (int64_t c = 0; c < kC; ++c) mx = std::max<double>(mx, xp[c]);
      for (int64_t c = 0; c < kC; ++c) z += std::exp(xp[c] - mx);
      double coef = 0;
      if (y[i] != -100) coef = w[y[i]] * (none ? dl_v[i] : dl_v[0]) / (std::string(reduction) == "mean" ? wsum : 1.0);
      for (int64_t c = 0; c < kC; ++c) {
        const double want = coef * (std::exp(xp[c] - mx) / z - (c == y[i] ? 1.0 : 0.0));
        EXPECT_NEAR(dx.GetDouble(i * kC + c), want, 2e-6 * std::abs(coef) + 1e-9)
            << reduction << " row " << i << " class " << c;
      }
    }
  }
}

// The row kernel subtracts each row's max before exp: logits of 200 (exp overflows float past
// 88.7) at the first, a middle and the tail position (past the last full vector of 37 classes)
// give the one-hot softmax, and a NaN logit makes its whole row NaN, wherever the max is.
TEST(GradKernels, SoftmaxCrossEntropyRowsLargeLogitsAndNaN) {
  constexpr int64_t kN = 4, kC = 37;
  std::vector<float> x(kN * kC, 0.0f);
  const int64_t hot[3] = {0, 17, 36};
  for (int64_t i = 0; i < 3; ++i) x[i * kC + hot[i]] = 200.0f;
  x[3 * kC + 36] = std::nanf("");
  x[3 * kC + 2] = 200.0f;
  std::vector<Tensor> ins{Tensor::Scalar(1.0f), Tensor::FromVector<float>(DType::kF32, {kN, kC}, x),
                          Tensor::FromVector<int64_t>(DType::kI64, {kN}, {1, 1, 1, 1})};
  auto n = MakeNode("SoftmaxCrossEntropyLossGrad", ins, 1, {A::String("reduction", "sum")}, "ai.mixtrain");
  auto r = RunCpuKernel(*n.node, ins);
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& dx = (*r)[0];
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t c = 0; c < kC; ++c) {
      const double want = (c == hot[i] ? 1.0 : 0.0) - (c == 1 ? 1.0 : 0.0);
      EXPECT_NEAR(dx.GetDouble(i * kC + c), want, 1e-6) << "row " << i << " class " << c;
    }
  }
  for (int64_t c = 0; c < kC; ++c) EXPECT_TRUE(std::isnan(dx.GetDouble(3 * kC + c))) << "class " << c;
}

// Kernel errors a malformed graph can cause name the node instead of crashing.
TEST(GradKernels, BadLabelIsAnError) {
  Tensor bad = Tensor::FromVector<int64_t>(DType::kI64, {2}, {0, 7});
  std::vector<Tensor> ins{Tensor::Scalar(1.0f), RandomF32({2, 3}, 1), bad};
  auto n = MakeNode("SoftmaxCrossEntropyLossGrad", ins, 1, {}, "ai.mixtrain");
  auto r = RunCpuKernel(*n.node, ins);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("out of range"), std::string::npos);
}

}  // namespace
}  // namespace mixtrain
