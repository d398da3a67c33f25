// What the backend a graph is built for contributes to the pipelines (docs/architecture.md,
// "Backends"): what it can do and the passes it adds, as plain data. The passes layer defines it;
// each backend fills one in (kernels/cpu/backend.cc, kernels/cuda/backend.cc); the runtime and
// the API hand it to ResolveTrainingRecipe and OptimizeForInference and never look inside.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "passes/pass.h"

namespace mixtrain {

// Runs one node on host tensors with the kernels that execute graphs, so passes that fold
// constants (canonicalize, unroll_loop) compute what the graph would. Handed to those passes.
using HostEvaluator = absl::StatusOr<std::vector<Tensor>> (*)(const Node& node, int64_t opset,
                                                              const std::vector<const Tensor*>& inputs);

struct TargetCapabilities {
  // bf16 arithmetic at full speed: --dtype=auto picks bf16 AMP only where true.
  bool native_bf16 = false;
  // Products on bf16 operands can write fp32 results (what fp32_grad_products relies on).
  bool wide_output_products = false;
  // Channel-blocked conv and pool kernels for inference ([N, C/16, sp..., 16], AVX-512).
  bool channel_blocked = false;
  // The channel block of the training step's conv region (conv_layout_train): 16, 8 (oneDNN's
  // AVX2 fp32 kernels) or 0 (ONNX's layouts).
  int64_t training_channel_block = 0;
  // Records a step once and replays it whole (CUDA graphs).
  bool graph_recording = false;
  // Runs the ai.mixtrain ops the inference pipeline fuses into (FusedConv, FusedMatMul, ...):
  // sessions on it run OptimizeForInference, others the import alone.
  bool fused_inference = false;
};

// A pass the target adds to the training step; null where it does not apply to the step's low
// type (kF32 for an fp32 step).
using TrainingPassFactory = std::function<std::unique_ptr<Pass>(DType low)>;
struct TargetTrainingPass {
  std::string name;
  TrainingPassFactory make;
};

// A pass the target adds to the inference pipeline, at `position` among the registered ones
// (passes/inference.h).
struct TargetInferencePass {
  std::string name;
  int position = 0;
  std::function<std::unique_ptr<Pass>()> make;
};

struct Target {
  std::string name;    // "cpu", "cuda"
  std::string detail;  // said with the precision note ("oneDNN ISA avx512_core_bf16"), or ""
  TargetCapabilities caps;
  // Run on the training step in order after its products are fused, before the optimizer.
  std::vector<TargetTrainingPass> training_passes;
  std::vector<TargetInferencePass> inference_passes;
  // Null: only shape data folds.
  HostEvaluator evaluator = nullptr;
};

}  // namespace mixtrain
