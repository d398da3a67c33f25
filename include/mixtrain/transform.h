// mixtrain public API: the compiler passes on their own, for inspecting what they do to a model
// (`mixtrain dump`): TransformModel runs a named list of passes and renders the graph.
//
// Errors: as Trainer (see mixtrain/trainer.h): a non-OK absl::Status naming the file, pass or
// option. Thread safety: the functions share no mutable state.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mixtrain/tensor.h"
#include "mixtrain/train_config.h"
#include "mixtrain/trainer.h"  // GraphFormat

namespace mixtrain {
inline namespace v1 {

struct TransformOptions {
  // The passes to run, in order (names from TransformPassNames(); empty: import only). When any
  // is given, "canonicalize" runs first (unless listed), as it does before training. The ones
  // below take their options from this struct; every other pass runs with its defaults.
  std::vector<std::string> passes;
  // "precision": preset "fp32", "amp" or "half"; the low type, kFloat16 or kBFloat16; op types
  // moved to the allow / deny lists; a regex of node names pinned to fp32.
  std::string precision = "amp";
  ElementType low_type = ElementType::kBFloat16;
  std::vector<std::string> allow, deny;
  std::optional<std::string> fp32_nodes;
  // "loss": cross_entropy, mse, l1, bce_with_logits, or output:NAME.
  std::string loss = "cross_entropy";
  int32_t class_axis = 1;  // cross_entropy's class axis in the logits (-1: N x T x V)
  // "optimizer": adam, adamw, sgd or adagrad. With "loss_scale" among the passes, autodiff
  // differentiates the scaled loss and the optimizer unscales (dynamic scaling).
  std::string optimizer = "adam";
  // The data-parallel step (TrainConfig::data_parallel; deterministic: fixed-order reduction):
  // the dp/ all-reduce nodes the optimizer pass adds. Shown without running it.
  bool data_parallel = false, deterministic = false;
  // LoRA adapters (TrainConfig's lora_* fields) in the train and eval graphs; 0 = none.
  int32_t lora_rank = 0;
  std::optional<float> lora_alpha;
  std::string lora_targets;
  // passes = {"train"} or {"eval"}: the training step or the eval graph exactly as a Trainer
  // builds it (canonicalize, train_mode, loss, precision, loss_scale, autodiff, optimizer,
  // cleanup), from this config; unset: a TrainConfig made of the fields above (precision
  // preset and low type, lists, loss, class axis, optimizer; loss scaling as train's default).
  std::optional<TrainConfig> train_config;
  // Node name -> its measured precision risk and why, "<risk>: <reason>" with risk one of
  // non-finite, overflow, near-overflow, underflow (`mixtrain dump --stats` fills it from the
  // precision debugger's statistics). The text marks those nodes [risk=...]; DOT fills them by
  // risk. Names that are not nodes of the transformed graph are listed in
  // TransformedModel::risk_nodes_missing; when none is a node, TransformModel fails.
  std::map<std::string, std::string> node_risk;
};

struct TransformedModel {
  // The graph in the requested format: text (one line per node, a summary, and the precision
  // report when the precision pass ran), DOT, or the serialized ONNX ModelProto.
  std::string graph;
  // Per compute dtype node counts and the Casts inserted; empty unless the precision pass ran.
  std::string precision_report;
  // Names in TransformOptions::node_risk that are not nodes of the transformed graph.
  std::vector<std::string> risk_nodes_missing;
  // The backend the passes were built for (train_config's device, chosen as a Trainer chooses:
  // "auto" is cuda only where a usable GPU has every kernel; "cuda" needs no GPU to be shown),
  // and a note when "auto" chose the CPU, saying why.
  std::string device = "cpu";
  std::string device_note;
};

// Imports the ONNX model at `model_path` and runs options.passes on it. The pass list and its
// options are checked before the model is read. With a non-empty `out_path` the graph is written
// there atomically instead (a temp file renamed over it; ONNX keeps large weights in an external
// data file beside it) and TransformedModel::graph is left empty; kOnnx needs an out_path when the
// weights would not fit one serialized message.
absl::StatusOr<TransformedModel> TransformModel(const std::string& model_path, const TransformOptions& options,
                                                GraphFormat format = GraphFormat::kText,
                                                const std::string& out_path = "");

// The pass names TransformOptions::passes accepts, sorted.
std::vector<std::string> TransformPassNames();

}  // namespace v1
}  // namespace mixtrain
