// loss_reads_low (kernels/cpu/passes/loss_reads_low.cc): under bf16 and fp16 AMP the CPU step's
// cross-entropy loss and gradient read the low-type logits (the loss written in fp32, the
// gradient in the logits' type), with no fp32 copy of the logits and no fp32 gradient; the step
// computes what the step without the pass computes: the same loss, and updated weights equal to
// rounding.
#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "graph/onnx_import.h"
#include "kernels/backend.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "tests/passes/inference_test_util.h"
#include "tests/passes/target_pass_test_util.h"

namespace mixtrain {
namespace {

using inference_test::RunGraph;

// gpt_mini's training step (SGD) for `low`, with or without the pass.
std::unique_ptr<Graph> Step(pb::PrecisionPolicy::LowType low, bool with_pass) {
  pb::TrainConfig c;
  c.set_class_axis(-1);
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(low);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::SGD);
  c.mutable_optimizer()->set_lr(1.0);
  c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::OFF);
  return target_pass_test::TrainingStep("models/gpt_mini.onnx", c, with_pass ? nullptr : "loss_reads_low");
}

const Node* LossGrad(const Graph& g) {
  for (const auto& n : g.nodes())
    if (n->op_type() == "SoftmaxCrossEntropyLossGrad") return n.get();
  return nullptr;
}

class LossReadsLow : public ::testing::TestWithParam<pb::PrecisionPolicy::LowType> {};

TEST_P(LossReadsLow, GradientReadsAndWritesTheLowTypeWithTheSameStep) {
  const DType low = GetParam() == pb::PrecisionPolicy::FP16 ? DType::kF16 : DType::kBF16;
  std::unique_ptr<Graph> with = Step(GetParam(), true), without = Step(GetParam(), false);
  ASSERT_NE(with, nullptr);
  ASSERT_NE(without, nullptr);
  const Node* grad = LossGrad(*with);
  ASSERT_NE(grad, nullptr);
  EXPECT_EQ(grad->input(1)->dtype, low);
  EXPECT_EQ(grad->output(0)->dtype, low);
  // The loss reads them too, written in fp32: nothing casts the logits to fp32 for it.
  const Node* loss = with->FindValue("loss")->producer;
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->op_type(), "SoftmaxCrossEntropyLoss");
  EXPECT_EQ(loss->domain(), "ai.mixtrain");
  EXPECT_EQ(loss->input(0), grad->input(1));
  EXPECT_EQ(with->FindValue("loss")->dtype, DType::kF32);
  const Node* before = LossGrad(*without);
  ASSERT_NE(before, nullptr);
  EXPECT_EQ(before->input(1)->dtype, DType::kF32);  // the pass is what changed it
  EXPECT_LT(with->num_nodes(), without->num_nodes());

  const std::map<std::string, Tensor> feeds = target_pass_test::StepFeeds(*with, 8, 256, 3);
  const std::vector<Tensor> a = RunGraph(*with, feeds), b = RunGraph(*without, feeds);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t o = 0; o < a.size(); ++o) {
    const std::string& name = with->outputs()[o]->name;
    ASSERT_EQ(name, without->outputs()[o]->name);
    ASSERT_EQ(a[o].dims(), b[o].dims()) << name;
    if (name == "loss") {
      EXPECT_EQ(a[o].GetDouble(0), b[o].GetDouble(0));  // the forward is untouched
      continue;
    }
    if (a[o].dtype() != DType::kF32) continue;
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < a[o].numel(); ++i) {
      worst = std::max(worst, std::fabs(a[o].GetDouble(i) - b[o].GetDouble(i)));
      scale = std::max(scale, std::fabs(b[o].GetDouble(i)));
    }
    // Updated weights w - 0.5 g: the gradients differ by the rounding of the softmax's sum at most.
    EXPECT_LE(worst, 1e-3 * std::max(scale, 1e-3)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(LowTypes, LossReadsLow,
                         ::testing::Values(pb::PrecisionPolicy::BF16, pb::PrecisionPolicy::FP16),
                         [](const auto& info) { return info.param == pb::PrecisionPolicy::FP16 ? "fp16" : "bf16"; });

}  // namespace
}  // namespace mixtrain
