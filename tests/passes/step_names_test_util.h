// Helpers of the VerifyStepNames tests (step_names_test.cc: real steps obey the conventions;
// step_names_broken_test.cc: each rule broken): the models, the configurations, steps built once
// per binary, and the ways to find and break their parts.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "graph/check.h"
#include "graph/onnx_import.h"
#include "kernels/backend.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "passes/step_names.h"
#include "passes/training.h"

namespace mixtrain::step_names_test {

inline const std::string kModels = std::string(MT_SOURCE_DIR) + "/models/";

struct Model {
  std::string name;  // models/<name>.onnx
  int class_axis;
};
inline void PrintTo(const Model& m, std::ostream* os) { *os << m.name; }
inline const Model kMlp{"mlp", 1}, kFashionCnn{"fashion_cnn", 1}, kGptMini{"gpt_mini", -1}, kResnetMini{"resnet_mini", 1};
inline const Model kAllModels[] = {kMlp, kFashionCnn, kGptMini, kResnetMini};

enum class Precision { kFp32, kBf16, kFp16 };

// --- the one place this test depends on how the pipeline is told its target ----------------
// The CPU backend's target, or (`gpu`) one without its passes, as a CUDA device's step is built
// (ONNX's conv layouts, the Casts of the weight gradients kept). Every configuration here names
// its dtype, so native_bf16 decides nothing.
inline Target TestTarget(bool gpu) {
  Target target = CpuBackend().target();
  target.caps.native_bf16 = true;
  if (gpu) {
    target.name = "cuda";
    target.training_passes.clear();
  }
  return target;
}
inline absl::StatusOr<TrainingRecipe> Recipe(const pb::TrainConfig& c, const Graph& model, bool gpu) {
  return ResolveTrainingRecipe(c, model, TestTarget(gpu));
}
// As ComputeGradients builds its gradient graph.
inline void SetTarget(GradientGraphOptions& o) { o.autodiff.evaluator = TestTarget(false).evaluator; }
// --- end of the target-dependent part ----------------------------------------------------------

// models/<m>.onnx imported, prepared and built into a training step as the trainer builds it.
inline absl::StatusOr<std::unique_ptr<Graph>> BuildStep(const Model& m, pb::TrainConfig c, bool gpu = false) {
  c.set_class_axis(m.class_axis);
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(kModels + m.name + ".onnx"));
  MT_ASSIGN_OR_RETURN(TrainingRecipe r, Recipe(c, *g, gpu));
  MT_RETURN_IF_ERROR(PrepareModel(*g, r));
  MT_RETURN_IF_ERROR(BuildTrainingStep(*g, r).status());
  return g;
}

inline pb::TrainConfig Config(Precision p, const std::string& recompute = "none") {
  pb::TrainConfig c;
  pb::PrecisionPolicy* pp = c.mutable_precision();
  switch (p) {
    case Precision::kFp32: pp->set_preset(pb::PrecisionPolicy::FP32); break;
    case Precision::kBf16:
      pp->set_preset(pb::PrecisionPolicy::AMP);
      pp->set_low_dtype(pb::PrecisionPolicy::BF16);
      break;
    case Precision::kFp16:
      pp->set_preset(pb::PrecisionPolicy::AMP);
      pp->set_low_dtype(pb::PrecisionPolicy::FP16);
      c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::DYNAMIC);
      break;
  }
  c.set_recompute(recompute);
  return c;
}

// Everything the step can hold at once: fp16 with dynamic scaling, accumulation, clipping, data
// parallel, the precision debugger, recompute.
inline pb::TrainConfig Everything() {
  pb::TrainConfig c = Config(Precision::kFp16, "all");
  c.set_accumulate(3);
  c.mutable_optimizer()->set_clip_grad_norm(1.0f);
  c.set_data_parallel(true);
  c.set_debug_precision(1);
  return c;
}

// Steps built once per test binary (by key: one key, one configuration); tests that break one
// take a copy. Null, with a failure, when the pipeline refuses the configuration.
inline const Graph* Cached(const std::string& key, const Model& m, const pb::TrainConfig& c, bool gpu = false) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Graph>>();
  auto it = cache->find(key);
  if (it == cache->end()) {
    absl::StatusOr<std::unique_ptr<Graph>> g = BuildStep(m, c, gpu);
    if (!g.ok()) {
      ADD_FAILURE() << key << ": " << g.status();
      return nullptr;
    }
    it = cache->emplace(key, std::move(*g)).first;
  }
  return it->second.get();
}

// A copy of a built step that VerifyStepNames accepts, to break (mlp with everything on, or gpt_mini
// with everything on where recompute must find segments).
inline std::unique_ptr<Graph> StepToBreak(const Model& m = kMlp, const pb::TrainConfig& c = Everything(),
                                   const std::string& key = "mlp/everything") {
  const Graph* built = Cached(key, m, c);
  if (built == nullptr) return std::make_unique<Graph>();
  std::unique_ptr<Graph> g = built->Clone();
  absl::Status st = VerifyStepNames(*g);
  EXPECT_TRUE(st.ok()) << "before breaking it: " << st;
  return g;
}
inline std::unique_ptr<Graph> GptStepToBreak() { return StepToBreak(kGptMini, Everything(), "gpt_mini/everything"); }

// The gradient graph of models/<m>.onnx (what `mixtrain grad` builds): it keeps its grad/ outputs.
inline std::unique_ptr<Graph> GradientGraph(const Model& m) {
  auto model = ImportOnnxFile(kModels + m.name + ".onnx");
  MT_CHECK(model.ok()) << model.status();
  GradientGraphOptions o;
  o.loss.class_axis = m.class_axis;
  SetTarget(o);
  auto g = BuildGradientGraph(**model, o);
  MT_CHECK(g.ok()) << g.status();
  return std::move(*g);
}

inline int CountPhase(const Graph& g, StepPhase p) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(),
                                        [&](const auto& n) { return PhaseOf(*n) == p; }));
}

inline Node* FirstOfPhase(const Graph& g, StepPhase p, const std::string& op = "") {
  for (const auto& n : g.nodes())
    if (PhaseOf(*n) == p && (op.empty() || n->op_type() == op)) return n.get();
  return nullptr;
}

// A forward node reading a float activation (an output of another forward node): input `*index`.
inline Node* ForwardReader(const Graph& g, size_t* index) {
  for (const auto& n : g.nodes()) {
    if (PhaseOf(*n) != StepPhase::kForward || IsStateWriteBack(g, *n)) continue;
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      const Value* in = n->input(i);
      if (in != nullptr && in->producer != nullptr && PhaseOf(*in->producer) == StepPhase::kForward &&
          IsFloat(in->dtype)) {
        *index = i;
        return n.get();
      }
    }
  }
  return nullptr;
}

inline Value* Output(const Graph& g, const std::string& name) {
  for (Value* v : g.outputs())
    if (v->name == name) return v;
  return nullptr;
}

inline void ExpectBroken(const Graph& g, const std::vector<std::string>& fragments) {
  absl::Status st = VerifyStepNames(g);
  ASSERT_FALSE(st.ok()) << "VerifyStepNames accepted the broken step";
  for (const std::string& f : fragments) EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr(f));
}

}  // namespace mixtrain::step_names_test
