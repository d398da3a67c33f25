// One pipeline: the graph `mixtrain dump --passes=train` (TransformModel) prints is, node for
// node, the training step a Trainer runs (Trainer::TransformedGraph), for every model in models/
// in fp32, bf16 AMP and fp16 AMP (with dynamic loss scaling), and for zoo exports that
// canonicalization rewrites, one with LoRA adapters. Both come from passes/pipeline.h.
#include <gtest/gtest.h>

#include <string>

#include "mixtrain/mixtrain.h"

namespace mixtrain {
namespace {

struct Case {
  const char* model;  // relative to the source root
  int class_axis;
  int lora_rank = 0;  // > 0: with LoRA adapters (docs/lora.md)
};

void ExpectSameGraph(const Case& m, TrainConfig::Precision::Preset preset, TrainConfig::Precision::LowType low) {
  const std::string path = std::string(MT_SOURCE_DIR) + "/" + m.model;
  SCOPED_TRACE(path);
  TrainConfig c;
  c.class_axis = m.class_axis;
  c.precision.preset = preset;
  c.precision.low_dtype = low;
  c.lora_rank = m.lora_rank;
  auto trainer = Trainer::Create(path, c);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto ran = (*trainer)->TransformedGraph();
  ASSERT_TRUE(ran.ok()) << ran.status();
  TransformOptions o;
  o.train_config = c;
  o.passes = {"train"};
  auto dumped = TransformModel(path, o);
  ASSERT_TRUE(dumped.ok()) << dumped.status();
  // The graph's text, then the precision report, in both.
  EXPECT_EQ(dumped->graph, *ran);
  EXPECT_NE(ran->find("precision"), std::string::npos);
  EXPECT_NE(ran->find("grad/"), std::string::npos);
  EXPECT_EQ(ran->find(".lora_A") != std::string::npos, m.lora_rank > 0);
  // And `eval` is a different graph: no gradients.
  o.passes = {"eval"};
  auto eval = TransformModel(path, o);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->graph.find("grad/"), std::string::npos);
}

class OnePipeline : public ::testing::TestWithParam<Case> {};

TEST_P(OnePipeline, DumpShowsWhatTrainRuns) {
  using P = TrainConfig::Precision;
  ExpectSameGraph(GetParam(), P::Preset::kFp32, P::LowType::kAuto);
  ExpectSameGraph(GetParam(), P::Preset::kAmp, P::LowType::kBf16);
  ExpectSameGraph(GetParam(), P::Preset::kAmp, P::LowType::kFp16);
}

TEST(OnePipeline, TrainAndEvalStandAlone) {
  TransformOptions o;
  o.passes = {"train", "cleanup"};
  auto r = TransformModel(std::string(MT_SOURCE_DIR) + "/models/mlp.onnx", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("alone"), std::string::npos) << r.status();
}

INSTANTIATE_TEST_SUITE_P(Models, OnePipeline,
                         ::testing::Values(Case{"models/mlp.onnx", 1}, Case{"models/fashion_cnn.onnx", 1},
                                           Case{"models/resnet_mini.onnx", 1}, Case{"models/gpt_mini.onnx", -1},
                                           Case{"tests/data/zoo/tfm_encoder_dyn.onnx", 1},
                                           Case{"tests/data/zoo/resnet10t_timm.onnx", 1},
                                           Case{"tests/data/zoo/llama_hf.onnx", -1, 4}),
                         [](const auto& info) {
                           std::string n = info.param.model;
                           n = n.substr(n.rfind('/') + 1);
                           return n.substr(0, n.find('.'));
                         });

}  // namespace
}  // namespace mixtrain
