// The names the training step's passes use to talk to each other and to the runtime, in one
// place, and the check that a built step obeys them (VerifyStepNames). Included by
// passes/passes.h and passes/training.h, so every user of those sees the same names.
//
// Conventions: who writes each name, who reads it.
//
// Values (graph inputs, initializers and outputs of the step):
//   "grad/<X>"   kGradPrefix. Written by autodiff (passes/autodiff.cc): one graph output per
//                trainable parameter X (an f32 initializer, or a graph input for
//                ComputeGradients' callers). Read by the optimizer pass, which takes them out of
//                the outputs (the built step has none left), by GradientOutputs/BuildTrainingStep
//                (the trained parameters) and by `mixtrain grad` / api/gradients.cc.
//   "state/<X>"  kStatePrefix. Written by train_mode (BatchNorm running statistics, through
//                "<bn>/state<i>" Identity nodes) and the optimizer pass (parameters, moments,
//                counters, loss scale; "state/<X>" Identity nodes): graph output whose value
//                replaces initializer X (same dtype and shape) after each step. Read by
//                StateUpdates (passes/train_mode.cc) for the planner and the trainer's write-back,
//                and by checkpoints, which store X under its own name.
//   "loss"       kLossName. Written by the loss pass ("loss/..." nodes; with --loss=output:loss the
//                model's own value): the scalar graph output autodiff differentiates. Read by
//                autodiff, loss_scale, recompute (its forward is what the loss depends on) and the
//                trainer (fetched each step).
//   "scaled_loss", "loss_scale"   kScaledLossName, kLossScaleName. Written by the loss-scale pass:
//                scaled_loss = loss * loss_scale ("loss_scale/mul"), loss_scale an f32 scalar
//                initializer (state under dynamic scaling). Read by autodiff (its start under
//                scaling), the optimizer (unscale, UpdateLossScale) and the trainer (loss scale).
//   "loss_scale.good_steps"  kGoodStepsName. i64 scalar state of dynamic scaling (optimizer).
//   "step", "amp.skipped_steps"   kStepName, kSkippedStepsName. i64 scalar state the optimizer
//                counts applied and overflow-skipped updates in; read by Adam/Adagrad (bias
//                correction, lr decay), the trainer (skipped updates) and checkpoints
//                (runtime/trainer_checkpoint.cc checks the counters).
//   "lr"         kLrName. f32 scalar graph input the optimizer adds; the trainer feeds it per step
//                (the schedule).
//   "apply"      kApplyName. bool scalar graph input of gradient accumulation (optimizer); the
//                trainer feeds true on the last micro-batch.
//   "found_inf"  kFoundInfName. bool scalar graph output (optimizer, "amp/found_inf"); read by
//                the trainer (skipped steps, the precision debugger's diagnosis).
//   "precision_stats"  kPrecisionStatsName. f32 [K, kNumStatFields] graph output of the precision
//                debugger (passes/precision_stats.cc); read by runtime/precision_debugger.cc.
//   "<P><X>"     per-parameter optimizer state, P one of kOptimizerStatePrefixes ("accum/",
//                "adam.m/", "adam.v/", "sgd.momentum/", "adagrad.sum/"). Written by the optimizer
//                pass: f32 initializers with parameter X's shape, each written back by
//                "state/<P><X>". Read by the optimizer node and checkpoints (by name). With
//                accumulation the optimizer also adds scalar constants "accum/zero" and
//                "accum/inv_n" (no state, no parameter).
//   All of the above but grad/ are reserved: CheckReservedNames (passes/reserved_names.cc)
//   refuses a model value or labels named so.
//
// Nodes (PhaseOf below): the name of a node the step's passes add says where it belongs.
//   "loss/", "loss_scale/"                     loss pass, loss-scale pass       -> kLoss
//   "<node>/grad" anywhere in the name          autodiff (its scopes)            -> kBackward
//   "adam/", "adamw/", "sgd/", "adagrad/", "amp/", "step/", "clip/", "accum/"
//                                               optimizer pass                   -> kOptimizer
//   "precision_stats/"                         precision debugger               -> kDebug
//   "dp/"                                       data parallel's AllReduce nodes  -> kCommunication
//   "recompute/"                                activation recompute's clones    -> kRecompute
//   anything else                               the model (and its rewrites)     -> kForward
//   "state/<X>" Identity nodes (optimizer) write a state output: PhaseOf calls them forward; the
//   order check below treats them as the step's last nodes (IsStateWriteBack). The Casts the
//   precision pass adds are named after the value they convert ("cast_<value>_<type>"): forward
//   by name, even between two loss nodes.
// Read by the profiler (runtime/trainer.cc), the precision debugger (runtime/precision_debugger.cc:
// which values it watches), the memory report (runtime/memory_report.cc: activations kept for the
// backward, gradients kept for the optimizer), recompute (passes/recompute.cc: which readers are
// backward, communication it never recomputes, whether it already ran) and the precision_stats
// pass (what it watches).
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "graph/graph.h"

namespace mixtrain {

// --- value names ----------------------------------------------------------------------------
inline constexpr char kStatePrefix[] = "state/";
inline constexpr char kGradPrefix[] = "grad/";
// The scalar the loss pass produces and autodiff differentiates by default.
inline constexpr char kLossName[] = "loss";
inline constexpr char kScaledLossName[] = "scaled_loss";
inline constexpr char kLossScaleName[] = "loss_scale";             // f32 scalar state
inline constexpr char kGoodStepsName[] = "loss_scale.good_steps";  // i64 scalar state
inline constexpr char kStepName[] = "step";                        // i64 scalar state: applied updates
// i64 scalar state: updates skipped for an inf/NaN gradient, counted on the device so a step need
// not copy found_inf back to the host.
inline constexpr char kSkippedStepsName[] = "amp.skipped_steps";
inline constexpr char kLrName[] = "lr";                            // f32 scalar input, fed per step
inline constexpr char kApplyName[] = "apply";                      // bool scalar input (accumulation)
inline constexpr char kFoundInfName[] = "found_inf";               // bool scalar output
inline constexpr char kPrecisionStatsName[] = "precision_stats";   // f32 [K, 8] output (debugger)

// Per-parameter optimizer state: "<prefix><parameter>".
inline constexpr char kAccumPrefix[] = "accum/";
inline constexpr char kAdamMPrefix[] = "adam.m/";
inline constexpr char kAdamVPrefix[] = "adam.v/";
inline constexpr char kSgdMomentumPrefix[] = "sgd.momentum/";
inline constexpr char kAdagradSumPrefix[] = "adagrad.sum/";
inline constexpr const char* kOptimizerStatePrefixes[] = {kAccumPrefix, kAdamMPrefix, kAdamVPrefix,
                                                          kSgdMomentumPrefix, kAdagradSumPrefix};

// --- node names -----------------------------------------------------------------------------
inline constexpr char kLossNodePrefix[] = "loss/";
inline constexpr char kLossScaleNodePrefix[] = "loss_scale/";
inline constexpr char kBackwardNodeMarker[] = "/grad";  // anywhere in the name
inline constexpr char kAdamNodePrefix[] = "adam/";
inline constexpr char kAdamWNodePrefix[] = "adamw/";
inline constexpr char kSgdNodePrefix[] = "sgd/";
inline constexpr char kAdagradNodePrefix[] = "adagrad/";
inline constexpr char kAmpNodePrefix[] = "amp/";    // overflow check, unscale, loss-scale update
inline constexpr char kStepNodePrefix[] = "step/";  // the update counter
inline constexpr char kClipNodePrefix[] = "clip/";
inline constexpr char kAccumNodePrefix[] = "accum/";
inline constexpr const char* kOptimizerNodePrefixes[] = {kAdamNodePrefix,    kAdamWNodePrefix, kSgdNodePrefix,
                                                         kAdagradNodePrefix, kAmpNodePrefix,   kStepNodePrefix,
                                                         kClipNodePrefix,    kAccumNodePrefix};
inline constexpr char kPrecisionStatsNodePrefix[] = "precision_stats/";
inline constexpr char kDataParallelNodePrefix[] = "dp/";
inline constexpr char kRecomputeNodePrefix[] = "recompute/";
// The optimizer's write-back of "state/<X>": an Identity named "state/<X>" (uniquified).
inline constexpr char kStateNodePrefix[] = "state/";

// Where a training-step node belongs, from the names the passes give the nodes they add (the
// table above); everything else is the model's forward.
enum class StepPhase { kForward, kLoss, kBackward, kOptimizer, kDebug, kCommunication, kRecompute };
StepPhase PhaseOf(const Node& n);
const char* StepPhaseName(StepPhase p);

// A node that only writes a "state/<X>" output: named "state/..." with every output a graph
// output named "state/...". Runs after everything it reads; nothing in the step reads it.
bool IsStateWriteBack(const Graph& g, const Node& n);

// Checks that `step` (a built training step, or a gradient graph) obeys the conventions above.
// Fails with every violation found (up to a few dozen), each naming the value or node and the
// rule:
//   grad/X output: X is a float initializer or graph input, not step state, of grad/X's shape;
//     grad/X is float.
//   state/X output: X is an initializer; state/X has its dtype and (where known) shape. (Also
//     accepted: "state/X_<k>" beside "state/X", computed by a forward node: train_mode's update of
//     running statistics two BatchNorms share, which nothing writes back; see step_names.cc.)
//   <P>X optimizer state (P in kOptimizerStatePrefixes) written back: X is an initializer of the
//     same dims, both f32, and X is written back too; adam.m/ adam.v/ sgd.momentum/ adagrad.sum/
//     initializers are always written back.
//   loss_scale: f32 scalar initializer. step, amp.skipped_steps, loss_scale.good_steps: integer
//     scalar initializers (good_steps only with loss_scale, both written back). found_inf: bool
//     scalar graph output computed by the step. lr: f32, apply: bool scalar graph inputs (not
//     initializers). scaled_loss: f32, computed by a loss node, with loss_scale present. loss: a
//     float graph output the step computes. precision_stats: f32 [K, kNumStatFields] output of a
//     debug node.
//   Along every edge producer -> consumer: forward, loss <= backward <= optimizer (forward and
//     loss nodes are one stage: the precision pass names its Casts of loss values after the
//     values, "cast_<value>_<type>", so they are forward nodes by name); only debug
//     nodes read debug nodes; communication (dp/) nodes are read only by optimizer,
//     communication, debug and write-back nodes; recompute nodes read only forward, loss and
//     recompute nodes and are read only by backward, recompute and debug nodes; write-back nodes
//     (IsStateWriteBack) read anything but debug nodes and are read only by debug nodes.
absl::Status VerifyStepNames(const Graph& step);

}  // namespace mixtrain
