// gather_grad_accumulates (kernels/cpu/passes/gather_grad_accumulates.cc): on transformers' GPT-2
// through both torch exporters (its token embedding is also its classifier), the embedding's
// gradient is scatter-added into the classifier's in place (one GatherGradAdd, no GatherGrad of
// the whole table and no Add), and the step updates every weight as the step without the pass
// does, to the rounding of the sum's order; fp32 and bf16 AMP.
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/passes/inference_test_util.h"
#include "tests/passes/target_pass_test_util.h"

namespace mixtrain {
namespace {

using inference_test::Count;
using inference_test::RunGraph;

struct Case {
  const char* model;
  pb::PrecisionPolicy::Preset preset;
};

std::unique_ptr<Graph> Step(const Case& c, bool with_pass) {
  pb::TrainConfig tc;
  tc.set_class_axis(-1);
  tc.mutable_precision()->set_preset(c.preset);
  tc.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::BF16);
  tc.mutable_optimizer()->set_kind(pb::OptimizerConfig::SGD);
  tc.mutable_optimizer()->set_lr(1.0);
  return target_pass_test::TrainingStep(c.model, tc, with_pass ? nullptr : "gather_grad_accumulates");
}

class GatherGradAccumulates : public ::testing::TestWithParam<Case> {};

TEST_P(GatherGradAccumulates, TiedEmbeddingGradientAddsInPlaceWithTheSameStep) {
  std::unique_ptr<Graph> with = Step(GetParam(), true), without = Step(GetParam(), false);
  ASSERT_NE(with, nullptr);
  ASSERT_NE(without, nullptr);
  EXPECT_EQ(Count(*with, "GatherGradAdd"), 1);
  EXPECT_EQ(Count(*without, "GatherGradAdd"), 0);
  EXPECT_EQ(Count(*with, "GatherGrad") + 1, Count(*without, "GatherGrad"));
  // The fused node reads the classifier's gradient, of the table's shape, and writes the sum.
  for (const auto& n : with->nodes()) {
    if (n->op_type() != "GatherGradAdd") continue;
    EXPECT_EQ(n->input(0)->shape, n->output(0)->shape);
    EXPECT_NE(n->input(0)->producer, nullptr);
  }

  // Token inputs only, besides the learning rate.
  for (const Value* in : with->inputs())
    if (!in->is_initializer() && !(in->dtype == DType::kF32 && in->shape.rank_known && in->shape.rank() == 0))
      ASSERT_EQ(in->dtype, DType::kI64) << in->name;
  const std::map<std::string, Tensor> feeds = target_pass_test::StepFeeds(*with, 4, 64, 5);  // the zoo's vocabulary
  const std::vector<Tensor> a = RunGraph(*with, feeds), b = RunGraph(*without, feeds);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  int compared = 0;
  for (size_t o = 0; o < a.size(); ++o) {
    const std::string& name = with->outputs()[o]->name;
    ASSERT_EQ(name, without->outputs()[o]->name);
    ASSERT_EQ(a[o].dims(), b[o].dims()) << name;
    if (a[o].dtype() != DType::kF32) continue;
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < a[o].numel(); ++i) {
      worst = std::max(worst, std::fabs(a[o].GetDouble(i) - b[o].GetDouble(i)));
      scale = std::max(scale, std::fabs(b[o].GetDouble(i)));
    }
    EXPECT_LE(worst, 1e-5 * std::max(scale, 1e-3)) << name;
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

INSTANTIATE_TEST_SUITE_P(
    Exports, GatherGradAccumulates,
    ::testing::Values(Case{"tests/data/zoo/gpt2_hf.onnx", pb::PrecisionPolicy::FP32},
                      Case{"tests/data/zoo/gpt2_hf.onnx", pb::PrecisionPolicy::AMP},
                      Case{"tests/data/zoo/gpt2_hf_ts.onnx", pb::PrecisionPolicy::FP32},
                      Case{"tests/data/zoo/gpt2_hf_ts.onnx", pb::PrecisionPolicy::AMP}),
    [](const auto& info) {
      return std::string(std::string(info.param.model).find("_ts") != std::string::npos ? "torchscript" : "dynamo") +
             (info.param.preset == pb::PrecisionPolicy::FP32 ? "_fp32" : "_bf16");
    });

}  // namespace
}  // namespace mixtrain
