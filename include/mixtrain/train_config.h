// mixtrain public API: TrainConfig, how a Trainer trains. A plain struct that mirrors the
// TrainConfig message of proto/mixtrain.proto field by field (same names, same defaults; optional
// where the library tells an unset field from one set to its default), so
// embedders need neither protobuf nor ONNX headers; FromTextProto/ToTextProto read and write the
// same .textproto files as `mixtrain train --config`.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mixtrain {
inline namespace v1 {

// The values a numeric setting accepts: a TrainConfig field, or a command-line flag of `mixtrain`
// (which takes the field's rule where the flag sets one). Always finite; an integer rule refuses
// fractions, a float32 rule values a float cannot hold (1e39 would become inf, 1e-50 zero).
struct NumberRule {
  enum class Kind { kInteger, kFloat32 };
  static constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  Kind kind = Kind::kFloat32;
  double min = -kUnbounded, max = kUnbounded;  // integer bounds are exact (|bound| < 2^53)
  bool min_open = false, max_open = false;     // true: the bound itself is refused ("> 0")

  static constexpr NumberRule Integer(double min, double max) { return {Kind::kInteger, min, max}; }
  static constexpr NumberRule Float(double min, double max = kUnbounded, bool min_open = false,
                                    bool max_open = false) {
    return {Kind::kFloat32, min, max, min_open, max_open};
  }
  // "a finite number > 0", "a finite number in [0, 1)", "an integer in [1, 2147483647]".
  std::string Describe() const;
  // Whether `value` passes (for kFloat32, as rounded to a float).
  bool Accepts(double value) const;
};

// Parses `text` (decimal or exponent form; 1e3 is an integer) and checks it against `rule`. The
// error reads "<name>=<text>: must be <rule>" (name: a flag "--lr" or a field "optimizer.lr").
// kFloat32 values come back rounded to float.
absl::StatusOr<double> ParseNumber(std::string_view name, std::string_view text, const NumberRule& rule);

struct TrainConfig {
  // Which ops run in the low type. Lists are edits to the preset's built-in op classes.
  struct Precision {
    enum class Preset { kAmp, kFp32, kHalf };
    enum class LowType { kAuto, kFp16, kBf16 };  // kAuto: bf16 on the CPU, fp16 on a GPU
    Preset preset = Preset::kAmp;
    LowType low_dtype = LowType::kAuto;
    std::vector<std::string> allow, deny, infer, clear;  // op types moved to that class
    std::vector<std::string> fp32_nodes;                 // node-name regexes kept in fp32
  };
  struct LossScaler {
    enum class Mode { kAuto, kOff, kStatic, kDynamic };  // kAuto: dynamic for fp16, else off
    Mode mode = Mode::kAuto;
    float init_scale = 65536.0f;
    float growth_factor = 2.0f;
    float backoff_factor = 0.5f;
    int32_t growth_interval = 2000;
    float max_scale = 16777216.0f;
  };
  struct Optimizer {
    enum class Kind { kAdam, kAdamW, kSgd, kAdagrad };
    Kind kind = Kind::kAdam;
    float lr = 0.001f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    // Unset: the optimizer's default (epsilon 1e-8, Adagrad 1e-10; weight decay 0, AdamW 0.01).
    std::optional<float> epsilon;
    std::optional<float> weight_decay;
    float momentum = 0.0f;
    bool nesterov = false;
    float clip_grad_norm = 0.0f;  // 0 = off; applied to the unscaled gradients
  };
  struct Schedule {
    enum class Kind { kConstant, kStep, kCosine };
    Kind kind = Kind::kConstant;
    int32_t warmup_steps = 0;
    int32_t step_size = 1000;
    float gamma = 0.1f;
    float min_lr = 0.0f;
  };
  // Used by the `mixtrain train` command's data loading; a Trainer reads labels_key (the batch
  // entry holding the labels) and seed (dropout).
  struct Data {
    std::string path;
    std::string dataset = "fashion-mnist";
    std::string labels_key = "labels";
    int32_t batch_size = 64;
    bool shuffle = true;
    uint64_t seed = 0;
  };

  // How `mixtrain train` runs around the step (checkpoints, evaluation, logs): not read by a
  // Trainer, but saved with its checkpoints so that `train --resume=CKPT` alone continues the run.
  // A resumed run may change any of it.
  struct Run {
    std::string save;           // checkpoint path: the latest checkpoint
    int64_t save_every = 0;     // steps between checkpoints; 0: at epoch ends only
    int32_t keep = 1;           // > 1: the last `keep` saves stay, step-numbered beside `save`
    int64_t eval_every = 0;     // steps between evaluations; 0: at epoch ends only
    int32_t early_stop = 0;     // stop after this many evaluations without a lower loss; 0: off
    std::string save_best;      // checkpoint of the lowest evaluation loss
    int64_t limit_train = 0;    // the first N training examples only; 0: all
    int64_t limit_test = 0;
    int64_t log_every = 100;    // steps between progress lines (when not on a terminal)
    std::string log_dir;        // TensorBoard event files
    std::string export_path;    // the inference ONNX written at the end
    std::string export_dtype = "fp32";
  };

  std::string model = "models/fashion_cnn.onnx";  // used by the CLI; Trainer::Create takes a path
  std::string loss = "cross_entropy";  // mse, l1, bce_with_logits, or output:NAME (model's own)
  std::string output;                  // model output the loss reads; empty = the first
  // cross_entropy: the logits axis holding the classes, 1 as in ONNX/PyTorch (N x C [x d...]);
  // -1 for a language model's N x T x V logits (labels N x T). Negative counts from the end.
  int32_t class_axis = 1;
  // cross_entropy: labels equal to it count in neither the loss, its gradient nor Evaluate's
  // figures (PyTorch's ignore_index; transformers pads labels with -100). Unset: all count.
  std::optional<int64_t> ignore_index;
  std::string freeze;                  // regex of initializers kept frozen
  // Regex of initializers trained, replacing the default (the framework's parameters: README
  // "How to export for training"); freeze still applies.
  std::string trainable;
  Optimizer optimizer;
  Schedule schedule;
  Precision precision;
  LossScaler loss_scaler;
  Data data;
  int32_t epochs = 1;
  int64_t steps = 0;       // planned steps (the cosine schedule's horizon)
  int32_t accumulate = 1;  // gradient accumulation: every N-th Step applies the update
  std::string device = "auto";  // cpu, cuda, or auto (cuda where a GPU is usable, else cpu)
  // Activation recompute: "none", "auto" (the parts of the forward that save the most memory per
  // FLOP are computed again in the backward instead of kept) or "all". Same gradients.
  std::string recompute = "none";
  // The precision debugger (Trainer::PrecisionStatistics): per-value statistics every N steps
  // and a diagnosis of every skipped step; 0 = off. The other steps do no extra work.
  int32_t debug_precision = 0;
  // Data-parallel training (docs/distributed.md): each of the communicator's K ranks trains on its
  // 1/K of every global batch; the gradients are averaged by an all-reduce in the step graph
  // before the optimizer, so every rank holds the same weights. Without a communicator given to
  // Trainer::Create, MPI's world (mpirun) is used.
  bool data_parallel = false;
  // With data_parallel: a fixed reduction order (0 + rank 0 + rank 1 + ...), bit for bit
  // reproducible and equal to one process accumulating the K shards as micro-batches.
  bool deterministic = false;
  Run run;
  // LoRA fine-tuning (docs/lora.md): lora_rank > 0 adds low-rank adapters A [in, rank] and
  // B [rank, out] to the targeted 2-D weights of MatMul/Gemm products; only they train (with
  // whatever `trainable` adds), the model's own weights stay frozen and, under AMP, are stored in
  // the low type. The export folds the adapters into the weights (Trainer::ExportAdapters writes
  // them alone).
  int32_t lora_rank = 0;
  std::optional<float> lora_alpha;  // the branch is scaled by alpha / rank; unset: 2 * rank
  // Regex over initializer or product-node names; empty: the products of the repeated blocks
  // (`mixtrain check MODEL --lora-rank=R` lists them).
  std::string lora_targets;
  float lora_dropout = 0.0f;  // dropout on the adapters' input (PEFT's lora_dropout)
  std::string lora_init;      // an adapter file whose A and B start the run

  // Parses a text-format TrainConfig (a `--config` file's contents); unset fields keep defaults.
  // Syntax errors name the line and field; the parsed values are then checked by Validate().
  static absl::StatusOr<TrainConfig> FromTextProto(const std::string& text);
  // The config as text format (fields equal to their default are left out).
  std::string ToTextProto() const;

  // Checks every numeric field against its rule (NumberRuleOf) and every enum against its
  // values; the error names the field by its text-format path: "optimizer.lr=-1: must be a
  // finite number > 0". data.seed takes any value.
  absl::Status Validate() const;
  // The rule of a numeric field by its text-format path ("optimizer.lr", "steps"); nullptr for a
  // path that is not a numeric field.
  static const NumberRule* NumberRuleOf(std::string_view field);
  // Sets a numeric field by its text-format path when `value` passes its rule (an optional field
  // becomes set); the error names the field.
  absl::Status SetNumber(std::string_view field, double value);
};

}  // namespace v1
}  // namespace mixtrain
