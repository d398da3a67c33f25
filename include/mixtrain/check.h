// mixtrain public API: whether a model trains, said before any training (`mixtrain check`).
// Runs the import canonicalization, decides which initializers train (the framework's
// parameters: see "How to export for training" in the README), appends the loss and builds the
// backward graph, collecting every node that blocks it (unsupported op, missing gradient rule,
// unknown rank, no CPU kernel) instead of stopping at the first. When nothing blocks, it builds
// the training step, evaluation graph and export that `mixtrain train` builds with these options
// (its defaults otherwise) and plans each on the CPU, so `trains` means training starts.
//
// Errors: a non-OK status only when the model cannot be read or an option is bad; a model that
// does not train is an OK result with trains == false and its blockers listed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mixtrain/memory_statistics.h"
#include "mixtrain/train_config.h"

namespace mixtrain {
inline namespace v1 {

struct CheckOptions {
  // The run `train` would make (what `mixtrain check` builds from train's step flags): when set,
  // the step, evaluation and memory report are built from it as the Trainer builds them, and the
  // fields it shares with those below (loss, output, class_axis, freeze, trainable, precision,
  // recompute, lora_*) are taken from it.
  std::optional<TrainConfig> train_config;
  std::string loss = "cross_entropy";  // as GradientOptions::loss
  std::string output;                  // the model output the loss applies to; "" = the first
  int32_t class_axis = 1;
  std::string freeze;     // as TrainConfig: ECMAScript regexes over whole initializer names
  std::string trainable;
  // "cuda": also list the ops of the training step (bf16 AMP, Adam: what --device=cuda trains)
  // and of evaluation that have no CUDA kernel. Needs no GPU, only a build with CUDA.
  std::string device = "cpu";
  // The memory report (`check --memory`): when memory_batch > 0, the training step and
  // evaluation `train` builds on the CPU, planned with every symbolic input dim at memory_batch,
  // with this precision and recompute (as TrainConfig's) and Adam. Nothing runs.
  int64_t memory_batch = 0;
  TrainConfig::Precision precision;
  std::string recompute = "none";
  // LoRA as TrainConfig's lora_* fields: rank > 0 adds the adapters before the rest is checked,
  // so what trains is what `train --lora-rank` trains, and ModelCheck::adapters lists them.
  int32_t lora_rank = 0;
  std::optional<float> lora_alpha;
  std::string lora_targets;
};

// One LoRA adapter pair: the weight it adapts and its A [in, rank] and B [rank, out] (a Conv
// kernel's: A [rank, in, k...] and B [out, rank, 1...], `in` counting input channels only).
struct AdapterReport {
  std::string weight;
  int64_t in = 0, out = 0, rank = 0;
  int64_t bytes = 0;  // A and B in fp32
  std::vector<int64_t> a_dims, b_dims;
};

struct InitializerReport {
  std::string name;
  std::string dtype;           // "f32", "i64", ...
  std::vector<int64_t> dims;
  int64_t bytes = 0;
  std::string role;            // "parameter", "state" or "constant"
  std::string reason;          // why that role ("torch.export PARAMETER", ...), and what the flags did
  std::string position;        // the parameter position it is read in ("Conv W (node 'c1')"), or ""
  bool selected = false;       // the default rule and --trainable/--freeze make it trainable
  bool trains = false;         // selected, and it reaches the loss
};

struct ModelCheck {
  bool trains = false;
  std::vector<std::string> blockers;  // "node 'n' (Op): why", every one found
  // What canonicalization did.
  int nodes_imported = 0, nodes_after = 0;
  int shape_values_folded = 0, nodes_folded = 0, nodes_simplified = 0, nodes_removed = 0;
  int initializers_removed = 0;  // nothing used them any more
  std::vector<std::string> not_folded;
  std::vector<InitializerReport> initializers;  // in the model's order (after canonicalization)
  // The model's initializers read in a parameter position that do not train (exporter metadata
  // or --freeze/--trainable froze them), and one-element values read both as a parameter and
  // as something else (trained, with the flag that freezes them): one sentence each.
  std::vector<std::string> trainability_warnings;
  std::vector<std::string> dynamic_dims;        // "input 'x': [batch,3,32,32]"
  std::vector<std::string> op_types;            // distinct ops after canonicalization
  // The dropouts training draws ("node (ratio 0.3)"), after canonicalization (which rewrites the
  // dynamo exporter's random-mask form into Dropout). Empty for an export from eval mode, which
  // keeps no trace of its module's dropout (no node, no exporter metadata).
  std::vector<std::string> dropouts;
  // device "cuda": whether its kernels could be looked up ("" when they could; else why not), and
  // the ops of the training step and evaluation without one (by op; or, when every op has some
  // kernel, "<precision> step|eval: <the planner's list of ops and dtypes>" for fp32, bf16 AMP and
  // fp16 AMP). They do not block CPU training.
  std::string cuda_unknown;
  std::vector<std::string> cuda_missing_ops;
  // CheckOptions::memory_batch > 0 and the model trains: where its memory will go, planned (the
  // measured fields are this process's: the check's own, not training's).
  std::optional<MemoryStatistics> memory;
  // options.lora_rank > 0: the adapters, and the float parameters of the model (adapters
  // excluded) and of the adapters, for the trainable fraction.
  std::vector<AdapterReport> adapters;
  int64_t model_parameters = 0, adapter_parameters = 0;
};

absl::StatusOr<ModelCheck> CheckModel(const std::string& model_path, const CheckOptions& options = {});

}  // namespace v1
}  // namespace mixtrain
