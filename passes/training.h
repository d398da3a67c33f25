// The passes that make a gradient graph a training step (docs/architecture.md, "The pipeline"):
// loss scaling before autodiff; after it, the overflow check, unscale, gradient clipping, the optimizer update
// of fp32 master weights, the step counter and the dynamic loss-scale update — all in the graph,
// so a step needs no host round trip. State is written back through "state/<initializer>"
// outputs (passes/passes.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "passes/pass.h"
#include "passes/step_names.h"

namespace mixtrain {

// Names of the step's inputs, state and outputs (kScaledLossName, kLossScaleName, kGoodStepsName,
// kStepName, kSkippedStepsName, kLrName, kApplyName, kFoundInfName, kPrecisionStatsName), the
// optimizer's per-parameter state prefixes (kOptimizerStatePrefixes) and the node-name prefixes
// of each phase are defined, with who writes and who reads each, in passes/step_names.h.

// The names above, and the prefixes of the state the optimizer adds per parameter ("accum/",
// "adam.m/", ...), are the step's own: a model value or the labels named so would collide with
// them (passes/reserved_names.cc). Fails naming the value and the name's use; `labels` may be
// "" (a loss the model computes), and "loss" is the loss pass's to judge for model values.
absl::Status CheckReservedNames(const Graph& model, const std::string& labels);

// Where a training-step node belongs (StepPhase, PhaseOf, StepPhaseName), from the names the
// passes give the nodes they add: declared in passes/step_names.h, with VerifyStepNames, the
// check that a built step obeys these conventions.

// The precision debugger's statistics (docs/precision-debugger.md): one
// ai.mixtrain.PrecisionStats per float value the step computes before the optimizer (the outputs
// of forward, loss and backward nodes, and the float graph inputs), placed right after its
// producer so no tensor lives longer, all concatenated into the output "precision_stats" [K, 8].
// A Cast from fp32 to a low type is measured on its fp32 input against the low type's range, so
// its overflow and flush-to-zero counts are exact. Row k's node carries the attributes `value`
// (the watched value), `node` (its producer, "" for a graph input), `cast_input` and `to`.
// Nothing else reads the rows: a run that does not fetch "precision_stats" skips them all.
std::unique_ptr<Pass> MakePrecisionStatsPass();

struct LossScaleOptions {
  float init_scale = 65536.0f;
};
// scaled_loss = loss * loss_scale, with loss_scale an fp32 state initializer (fp32 always: 2^16
// is above fp16's largest finite value). Autodiff then starts from "scaled_loss".
std::unique_ptr<Pass> MakeLossScalePass(LossScaleOptions options = {});

// Activation recompute (passes/recompute.cc): forward segments between cuts (points where one
// activation carries everything forward) are computed again in the backward instead of kept;
// `auto` picks the segments that save the most bytes per FLOP, up to a third of the forward's
// FLOPs. Runs last on the training step (after cleanup, whose CSE would undo it).
struct RecomputeOptions {
  enum class Mode { kNone, kAuto, kAll };
  Mode mode = Mode::kNone;
};
std::unique_ptr<Pass> MakeRecomputePass(RecomputeOptions options);

struct OptimizerOptions {
  enum Kind { kAdam, kAdamW, kSgd, kAdagrad };
  Kind kind = kAdam;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;  // SGD
  bool nesterov = false;  // SGD
  float lr_decay = 0.0f;  // Adagrad
  float clip_grad_norm = 0.0f;  // 0 = off; on unscaled gradients
  // Loss scaling: "loss_scale" must exist (MakeLossScalePass) when either is on.
  bool unscale = false;
  bool dynamic_scale = false;
  float growth_factor = 2.0f, backoff_factor = 0.5f, max_scale = 16777216.0f;
  int64_t growth_interval = 2000;
  // >1: gradients accumulate in state over micro-batches; the update happens on runs fed
  // apply=true, with the mean of the accumulated gradients.
  int64_t accumulate = 1;
  // Data-parallel training: the (accumulated) gradients are averaged over the session
  // communicator's ranks by ai.mixtrain.AllReduce nodes ("dp/allreduce/<k>", buckets of at most
  // `bucket_bytes`, the last layers' gradients first) before the overflow check, the overflow flag
  // is ANDed over the ranks, and BatchNorm statistics are averaged. `fixed_order`: see AllReduce.
  bool data_parallel = false;
  bool fixed_order = false;
  int64_t bucket_bytes = int64_t{25} << 20;
};
// RNN/GRU/LSTM nodes with a static sequence length written out step by step in ONNX ops
// (passes/unroll_rnn.cc), so autodiff differentiates them. The first forward rewrite.
std::unique_ptr<Pass> MakeUnrollRnnPass();
// An ONNX RNN, GRU or LSTM node.
bool IsRecurrentOp(const Node& n);
// Why unroll_rnn leaves recurrent node `n` as it is (a symbolic sequence length, sequence_lens,
// ...), or "" when it unrolls it. Autodiff names it when such a node needs a gradient.
std::string WhyRnnNotUnrolled(const Node& n);
// Exact fusions of the backward graph (passes/fuse_backward.cc): a Relu's gradient folded into
// the MaxPoolGrad that reads the Relu's output. Runs after autodiff.
std::unique_ptr<Pass> MakeFuseBackwardPass();
// The forward half of the training step's conv fusions (passes/fuse_conv.cc): Conv followed by
// a residual Add and/or an activation whose gradient reads only its output (Relu, Sigmoid,
// Tanh) becomes one FusedConv, when the conv's output has no other reader (ConvGrad reads X and
// W, not Y). No BatchNorm folding: in training the weights change every step. Runs after
// autodiff, so every backward reader is already in place.
std::unique_ptr<Pass> MakeFuseConvEpiloguePass();

// The inference pass fuse_matmul (passes/fuse_matmul.cc) for the differentiated graph: forward
// and backward products read Transposes in place (a transpose of a transpose composed) and take
// their scale, bias and residual Add, each swallowed only where the chain is its sole reader. A
// Relu stays apart: oneDNN's relu post-op maps NaN to 0, ONNX's Relu keeps it.
std::unique_ptr<Pass> MakeFuseMatMulTrainingPass();
// After it, the backend's own passes (the CPU's fp32_grad_products, loss_reads_low and
// conv_layout_train: kernels/cpu/passes/cpu_passes.h), from its Target (passes/target.h).

absl::StatusOr<OptimizerOptions::Kind> ParseOptimizerKind(const std::string& s);

// Consumes the "grad/<param>" outputs: adds found_inf, unscale, clipping, one optimizer node per
// parameter (fp32 moments as new initializers), the step counter and the loss-scale update.
std::unique_ptr<Pass> MakeOptimizerPass(OptimizerOptions options);

}  // namespace mixtrain
