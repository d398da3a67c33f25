// Dropout on the CPU and the counter-based RNG behind it (kernels/common/rng.h): Philox4x32-10
// against Random123's known answers; inference form = identity with an all-true mask; training
// form = mask from (seed, step, element) with keep rate 1 - ratio and survivors scaled by
// 1 / (1 - ratio), reproducible per seed, fresh per step.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/common/rng.h"
#include "tests/kernels/movement_test_util.h"

namespace mixtrain {
namespace {

using movement_test::Iota;
using movement_test::kAllTypes;
using movement_test::RunError;
using movement_test::RunOp;

TEST(MovementDropoutTest, PhiloxMatchesRandom123KnownAnswers) {
  struct Case {
    uint32_t ctr[4], key[2], want[4];
  };
  const Case cases[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case& c : cases) {
    uint32_t out[4];
    Philox4x32_10(c.ctr, c.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], c.want[i]) << "word " << i;
  }
  EXPECT_EQ(UniformFromBits(0), 0.0f);
  EXPECT_LT(UniformFromBits(0xffffffffu), 1.0f);
}

Tensor Bool(bool v) { return Tensor::FromVector<uint8_t>(DType::kBool, {}, {v}); }

TEST(MovementDropoutTest, InferenceIsIdentityWithAllTrueMask) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {3, 5});
    auto out = RunOp("Dropout", {x, Tensor::Scalar(0.5f), Bool(false)}, {}, 2, 13);
    EXPECT_TRUE(out[0].Identical(x));
    ASSERT_EQ(out[1].dtype(), DType::kBool);
    for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(out[1].data_as<uint8_t>()[i], 1);
    // opset 10: ratio attribute, no training input
    out = RunOp("Dropout", {x}, {Attribute::Float("ratio", 0.2f)}, 2, 10);
    EXPECT_TRUE(out[0].Identical(x));
  }
}

TEST(MovementDropoutTest, TrainingMaskFollowsTheSeededStream) {
  const int64_t n = 20000;
  const float ratio = 0.3f;
  Tensor x = Iota(DType::kF32, {n});
  std::vector<Attribute> seed = {Attribute::Int("seed", 42)};
  auto out = RunOp("Dropout", {x, Tensor::Scalar(ratio), Bool(true)}, seed, 2, 13);
  const float scale = 1.0f / (1.0f - ratio);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = DropoutKeep(42, 0, i, ratio);
    ASSERT_EQ(out[1].data_as<uint8_t>()[i], keep) << i;
    ASSERT_EQ(out[0].data_as<float>()[i], keep ? static_cast<float>(i) * scale : 0.0f) << i;
    kept += keep;
  }
  // 20000 Bernoulli(0.7) draws: the standard deviation of the rate is ~0.0032.
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.7, 0.02);
  // Same seed: same mask; another seed: another mask.
  auto again = RunOp("Dropout", {x, Tensor::Scalar(ratio), Bool(true)}, seed, 2, 13);
  EXPECT_TRUE(again[1].Identical(out[1]));
  auto other = RunOp("Dropout", {x, Tensor::Scalar(ratio), Bool(true)},
                     {Attribute::Int("seed", 43)}, 2, 13);
  EXPECT_FALSE(other[1].Identical(out[1]));
}

TEST(MovementDropoutTest, EachTrainingStepDrawsAFreshMask) {
  Tensor x = Iota(DType::kF32, {64});
  std::vector<Tensor> inputs = {x, Tensor::Scalar(0.5f), Bool(true)};
  auto one = testing_util::MakeNode("Dropout", inputs, 2, {Attribute::Int("seed", 7)});
  auto def = KernelRegistry::Global().Find(*one.node, DeviceType::kCPU,
                                           {DType::kF32, DType::kF32, DType::kBool},
                                           {DType::kF32, DType::kBool});
  ASSERT_TRUE(def.ok()) << def.status();
  auto kernel = (*def)->factory(*one.node);
  ASSERT_TRUE(kernel.ok());
  std::vector<TensorView> in(3);
  for (int i = 0; i < 3; ++i)
    in[i] = {inputs[i].dtype(), inputs[i].dims(), const_cast<void*>(inputs[i].data())};
  for (uint64_t step = 0; step < 3; ++step) {
    Tensor y(DType::kF32, {64}), mask(DType::kBool, {64});
    TensorView yv{DType::kF32, {64}, y.data()}, mv{DType::kBool, {64}, mask.data()};
    KernelContext ctx(*one.node, DeviceType::kCPU, {&in[0], &in[1], &in[2]}, {&yv, &mv});
    ctx.set_run_index(step);  // the session's run counter
    ASSERT_TRUE((*kernel)->Compute(ctx).ok());
    for (int64_t i = 0; i < 64; ++i)
      ASSERT_EQ(mask.data_as<uint8_t>()[i], DropoutKeep(7, step, i, 0.5f)) << "step " << step;
  }
}

TEST(MovementDropoutTest, LowPrecisionRoundsTheScaledValue) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {100});
    auto out = RunOp("Dropout", {x, Tensor::Scalar(0.25f), Bool(true)},
                     {Attribute::Int("seed", 1)}, 2, 13);
    auto load = t == DType::kF16 ? HalfToFloat : BFloat16ToFloat;
    auto store = t == DType::kF16 ? FloatToHalf : FloatToBFloat16;
    for (int64_t i = 0; i < 100; ++i) {
      const bool keep = out[1].data_as<uint8_t>()[i];
      const float v = load(x.data_as<uint16_t>()[i]);
      EXPECT_EQ(out[0].data_as<uint16_t>()[i], store(keep ? v * (1.0f / 0.75f) : 0.0f)) << i;
    }
  }
}

TEST(MovementDropoutTest, RatioZeroIsIdentityAndBadInputsFail) {
  Tensor x = Iota(DType::kF32, {10});
  auto out = RunOp("Dropout", {x, Tensor::Scalar(0.0f), Bool(true)}, {}, 2, 13);
  EXPECT_TRUE(out[0].Identical(x));
  EXPECT_FALSE(RunError("Dropout", {x, Tensor::Scalar(1.0f), Bool(true)}, {}, 2, 13).ok());
  EXPECT_FALSE(
      RunError("Dropout", {Iota(DType::kI32, {4}), Tensor::Scalar(0.5f), Bool(true)}, {}, 2, 13)
          .ok());
}

}  // namespace
}  // namespace mixtrain
