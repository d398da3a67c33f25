// The ai.mixtrain backward kernels in fp16 and bf16 against their fp32 results (the fp32 results
// themselves are checked by finite differences in tests/passes/*gradcheck_test.cc): storage in
// the low type, arithmetic in fp32, so the low-precision result is the fp32 one up to the
// rounding of inputs and outputs.
#include <random>

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
TEST(GradKernels, LossesGeluGatherSumTo) {
  Tensor labels = Tensor::FromVector<int64_t>(DType::kI64, {4}, {0, 2, 1, 2});
  CheckLowPrecision("SoftmaxCrossEntropyLossGrad", {Tensor::Scalar(1.0f), RandomF32({4, 3}, 1), labels}, 1);
  CheckLowPrecision("NegativeLogLikelihoodLossGrad", {Tensor::Scalar(0.5f), RandomF32({4, 3}, 1), labels}, 1,
                    {A::String("reduction", "sum")});
  CheckLowPrecision("GeluGrad", {RandomF32({10}, 1), RandomF32({10}, 2)}, 1);
  CheckLowPrecision("GatherGrad", {RandomF32({4, 3}, 1), labels, RandomF32({5, 3}, 2)}, 1);
  CheckLowPrecision("SumToShape", {RandomF32({2, 3, 4}, 1), Tensor::FromVector<int64_t>(DType::kI64, {2}, {3, 1})}, 1);
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
