// Factories and options of the training passes: train mode, loss, autodiff (docs/architecture.md,
// "The pipeline"). Each pass lives in its own file; this header is what tools and later passes include.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "passes/pass.h"
#include "passes/target.h"
#include "passes/step_names.h"

namespace mixtrain {

// Graph outputs that carry state written back after each step are named "state/<initializer>"
// (kStatePrefix); gradients are "grad/<initializer>" (kGradPrefix); the loss is "loss"
// (kLossName). The runtime pairs them by these names; passes/step_names.h defines them all.

// (graph output name, initializer name) for every "state/<initializer>" output of `g`.
std::vector<std::pair<std::string, std::string>> StateUpdates(const Graph& g);

// --- train mode -------------------------------------------------------------------------------
struct TrainModeOptions {
  int64_t seed = 0;  // Dropout's RNG seed
};
// BatchNormalization -> batch statistics, running mean/var exposed as "state/<initializer>"
// outputs; Dropout -> training form (ratio kept, seed set, mask output for the gradient).
std::unique_ptr<Pass> MakeTrainModePass(TrainModeOptions options = {});

// --- loss -------------------------------------------------------------------------------------
struct LossOptions {
  // "cross_entropy", "mse", "l1", "bce_with_logits", or "output:NAME" (an output the model
  // already computes).
  std::string kind = "cross_entropy";
  std::string output;            // model output the loss applies to; "" = the first output
  std::string labels = "labels"; // name of the new labels graph input
  // cross_entropy: the logits axis holding the classes (1 = ONNX's N x C [x d...]; -1 = last, for
  // N x T x V language-model logits). Other axes are moved to 1 by a Transpose.
  int class_axis = 1;
  // cross_entropy: labels equal to it count in neither the loss nor its gradient (the mean is
  // over the others: SoftmaxCrossEntropyLoss's ignore_index).
  std::optional<int64_t> ignore_index;
};
// Appends the loss: a scalar graph output named "loss" and a labels graph input.
std::unique_ptr<Pass> MakeLossPass(LossOptions options);

// --- autodiff ---------------------------------------------------------------------------------
struct AutodiffOptions {
  std::string loss = kLossName;  // the scalar to differentiate
  // Trainable parameters: initializers SelectTrainable picks (passes/parameters.h: the
  // framework's parameters by default; `trainable`, when set, replaces that set by the float
  // initializers it matches; `freeze` removes matches) that reach the loss through
  // differentiable inputs. ECMAScript regexes, matched against the whole name.
  std::string trainable;
  std::string freeze;
  // When set, a node whose gradient cannot be built is listed here ("node 'n' (Op): why") and
  // the pass goes on without it, so one run finds every blocking node (`mixtrain check`); the
  // pass still fails at the end when any was found.
  std::vector<std::string>* problems = nullptr;
  // What unroll_loop folded with, to say why a loop it left has no gradient.
  HostEvaluator evaluator = nullptr;
};
// Reverse mode from `loss` to every trainable parameter; adds "grad/<initializer>" outputs.
std::unique_ptr<Pass> MakeAutodiffPass(AutodiffOptions options = {});

// --- the three together ---------------------------------------------------------------------
struct GradientGraphOptions {
  TrainModeOptions train_mode;
  LossOptions loss;
  AutodiffOptions autodiff;
};
// canonicalize, the forward fusions the training step runs (fuse_gelu, fuse_softmax: fused ops
// with gradient rules), train_mode, loss and autodiff on a copy of `model`, verified after each
// pass (what `mixtrain grad` and ComputeGradients run; defined in passes/pipeline.cc). Outputs: "loss", then the model's, state and "grad/<param>" ones.
absl::StatusOr<std::unique_ptr<Graph>> BuildGradientGraph(const Graph& model,
                                                          const GradientGraphOptions& options);
// The names of g's gradient outputs, in output order.
std::vector<std::string> GradientOutputs(const Graph& g);

}  // namespace mixtrain
