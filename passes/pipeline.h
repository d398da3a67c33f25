// The one place the training step is assembled (docs/architecture.md, "The pipeline"). A TrainConfig
// resolves once into a TrainingRecipe (precision preset and low type with AUTO decided, loss
// scaling, the precision policy with all four lists and the fp32 node regexes, loss, trainable
// selection, optimizer); the trainer, `mixtrain dump --passes=train|eval`, and the public
// API's TransformModel build their graphs from it with the functions below, so what `dump`
// prints is what `train` runs:
//
//   import -> canonicalize -> [step] lora -> train_mode -> loss -> precision -> loss_scale -> autodiff
//                                    -> optimizer -> cleanup [-> precision_stats]
//                          -> [eval] inference form -> lora -> loss -> precision -> cleanup
//                          -> [export] inference form -> precision (half) -> cleanup -> weight casts
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "passes/lora.h"
#include "passes/parameters.h"
#include "passes/passes.h"
#include "passes/precision_policy.h"
#include "passes/target.h"
#include "passes/training.h"
#include "proto/mixtrain_pb.h"

namespace mixtrain {

struct TrainingRecipe {
  // The config it was made from. A setting that needs no resolving against the model or the
  // target is read from here by the code that adds its pass (docs/architecture.md, "Adding a
  // training setting"); the fields below are the resolved ones.
  pb::TrainConfig config;
  PrecisionPreset preset = PrecisionPreset::kAmp;  // after AUTO
  DType low = DType::kBF16;                        // the low type (kF32 when preset is fp32)
  bool scaling = false, dynamic_scaling = false;
  float init_scale = 65536.0f;
  std::string note;  // why AUTO chose what it did, when the user should know
  PrecisionPolicy policy = PrecisionPolicy::Default(PrecisionPreset::kAmp, DType::kBF16);
  TrainModeOptions train_mode;
  LossOptions loss;  // output and labels resolved against the model
  TrainableSelection params;
  OptimizerOptions optimizer;
  bool debug_precision = false;  // the precision debugger's statistics (MakePrecisionStatsPass)
  RecomputeOptions recompute;    // activation recompute (MakeRecomputePass)
  LoraOptions lora;              // rank 0: no adapters (MakeLoraPass, first on step and eval)
  // The backend the graphs are built for: its capabilities, its passes (run on the step after
  // the products are fused) and the evaluator constant folding uses.
  Target target;
};

// Resolves `config` for `model` (its first output when the config names none) on `target`, the
// one place a recipe is made: --dtype=auto picks bf16 AMP where the target computes bf16
// natively, else fp32.
absl::StatusOr<TrainingRecipe> ResolveTrainingRecipe(const pb::TrainConfig& config, const Graph& model,
                                                     const Target& target);

// The import stage every graph below starts from (canonicalization with the recipe's parameters;
// with LoRA under AMP, the frozen targets stored in the low type: StoreLoraTargetsLow).
absl::Status PrepareModel(Graph& model, const TrainingRecipe& recipe);
// The training step from a prepared model, in place: gradients, update, state outputs. Returns
// the parameters it trains (those with a gradient), in order.
absl::StatusOr<std::vector<std::string>> BuildTrainingStep(Graph& g, const TrainingRecipe& recipe);
// The eval graph from a prepared model, in place: inference form, the same loss and precision.
absl::Status BuildEvalGraph(Graph& g, const TrainingRecipe& recipe);
// The exported inference model, in place: inference form; with dtype f16/bf16 the precision pass
// in "half" (ops whose ONNX schema at the model's opset has no such form stay fp32) and the
// weights stored in that type.
absl::Status LowerForExport(Graph& g, DType dtype);
// BatchNormalization on running statistics (its extra outputs dropped); Dropout without its
// training_mode input (a model exported in training mode sets it), the identity in inference.
void ToInferenceForm(Graph& g);

}  // namespace mixtrain
