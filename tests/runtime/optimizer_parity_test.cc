// Optimizer parity with PyTorch: 10-step trajectories of torch.optim (SGD plain / momentum /
// Nesterov / weight decay, Adam with L2, AdamW, Adagrad, clip_grad_norm_, LR schedules applied
// during training) on a 2-layer MLP, fp32. Each step's loss and the final parameters must agree
// within 1e-4 relative. The LR schedules are also checked alone against StepLR,
// CosineAnnealingLR and LinearLR warmup. Fixtures: tests/data/make_optim_fixtures.py.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/runtime/train_test_util.h"

namespace mixtrain {
namespace {

using traintest::LoadConfig;
using traintest::LoadNpz;
using traintest::MakeTrainer;
using traintest::WorstRatio;

constexpr double kRtol = 1e-4;
// Parameters near zero: an absolute floor of 1e-4 of the parameters' typical size (~0.3).
constexpr double kParamAtol = 3e-5;

class OptimizerParity : public testing::TestWithParam<std::string> {};

TEST_P(OptimizerParity, TenStepsMatchTorchOptim) {
  const std::string name = GetParam();
  pb::TrainConfig c = LoadConfig(name + ".textproto");
  auto want = LoadNpz(name + ".npz");
  auto batch = LoadNpz("batch.npz");
  ASSERT_TRUE(want.contains("loss"));
  std::unique_ptr<Trainer> t = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(t, nullptr);
  const Tensor& losses = want.at("loss");
  const Tensor& lrs = want.at("lr");
  ASSERT_EQ(losses.numel(), c.steps());
  for (int64_t s = 0; s < c.steps(); ++s) {
    auto r = t->Step(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->skipped) << "step " << s;
    EXPECT_NEAR(r->lr, lrs.GetDouble(s), 1e-6 * lrs.GetDouble(s)) << "lr of step " << s;
    double l = losses.GetDouble(s);
    EXPECT_NEAR(r->loss, l, kRtol * std::fabs(l)) << "loss of step " << s;
  }
  int checked = 0;
  for (const std::string& p : t->ParameterNames()) {
    auto it = want.find(p);
    ASSERT_NE(it, want.end()) << "no expected value for parameter " << p;
    auto got = t->GetParameter(p);
    ASSERT_TRUE(got.ok()) << got.status();
    double worst = WorstRatio(*got, it->second, kRtol, kParamAtol);
    EXPECT_LE(worst, 1.0) << "parameter " << p << " after " << c.steps() << " steps";
    ++checked;
  }
  EXPECT_EQ(checked, 4);  // fc1/fc2 weight and bias
}

INSTANTIATE_TEST_SUITE_P(TorchOptim, OptimizerParity,
                         testing::Values("sgd", "sgd_momentum", "sgd_nesterov", "sgd_weight_decay",
                                         "adam", "adam_l2", "adamw", "adagrad",
                                         "adagrad_weight_decay", "sgd_clip", "adam_clip",
                                         "sgd_momentum_step_lr", "adam_warmup_cosine"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

class ScheduleParity : public testing::TestWithParam<std::string> {};

TEST_P(ScheduleParity, LearningRateMatchesTorchScheduler) {
  const std::string name = GetParam();
  pb::TrainConfig c = LoadConfig(absl::StrCat("schedule_", name, ".textproto"));
  auto want = LoadNpz("schedules.npz");
  ASSERT_TRUE(want.contains(name));
  const Tensor& lrs = want.at(name);
  ASSERT_EQ(lrs.numel(), c.steps());
  std::unique_ptr<Trainer> t = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(t, nullptr);
  for (int64_t u = 0; u < c.steps(); ++u)
    EXPECT_NEAR(t->LearningRate(u), lrs.GetDouble(u), 1e-6 * c.optimizer().lr()) << "update " << u;
}

// The cosine schedule's length is the run's number of updates: with accumulate = 2 a run of 40
// Step() calls makes 20 updates; a run bounded by epochs tells the trainer its length.
TEST(CosineSchedule, LengthIsCountedInUpdates) {
  pb::TrainConfig c = LoadConfig("schedule_cosine.textproto");
  const Tensor lrs = LoadNpz("schedules.npz").at("cosine");  // a copy: the map is a temporary
  c.set_accumulate(2);
  c.set_steps(2 * lrs.numel());
  std::unique_ptr<Trainer> acc = MakeTrainer("mlp.onnx", c);
  c.set_accumulate(1);
  c.set_steps(0);
  std::unique_ptr<Trainer> epochs = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(acc, nullptr);
  ASSERT_NE(epochs, nullptr);
  epochs->set_total_steps(lrs.numel());
  for (int64_t u = 0; u < lrs.numel(); ++u) {
    EXPECT_NEAR(acc->LearningRate(u), lrs.GetDouble(u), 1e-6 * c.optimizer().lr()) << "update " << u;
    EXPECT_NEAR(epochs->LearningRate(u), lrs.GetDouble(u), 1e-6 * c.optimizer().lr()) << "update " << u;
  }
}

INSTANTIATE_TEST_SUITE_P(TorchLrScheduler, ScheduleParity,
                         testing::Values("step", "cosine", "warmup_cosine", "warmup_constant"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace mixtrain
