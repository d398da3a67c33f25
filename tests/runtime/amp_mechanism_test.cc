// Tests that prove the mixed-precision training mechanism end to end through the Trainer (the
// whole step is one graph run on the CPU, whose fp16/bf16 kernels round like the GPU's):
//   underflow   fp16 gradients of a tiny loss all flush to zero without loss scaling; with
//               dynamic scaling they are non-zero and match fp32 within 1e-2 relative
//   overflow    an inf/NaN gradient skips the step: every state tensor bit-identical except the
//               scaler (scale halved, good-step counter reset); clean steps grow the scale
//   accumulate  two half-batch micro-steps with accumulate=2 equal one full-batch step
//   resume      2N steps == N steps + checkpoint + new Trainer + load + N steps, bit-identical
// Fixtures: tests/data/optim/ (tests/data/make_optim_fixtures.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "passes/training.h"
#include "tests/runtime/train_test_util.h"

namespace mixtrain {
namespace {

using traintest::ExpectSameState;
using traintest::Fp32Config;
using traintest::LoadNpz;
using traintest::MakeTrainer;
using traintest::Slice0;
using Batch = std::map<std::string, Tensor>;

pb::TrainConfig Fp16Config(pb::LossScalerConfig::Mode mode) {
  pb::TrainConfig c = Fp32Config();
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::FP16);
  c.mutable_loss_scaler()->set_mode(mode);
  return c;
}

float ScalarF(const std::map<std::string, Tensor>& s, const char* name) {
  EXPECT_TRUE(s.contains(name)) << name;
  return s.contains(name) ? static_cast<float>(s.at(name).GetDouble(0)) : NAN;
}
int64_t ScalarI(const std::map<std::string, Tensor>& s, const char* name) {
  EXPECT_TRUE(s.contains(name)) << name;
  return s.contains(name) ? s.at(name).GetInt(0) : -1;
}

// --- underflow ----------------------------------------------------------------------------------

// One SGD step with a huge learning rate on the tiny-loss MLP: (param' - param) / lr is the
// unscaled fp32 gradient the optimizer received. lr = 1e5 lifts the ~1e-9 gradients to deltas of
// ~1e-4, far above the rounding of O(0.3) weights (3e-8).
constexpr float kUnderflowLr = 1e5f;

std::map<std::string, Tensor> GradientsSeen(pb::TrainConfig c) {
  c.set_loss("output:small_loss");
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::SGD);
  c.mutable_optimizer()->set_lr(kUnderflowLr);
  std::unique_ptr<Trainer> t = MakeTrainer("tiny_loss_mlp.onnx", c);
  if (!t) return {};
  std::map<std::string, Tensor> before;
  for (const std::string& p : t->ParameterNames()) before.emplace(p, *t->GetParameter(p));
  auto r = t->Step(LoadNpz("tiny_batch.npz"));
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r.ok() && r->skipped);
  std::map<std::string, Tensor> grads;
  for (const auto& [p, b] : before) {
    Tensor after = *t->GetParameter(p);
    Tensor g(DType::kF32, b.dims());
    for (int64_t i = 0; i < b.numel(); ++i)
      g.data_as<float>()[i] = static_cast<float>((b.GetDouble(i) - after.GetDouble(i)) / kUnderflowLr);
    grads.emplace(p, g);
  }
  return grads;
}

double Norm(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.GetDouble(i) * t.GetDouble(i);
  return std::sqrt(s);
}

TEST(AmpUnderflow, Fp16GradientsFlushWithoutScalingAndMatchFp32WithDynamicScaling) {
  auto fp32 = GradientsSeen(Fp32Config());
  auto unscaled = GradientsSeen(Fp16Config(pb::LossScalerConfig::OFF));
  auto scaled = GradientsSeen(Fp16Config(pb::LossScalerConfig::DYNAMIC));
  ASSERT_EQ(fp32.size(), 4u);
  ASSERT_EQ(unscaled.size(), 4u);
  ASSERT_EQ(scaled.size(), 4u);
  for (const auto& [p, g32] : fp32) {
    double n32 = Norm(g32);
    // The fp32 gradient is real but below fp16's smallest subnormal (6e-8) everywhere.
    EXPECT_GT(n32, 1e-10) << p;
    for (int64_t i = 0; i < g32.numel(); ++i) EXPECT_LT(std::fabs(g32.GetDouble(i)), 6e-8) << p;
    EXPECT_EQ(Norm(unscaled.at(p)), 0.0) << p << ": fp16 gradients without loss scaling should all be zero";
    const Tensor& g16 = scaled.at(p);
    double diff = 0;
    for (int64_t i = 0; i < g32.numel(); ++i) diff += std::pow(g16.GetDouble(i) - g32.GetDouble(i), 2);
    double rel = std::sqrt(diff) / n32;
    EXPECT_LT(rel, 1e-2) << p << ": dynamic-scaled fp16 gradient vs fp32, relative L2 error";
    std::printf("underflow: %-12s |g32| %.3e  fp16 no scaling |g| 0  fp16 dynamic rel. error %.2e\n",
                p.c_str(), n32, rel);
  }
}

// --- overflow -----------------------------------------------------------------------------------

Batch MlpBatch() { return LoadNpz("batch.npz"); }

Batch Poisoned(float v) {
  Batch b = MlpBatch();
  b.at("x").data_as<float>()[5] = v;
  return b;
}

// (model, poison value): the MLP, and the MLP with a BatchNorm whose running statistics must not
// take the inf/NaN either.
class AmpOverflow : public testing::TestWithParam<std::tuple<std::string, float>> {};

TEST_P(AmpOverflow, SkipsTheStepAndBacksOffTheScale) {
  const auto& [model, poison] = GetParam();
  pb::TrainConfig c = Fp16Config(pb::LossScalerConfig::DYNAMIC);
  c.mutable_loss_scaler()->set_growth_interval(3);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);  // moments are state too
  std::unique_ptr<Trainer> t = MakeTrainer(model, c);
  ASSERT_NE(t, nullptr);
  // Two clean steps: the good-step counter is 2, moments are non-zero.
  for (int i = 0; i < 2; ++i) ASSERT_FALSE(t->Step(MlpBatch())->skipped);
  auto before = *t->State();
  EXPECT_EQ(ScalarI(before, kGoodStepsName), 2);
  EXPECT_EQ(ScalarI(before, kStepName), 2);
  const float scale = ScalarF(before, kLossScaleName);
  EXPECT_EQ(scale, c.loss_scaler().init_scale());

  auto r = t->Step(Poisoned(poison));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->skipped);
  EXPECT_EQ(r->loss_scale, scale);
  auto after = *t->State();
  EXPECT_EQ(ScalarF(after, kLossScaleName), scale * 0.5f);
  EXPECT_EQ(ScalarI(after, kGoodStepsName), 0);
  // The device's skip counter counts it (the trainer reads it instead of every step's found_inf).
  EXPECT_EQ(ScalarI(before, kSkippedStepsName), 0);
  EXPECT_EQ(ScalarI(after, kSkippedStepsName), 1);
  EXPECT_EQ(t->SkippedSteps().value(), 1);
  // Everything else, parameters, Adam moments, step counter, BN statistics, bit-identical.
  ASSERT_EQ(before.size(), after.size());
  for (const auto& [name, v] : before) {
    if (name == kLossScaleName || name == kGoodStepsName || name == kSkippedStepsName) continue;
    EXPECT_TRUE(v.Identical(after.at(name))) << "state '" << name << "' changed on a skipped step";
  }
  size_t params = t->ParameterNames().size();
  EXPECT_GE(before.size(), params * 3 + 4);  // params x (param, m, v), step, scale, good and skipped steps
  if (model == "mlp_bn.onnx") {
    EXPECT_TRUE(before.contains("bn.running_mean") && before.contains("bn.running_var"));
  }

  // Three clean steps (growth_interval) double the scale back and reset the counter.
  for (int i = 0; i < 3; ++i) {
    auto s = t->Step(MlpBatch());
    ASSERT_TRUE(s.ok());
    EXPECT_FALSE(s->skipped);
    EXPECT_EQ(s->loss_scale, scale * 0.5f) << "clean step " << i;
  }
  auto grown = *t->State();
  EXPECT_EQ(ScalarF(grown, kLossScaleName), scale);
  EXPECT_EQ(ScalarI(grown, kGoodStepsName), 0);
  EXPECT_EQ(ScalarI(grown, kStepName), 5);
  EXPECT_EQ(ScalarI(grown, kSkippedStepsName), 1);
  for (const auto& [name, v] : grown)
    for (int64_t i = 0; i < v.numel(); ++i) ASSERT_TRUE(std::isfinite(v.GetDouble(i))) << name;
}

INSTANTIATE_TEST_SUITE_P(
    InfAndNan, AmpOverflow,
    testing::Combine(testing::Values("mlp.onnx", "mlp_bn.onnx"),
                     testing::Values(std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN())),
    [](const testing::TestParamInfo<std::tuple<std::string, float>>& i) {
      std::string m = std::get<0>(i.param) == "mlp.onnx" ? "Mlp" : "MlpBatchNorm";
      return m + (std::isnan(std::get<1>(i.param)) ? "NaN" : "Inf");
    });

TEST(AmpScaler, Fp32WithoutScalingAlsoSkipsNonFiniteSteps) {
  std::unique_ptr<Trainer> t = MakeTrainer("mlp_bn.onnx", Fp32Config());
  ASSERT_NE(t, nullptr);
  ASSERT_FALSE(t->Step(MlpBatch())->skipped);
  auto before = *t->State();
  EXPECT_FALSE(before.contains(kLossScaleName));
  auto r = t->Step(Poisoned(std::numeric_limits<float>::infinity()));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->skipped);
  ExpectSameState(before, *t->State(), kSkippedStepsName);
  EXPECT_EQ(t->SkippedSteps().value(), 1);
}

TEST(AmpScaler, GrowthStopsAtMaxScale) {
  pb::TrainConfig c = Fp16Config(pb::LossScalerConfig::DYNAMIC);
  c.mutable_loss_scaler()->set_growth_interval(1);
  c.mutable_loss_scaler()->set_init_scale(1024);
  c.mutable_loss_scaler()->set_max_scale(4096);
  std::unique_ptr<Trainer> t = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(t, nullptr);
  std::vector<float> used;
  for (int i = 0; i < 4; ++i) used.push_back(t->Step(MlpBatch())->loss_scale);
  EXPECT_EQ(used, (std::vector<float>{1024, 2048, 4096, 4096}));
}

TEST(AmpScaler, StaticScaleNeverChanges) {
  pb::TrainConfig c = Fp16Config(pb::LossScalerConfig::STATIC);
  c.mutable_loss_scaler()->set_init_scale(512);
  c.mutable_loss_scaler()->set_growth_interval(1);
  std::unique_ptr<Trainer> t = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(t, nullptr);
  ASSERT_FALSE(t->Step(MlpBatch())->skipped);
  auto before = *t->State();
  EXPECT_TRUE(t->Step(Poisoned(std::numeric_limits<float>::infinity()))->skipped);
  ExpectSameState(before, *t->State(), kSkippedStepsName);
  EXPECT_EQ(t->SkippedSteps().value(), 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t->Step(MlpBatch())->loss_scale, 512.0f);
}

// Clipping sees unscaled gradients: the torch.optim + clip_grad_norm_ trajectory of the parity
// fixture is reproduced in fp16 AMP with dynamic scaling (2^16) within fp16's accuracy. Clipping
// the scaled gradients would shrink every update by the scale and leave the loss flat.
TEST(AmpClip, ClipsUnscaledGradients) {
  pb::TrainConfig c = traintest::LoadConfig("sgd_clip.textproto");
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::FP16);
  c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::DYNAMIC);
  std::unique_ptr<Trainer> t = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(t, nullptr);
  const Tensor want = LoadNpz("sgd_clip.npz").at("loss");
  for (int64_t s = 0; s < want.numel(); ++s) {
    auto r = t->Step(MlpBatch());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->skipped);
    EXPECT_EQ(r->loss_scale, 65536.0f);
    EXPECT_NEAR(r->loss, want.GetDouble(s), 1e-2 * want.GetDouble(s)) << "step " << s;
  }
}

// --- gradient accumulation ----------------------------------------------------------------------

class Accumulation : public testing::TestWithParam<pb::OptimizerConfig::Kind> {};

TEST_P(Accumulation, TwoHalfBatchesEqualOneFullBatch) {
  pb::TrainConfig c = Fp32Config();
  c.mutable_optimizer()->set_kind(GetParam());
  c.mutable_optimizer()->set_lr(0.05);
  c.mutable_optimizer()->set_momentum(0.9);  // used by SGD only
  std::unique_ptr<Trainer> full = MakeTrainer("mlp.onnx", c);
  c.set_accumulate(2);
  std::unique_ptr<Trainer> acc = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(full, nullptr);
  ASSERT_NE(acc, nullptr);
  Batch b = MlpBatch();
  Batch lo, hi;
  for (const auto& [k, v] : b) {
    lo.emplace(k, Slice0(v, 0, 8));
    hi.emplace(k, Slice0(v, 8, 16));
  }
  for (int step = 0; step < 3; ++step) {
    auto before = *acc->State();
    auto f = full->Step(b);
    auto a1 = acc->Step(lo);
    ASSERT_TRUE(f.ok() && a1.ok());
    // The first micro-batch only accumulates: parameters, moments and step counter unchanged.
    auto mid = *acc->State();
    for (const auto& [name, v] : before) {
      if (name.rfind("accum/", 0) != 0) {
        EXPECT_TRUE(v.Identical(mid.at(name))) << name << " changed before the update";
      }
    }
    auto a2 = acc->Step(hi);
    ASSERT_TRUE(a2.ok());
    // Mean loss: the mean of two equal halves is the full-batch mean.
    EXPECT_NEAR(0.5 * (a1->loss + a2->loss), f->loss, 1e-6 * std::fabs(f->loss)) << "step " << step;
    EXPECT_EQ(a1->lr, f->lr);
  }
  auto fs = *full->State();
  auto as = *acc->State();
  EXPECT_EQ(ScalarI(as, kStepName), 3);
  for (const std::string& p : full->ParameterNames())
    EXPECT_LE(traintest::WorstRatio(as.at(p), fs.at(p), 1e-5, 1e-6), 1.0) << p;
  // The accumulators are reset after each update.
  for (const auto& [name, v] : as) {
    if (name.rfind("accum/", 0) == 0) {
      EXPECT_EQ(Norm(v), 0.0) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Accumulation,
                         testing::Values(pb::OptimizerConfig::SGD, pb::OptimizerConfig::ADAM),
                         [](const testing::TestParamInfo<pb::OptimizerConfig::Kind>& i) {
                           return pb::OptimizerConfig::Kind_Name(i.param);
                         });

// Parameters named like the accumulation's constants ("zero", "inv_n") keep their accumulators'
// names (accum/zero, accum/inv_n: what checkpoints store) and train as without accumulation;
// the step used to abort adding a second initializer of the same name.
TEST(AccumulationNames, ParametersNamedLikeItsConstantsTrain) {
  auto make = [](int accumulate) {
    auto g = std::make_unique<Graph>();
    g->opset_imports[""] = 17;
    Value* x = g->AddValue("x", DType::kF32, Shape(std::vector<Dim>{Dim::Symbol("N"), Dim(3)}));
    g->AddInput(x);
    Value* w = g->AddInitializer("zero", Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, -2, 0.5f, 3, -1, 2}));
    Value* b = g->AddInitializer("inv_n", Tensor::FromVector<float>(DType::kF32, {2}, {0.25f, -0.5f}));
    Value* xw = g->AddNode("MatMul", {x, w}, 1, "mm")->output(0);
    g->AddOutput(g->AddNode("Add", {xw, b}, 1, "bias")->output(0));
    pb::TrainConfig c = Fp32Config();
    c.set_loss("mse");
    c.set_accumulate(accumulate);
    c.mutable_optimizer()->set_kind(pb::OptimizerConfig::SGD);
    c.mutable_optimizer()->set_lr(0.1);
    auto t = Trainer::CreateFromGraph(std::move(g), c);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  };
  std::unique_ptr<Trainer> full = make(1), acc = make(2);
  ASSERT_NE(full, nullptr);
  ASSERT_NE(acc, nullptr);
  Batch b;
  b.emplace("x", Tensor::FromVector<float>(DType::kF32, {4, 3}, {1, 2, 3, -1, 0, 1, 2, -2, 1, 0.5f, 1, -1}));
  b.emplace("labels", Tensor::FromVector<float>(DType::kF32, {4, 2}, {1, 0, 0, 1, 2, -1, 0.5f, 0.5f}));
  Batch lo, hi;
  for (const auto& [k, v] : b) {
    lo.emplace(k, Slice0(v, 0, 2));
    hi.emplace(k, Slice0(v, 2, 4));
  }
  ASSERT_TRUE(full->Step(b).ok());
  ASSERT_TRUE(acc->Step(lo).ok());
  ASSERT_TRUE(acc->Step(hi).ok());
  auto fs = *full->State();
  auto as = *acc->State();
  EXPECT_TRUE(as.contains("accum/zero"));
  EXPECT_TRUE(as.contains("accum/inv_n"));
  for (const char* p : {"zero", "inv_n"}) EXPECT_LE(traintest::WorstRatio(as.at(p), fs.at(p), 1e-5, 1e-6), 1.0) << p;
  // And it trained: the update moved the weight.
  EXPECT_FALSE(as.at("zero").Identical(Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, -2, 0.5f, 3, -1, 2})));
}

// An inf in the first micro-batch poisons the accumulated gradient: the update at the second
// (applying) micro-batch is skipped, the scale backs off once, and the accumulators restart clean.
TEST(AccumulationOverflow, InAMicroBatchSkipsTheUpdate) {
  pb::TrainConfig c = Fp16Config(pb::LossScalerConfig::DYNAMIC);
  c.set_accumulate(2);
  std::unique_ptr<Trainer> t = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(t, nullptr);
  auto before = *t->State();
  const float scale = ScalarF(before, kLossScaleName);
  auto r1 = t->Step(Poisoned(std::numeric_limits<float>::infinity()));
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(ScalarF(*t->State(), kLossScaleName), scale) << "the scaler moves only on applying micro-batches";
  auto r2 = t->Step(MlpBatch());
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(r2->skipped);
  auto after = *t->State();
  EXPECT_EQ(ScalarF(after, kLossScaleName), scale * 0.5f);
  EXPECT_EQ(ScalarI(after, kStepName), 0);
  for (const std::string& p : t->ParameterNames()) EXPECT_TRUE(before.at(p).Identical(after.at(p))) << p;
  for (const auto& [name, v] : after) {
    if (name.rfind("accum/", 0) == 0) {
      EXPECT_EQ(Norm(v), 0.0) << name;
    }
  }
  // The next two clean micro-batches update normally.
  ASSERT_TRUE(t->Step(MlpBatch()).ok());
  auto r4 = t->Step(MlpBatch());
  ASSERT_TRUE(r4.ok());
  EXPECT_FALSE(r4->skipped);
  EXPECT_EQ(ScalarI(*t->State(), kStepName), 1);
}

// --- resume -------------------------------------------------------------------------------------

// Batches drawn from a fixed generator, one per step.
Batch RandomBatch(int step) {
  std::mt19937 rng(1000 + step);
  std::normal_distribution<float> n(0, 1);
  Tensor x(DType::kF32, {16, 8});
  Tensor y(DType::kI64, {16});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = n(rng);
  for (int64_t i = 0; i < 16; ++i) y.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 4);
  return {{"x", x}, {"labels", y}};
}

TEST(Resume, CheckpointContinuesBitIdentically) {
  // fp16 AMP with dynamic scaling (the scaler grows every 2 steps), Adam, a cosine schedule:
  // every kind of state (weights, moments, step counter, scale, good steps, calls) must survive.
  pb::TrainConfig c = Fp16Config(pb::LossScalerConfig::DYNAMIC);
  c.mutable_loss_scaler()->set_growth_interval(2);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAMW);
  c.mutable_optimizer()->set_lr(0.01);
  c.mutable_schedule()->set_kind(pb::ScheduleConfig::COSINE);
  c.mutable_schedule()->set_warmup_steps(2);
  c.set_steps(10);
  const int n = 5;
  std::unique_ptr<Trainer> straight = MakeTrainer("mlp.onnx", c);
  std::unique_ptr<Trainer> first = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(straight, nullptr);
  ASSERT_NE(first, nullptr);
  std::vector<float> losses;
  for (int s = 0; s < 2 * n; ++s) losses.push_back(straight->Step(RandomBatch(s))->loss);
  for (int s = 0; s < n; ++s) ASSERT_EQ(first->Step(RandomBatch(s))->loss, losses[s]);
  const std::string path = testing::TempDir() + "/amp_resume." + std::to_string(getpid()) + ".ckpt";
  ASSERT_TRUE(first->SaveCheckpoint(path, 0, n).ok());
  first.reset();
  std::unique_ptr<Trainer> second = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(second, nullptr);
  auto pos = second->LoadCheckpoint(path);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(pos->second, n);
  EXPECT_EQ(second->calls(), n);
  for (int s = n; s < 2 * n; ++s) {
    auto r = second->Step(RandomBatch(s));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->loss, losses[s]) << "step " << s;
  }
  ExpectSameState(*straight->State(), *second->State());
  EXPECT_GT(ScalarF(second->State().value(), kLossScaleName), c.loss_scaler().init_scale());
  std::filesystem::remove(path);
}

TEST(Resume, RejectsACheckpointOfAnotherConfig) {
  std::unique_ptr<Trainer> adam = MakeTrainer("mlp.onnx", Fp32Config());  // Adam by default
  pb::TrainConfig c = Fp32Config();
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::SGD);
  std::unique_ptr<Trainer> sgd = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(adam, nullptr);
  ASSERT_NE(sgd, nullptr);
  const std::string path = testing::TempDir() + "/amp_resume_sgd." + std::to_string(getpid()) + ".ckpt";
  ASSERT_TRUE(sgd->SaveCheckpoint(path).ok());
  auto r = adam->LoadCheckpoint(path);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("optimizer.kind is SGD in the checkpoint, ADAM in this run"),
            std::string::npos) << r.status();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mixtrain
