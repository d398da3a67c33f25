// Trainer::Evaluate's metrics through the public API: a language model's N x T x V logits are
// scored at every position (the README's LM recipe once read 0% here, counting only rank-2
// logits), and a regression model reports errors, not an accuracy.
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::EvalResult;
using mixtrain::HostTensor;
using mixtrain::TensorMap;

double Metric(const EvalResult& e, const std::string& name) {
  for (const auto& [n, v] : e.Metrics())
    if (n == name) return v;
  ADD_FAILURE() << "no metric '" << name << "'";
  return -1;
}

bool HasMetric(const EvalResult& e, const std::string& name) {
  for (const auto& [n, v] : e.Metrics())
    if (n == name) return true;
  return false;
}

// A copy task for models/gpt_mini.onnx (V = 256, T = 32): the label at each position is the token
// there, which a causal model learns quickly; chance is 1/256.
TEST(EvaluateMetricsTest, LanguageModelAccuracyCountsEveryToken) {
  mixtrain::TrainConfig c;
  c.precision.preset = mixtrain::TrainConfig::Precision::Preset::kFp32;
  c.class_axis = -1;
  c.optimizer.lr = 1e-2f;
  auto t = mixtrain::Trainer::Create(std::string(MT_SOURCE_DIR) + "/models/gpt_mini.onnx", c);
  ASSERT_TRUE(t.ok()) << t.status();
  std::mt19937 rng(3);
  std::vector<int64_t> tokens(8 * 32);
  for (int64_t& x : tokens) x = std::uniform_int_distribution<int64_t>(0, 255)(rng);
  const std::string input = (*t)->BatchInputs().at(0).name;
  TensorMap batch{{input, *HostTensor::FromVector<int64_t>({8, 32}, tokens)},
                  {"labels", *HostTensor::FromVector<int64_t>({8, 32}, tokens)}};

  auto before = (*t)->Evaluate(batch);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->task, EvalResult::Task::kClassification);
  EXPECT_EQ(before->examples, 8);
  EXPECT_EQ(before->positions, 8 * 32);
  EXPECT_EQ(before->classes, 256);
  EXPECT_LT(Metric(*before, "top1"), 0.1);
  for (int i = 0; i < 25; ++i) ASSERT_TRUE((*t)->Step(batch, {.read_loss = false}).ok());
  auto after = (*t)->Evaluate(batch);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(Metric(*after, "top1"), 0.5) << "before " << Metric(*before, "top1");
  EXPECT_GE(Metric(*after, "top5"), Metric(*after, "top1"));
  EXPECT_NEAR(Metric(*after, "perplexity"), std::exp(Metric(*after, "loss")), 1e-9);
  EXPECT_LT(Metric(*after, "loss"), Metric(*before, "loss"));

  // Batches add up: two halves give the whole.
  EvalResult sum;
  for (int half = 0; half < 2; ++half) {
    std::vector<int64_t> part(tokens.begin() + half * 128, tokens.begin() + (half + 1) * 128);
    TensorMap b{{input, *HostTensor::FromVector<int64_t>({4, 32}, part)},
                {"labels", *HostTensor::FromVector<int64_t>({4, 32}, part)}};
    auto e = (*t)->Evaluate(b);
    ASSERT_TRUE(e.ok());
    sum += *e;
  }
  EXPECT_EQ(sum.positions, after->positions);
  EXPECT_EQ(sum.correct, after->correct);
  EXPECT_EQ(sum.correct_top5, after->correct_top5);
}

TEST(EvaluateMetricsTest, RegressionReportsErrorsNotAccuracy) {
  mixtrain::TrainConfig c;
  c.loss = "mse";
  c.precision.preset = mixtrain::TrainConfig::Precision::Preset::kFp32;
  auto t = mixtrain::Trainer::Create(std::string(MT_SOURCE_DIR) + "/models/mlp.onnx", c);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<mixtrain::TensorInfo> ins = (*t)->BatchInputs();
  ASSERT_EQ(ins.size(), 2u);
  std::vector<float> x(4 * 784, 0.5f);
  std::vector<float> y(4 * 10, 0.0f);
  TensorMap batch{{ins[0].name, *HostTensor::FromVector<float>({4, 784}, x)},
                  {ins[1].name, *HostTensor::FromVector<float>({4, 10}, y)}};
  auto e = (*t)->Evaluate(batch);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->task, EvalResult::Task::kRegression);
  EXPECT_FALSE(HasMetric(*e, "top1"));
  EXPECT_EQ(e->positions, 40);
  // With zero targets, MSE's loss is the mean squared output: RMSE^2 equals it.
  EXPECT_NEAR(Metric(*e, "rmse") * Metric(*e, "rmse"), Metric(*e, "loss"), 1e-5 * Metric(*e, "loss"));
  EXPECT_GE(Metric(*e, "rmse"), Metric(*e, "mae"));
}

}  // namespace
