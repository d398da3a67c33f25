// Helpers shared by the tests of the CPU backend's training-step passes (loss_reads_low,
// gather_grad_accumulates): the step BuildTrainingStep makes of a model with or without one of the
// target's passes, and feeds for it.
#pragma once

#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "graph/onnx_import.h"
#include "kernels/backend.h"
#include "passes/passes.h"
#include "passes/pipeline.h"

namespace mixtrain::target_pass_test {

// The training step of the model at `path` (under the source tree) for config `c` on this CPU's
// target, without its training pass `without` when that is not null.
inline std::unique_ptr<Graph> TrainingStep(const std::string& path, const pb::TrainConfig& c, const char* without) {
  auto g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/" + path);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  Target t = CpuBackend().target();
  if (without != nullptr)
    std::erase_if(t.training_passes, [&](const TargetTrainingPass& p) { return p.name == without; });
  auto recipe = ResolveTrainingRecipe(c, **g, t);
  EXPECT_TRUE(recipe.ok()) << recipe.status();
  EXPECT_TRUE(PrepareModel(**g, *recipe).ok());
  auto params = BuildTrainingStep(**g, *recipe);
  EXPECT_TRUE(params.ok()) << params.status();
  return std::move(*g);
}

// Feeds for a language model's step: the learning rate (the fp32 scalar input) 0.5, every other
// input int64 tokens in [0, vocab), symbolic dims `batch`.
inline std::map<std::string, Tensor> StepFeeds(const Graph& g, int64_t batch, int64_t vocab, uint32_t seed) {
  std::map<std::string, Tensor> feeds;
  std::mt19937 rng(seed);
  for (const Value* in : g.inputs()) {
    if (in->is_initializer()) continue;
    std::vector<int64_t> dims;
    for (const Dim& d : in->shape.dims) dims.push_back(d.known() ? d.value : batch);
    if (in->dtype == DType::kF32 && dims.empty()) {
      feeds[in->name] = Tensor::Scalar(0.5f);  // lr
      continue;
    }
    Tensor t(DType::kI64, dims);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % vocab);
    feeds[in->name] = std::move(t);
  }
  return feeds;
}

}  // namespace mixtrain::target_pass_test
