// Training with LoRA adapters (passes/lora.h) through the Trainer: the model's weights get no
// gradient and no optimizer state, checkpoints hold the adapters and their moments only, and the
// adapter file (ExportAdapters) continues a run through lora_init.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "graph/onnx_import.h"
#include "runtime/npy.h"
#include "runtime/trainer.h"

namespace mixtrain {
namespace {

const std::string kZoo = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/";

pb::TrainConfig Config() {
  pb::TrainConfig c;
  c.set_class_axis(-1);
  c.set_device("cpu");
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::FP32);
  c.mutable_optimizer()->set_lr(1e-2f);
  c.set_lora_rank(4);
  return c;
}

std::map<std::string, Tensor> Batch() {
  auto npz = ReadNpz(kZoo + "gpt2_hf.npz");
  EXPECT_TRUE(npz.ok()) << npz.status();
  return {{"input_ids", npz->at("input_ids")}, {"labels", npz->at("labels")}};
}

std::string Temp(const std::string& what) {
  return testing::TempDir() + "/lora_" + what + "." + std::to_string(getpid());
}

bool IsAdapter(const std::string& name) {
  return name.size() > 7 && (name.ends_with(".lora_A") || name.ends_with(".lora_B"));
}

TEST(LoraTrainer, OnlyAdaptersHaveStateAndCheckpointsHoldNoBaseWeight) {
  auto t = Trainer::Create(kZoo + "gpt2_hf.onnx", Config());
  ASSERT_TRUE(t.ok()) << t.status();
  for (const std::string& p : (*t)->ParameterNames()) EXPECT_TRUE(IsAdapter(p)) << p;
  EXPECT_EQ((*t)->ParameterNames().size(), 16u);
  const auto batch = Batch();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*t)->Step(batch).ok());
  auto state = (*t)->State();
  ASSERT_TRUE(state.ok());
  auto model = ImportOnnxFile(kZoo + "gpt2_hf.onnx");
  ASSERT_TRUE(model.ok());
  int moments = 0;
  for (const Value* w : (*model)->initializers()) {
    EXPECT_FALSE(state->contains(w->name)) << w->name;
    EXPECT_FALSE(state->contains("adam.m/" + w->name)) << "optimizer state of a base weight: " << w->name;
  }
  for (const auto& [name, tensor] : *state)
    if (name.starts_with("adam.m/")) {
      EXPECT_TRUE(IsAdapter(name.substr(7))) << name;
      ++moments;
    }
  EXPECT_EQ(moments, 16);

  const std::string ck = Temp("ck");
  ASSERT_TRUE((*t)->SaveCheckpoint(ck).ok());
  std::ifstream f(ck, std::ios::binary);
  std::stringstream bytes;
  bytes << f.rdbuf();
  auto decoded = DecodeCheckpoint(bytes.str(), ck);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  for (const auto& s : decoded->state()) EXPECT_EQ((*model)->FindValue(s.name()), nullptr) << s.name();

  // Resumed, the run continues exactly as the uninterrupted one.
  auto resumed = Trainer::Create(kZoo + "gpt2_hf.onnx", Config());
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->LoadCheckpoint(ck).ok());
  auto a = (*t)->Step(batch);
  auto b = (*resumed)->Step(batch);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->loss, b->loss);
  std::remove(ck.c_str());
}

TEST(LoraTrainer, AdapterFileContinuesTheRunAndMatchesTheMergedExport) {
  auto t = Trainer::Create(kZoo + "gpt2_hf.onnx", Config());
  ASSERT_TRUE(t.ok()) << t.status();
  const auto batch = Batch();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*t)->Step(batch).ok());
  const std::string adapters = Temp("adapters") + ".onnx";
  ASSERT_TRUE((*t)->ExportAdapters(adapters).ok());

  pb::TrainConfig again = Config();
  again.set_lora_init(adapters);
  auto cont = Trainer::Create(kZoo + "gpt2_hf.onnx", again);
  ASSERT_TRUE(cont.ok()) << cont.status();
  for (const std::string& p : (*t)->ParameterNames()) {
    auto x = (*t)->GetParameter(p);
    auto y = (*cont)->GetParameter(p);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_TRUE(x->Identical(*y)) << p;
  }
  // The evaluation with adapters equals the merged model's (trained from the merged export).
  auto with = (*t)->Evaluate(batch);
  const std::string merged = Temp("merged") + ".onnx";
  ASSERT_TRUE((*t)->ExportInferenceModel(merged).ok());
  pb::TrainConfig plain = Config();
  plain.set_lora_rank(0);
  auto m = Trainer::Create(merged, plain);
  ASSERT_TRUE(m.ok()) << m.status();
  auto without = (*m)->Evaluate(batch);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_NEAR(with->loss_sum, without->loss_sum, 1e-4 * std::fabs(with->loss_sum));

  // Without adapters there is nothing to write.
  EXPECT_FALSE((*m)->ExportAdapters(Temp("none") + ".onnx").ok());
  std::remove(adapters.c_str());
  std::remove(merged.c_str());
}

}  // namespace
}  // namespace mixtrain
