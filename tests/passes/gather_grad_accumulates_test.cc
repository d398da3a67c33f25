// gather_grad_accumulates (kernels/cpu/passes/gather_grad_accumulates.cc): on transformers' GPT-2
// through both torch exporters (its token embedding is also its classifier), the embedding's
// gradient is scatter-added into the classifier's in place (one GatherGradAdd, no GatherGrad of
// the whole table and no Add), and the step updates every weight as the step without the pass
// does, to the rounding of the sum's order; fp32 and bf16 AMP.
#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "graph/onnx_import.h"
#include "kernels/backend.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using inference_test::RunGraph;

struct Case {
  const char* model;
  pb::PrecisionPolicy::Preset preset;
};

std::unique_ptr<Graph> Step(const Case& c, bool with_pass) {
  auto g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/" + c.model);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  pb::TrainConfig tc;
  tc.set_class_axis(-1);
  tc.mutable_precision()->set_preset(c.preset);
  tc.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::BF16);
  tc.mutable_optimizer()->set_kind(pb::OptimizerConfig::SGD);
  tc.mutable_optimizer()->set_lr(1.0);
  Target t = CpuBackend().target();
  if (!with_pass)
    std::erase_if(t.training_passes, [](const TargetTrainingPass& p) { return p.name == "gather_grad_accumulates"; });
  auto recipe = ResolveTrainingRecipe(tc, **g, t);
  EXPECT_TRUE(recipe.ok()) << recipe.status();
  EXPECT_TRUE(PrepareModel(**g, *recipe).ok());
  auto params = BuildTrainingStep(**g, *recipe);
  EXPECT_TRUE(params.ok()) << params.status();
  return std::move(*g);
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type() == op;
  return n;
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

  std::map<std::string, Tensor> feeds;
  std::mt19937 rng(5);
  for (const Value* in : with->inputs()) {
    if (in->is_initializer()) continue;
    std::vector<int64_t> dims;
    for (const Dim& d : in->shape.dims) dims.push_back(d.known() ? d.value : 4);
    if (in->dtype == DType::kF32 && dims.empty()) {
      feeds[in->name] = Tensor::Scalar(0.5f);  // lr
      continue;
    }
    ASSERT_EQ(in->dtype, DType::kI64) << in->name;
    Tensor t(DType::kI64, dims);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int64_t>()[i] = rng() % 64;  // the zoo's vocabulary
    feeds[in->name] = std::move(t);
  }
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
