// mixtrain public API: Trainer, which turns an ONNX model into one mixed-precision training step
// (forward, loss, loss scaling, backward, overflow check, optimizer) and runs it with fp32 master
// weights. See docs/embedding.md for an example.
//
// Errors: every call a caller can make fail (bad model, bad config, a batch missing an input or of
// the wrong dtype/shape, unknown parameter, unreadable checkpoint, unwritable path) returns a
// non-OK absl::Status whose message names the file, input, parameter or config field. The library
// neither throws across this API nor exits the process on such errors.
//
// Thread safety: a Trainer's methods may be called from any thread; calls on one Trainer are
// serialized by an internal lock (no two run at once). Separate Trainers share no mutable state
// and run fully in parallel, one per thread (tests/library/multi_trainer_test.cc does this).
// StepAsync adds one worker thread per Trainer (started on first use, joined on destruction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mixtrain/communicator.h"
#include "mixtrain/inference_session.h"  // PlanStatistics
#include "mixtrain/memory_statistics.h"
#include "mixtrain/tensor.h"
#include "mixtrain/train_config.h"

namespace mixtrain {
inline namespace v1 {

struct StepOptions {
  // false: the step does not copy the loss back to the host (StepResult::loss is empty), so a
  // service that logs every N steps does not synchronize with the device on the others. Data
  // parallel: ignored, every step reads the loss (averaged over the ranks by a collective that
  // every rank must make).
  bool read_loss = true;
};

// The precision debugger (TrainConfig::debug_precision = N). One watched tensor: every float value
// the step computes before the optimizer (the outputs of the model's forward, the loss and the
// backward) and the float batch inputs, measured in the graph against the range of its dtype.
struct ValueStats {
  std::string value;     // the tensor (for a Cast to a low type: the Cast's output)
  std::string node;      // its producer; "" for a batch input or an initializer
  std::string op_type;   // the producer's op ("initializer" for a weight)
  std::string phase;     // forward, loss or backward
  std::string dtype;     // fp32, fp16, bf16: the type whose range it is measured against
  bool cast_input = false;  // measured on the fp32 input of a Cast to `dtype`: exact counts of
                            // what the conversion turns into inf (overflow) or 0 (underflow)
  std::vector<std::string> inputs;     // the producer's inputs
  std::vector<std::string> consumers;  // the nodes that read it
  int64_t elements = 0;  // summed over the steps measured
  float max_abs = 0;     // largest finite |x|
  int64_t nan = 0, inf = 0;
  int64_t overflow = 0;   // finite but beyond the dtype's range: becomes inf (cast inputs only)
  int64_t underflow = 0;  // non-zero but below half the smallest subnormal: flushed to 0 (cast inputs)
  int64_t subnormal = 0;  // among the dtype's subnormals (precision lost)
  int64_t zero = 0;       // exactly 0 (in a low-precision output: true zeros and flushed values)
};

// What made a step skip: the first watched value, in graph order, holding inf or NaN (or
// overflowing the Cast it feeds), with the statistics of its producer's inputs in that step.
struct NonFiniteReport {
  int64_t step = 0;  // 1-based Step() call
  ValueStats value;
  std::vector<ValueStats> inputs;
};

struct PrecisionStatistics {
  int64_t steps = 0;               // steps measured (every N-th, and every skipped one)
  std::vector<ValueStats> values;  // in graph order; counts summed over the steps
  std::vector<NonFiniteReport> skipped;  // one per diagnosed skipped step (the first 1000)
  int64_t skipped_steps = 0;             // skipped steps diagnosed in all
};

struct StepResult {
  std::optional<float> loss;  // unscaled loss of the batch; empty when not read
  float loss_scale = 1;       // the scale this step used (1 without loss scaling; read with the loss)
  // An inf/NaN gradient made the step skip the update. Read with the loss: on a device with its own
  // memory (a GPU) a step without read_loss leaves it false; Trainer::skipped_steps() counts all.
  bool skipped = false;
  float learning_rate = 0;    // the schedule's learning rate for this step
  int64_t step = 0;           // Step() calls so far, this one included
  bool precision_measured = false;        // the precision debugger measured this step
  std::optional<NonFiniteReport> nonfinite;  // debugger on and the step skipped: what overflowed
};

// One evaluation batch's sums; add the batches of a data set with += and read the figures with
// Metrics(). What is measured follows the loss: cross-entropy counts top-1/top-5 hits over every
// labelled position of the logits (N x C, N x C x d..., or N x T x V with the class axis -1;
// labels equal to the ignore index are not counted), mse and l1 sum errors over every element.
struct EvalResult {
  enum class Task { kOther, kClassification, kRegression };
  Task task = Task::kOther;
  double loss_sum = 0;       // the batch's mean loss times its examples
  int64_t examples = 0;      // first dimension of the batch
  int64_t positions = 0;     // labelled positions (classification) or elements (regression)
  int64_t correct = 0;       // top-1: the label's logit is the largest (argmax == label)
  int64_t correct_top5 = 0;  // the label's logit is among the 5 largest
  int64_t classes = 0;       // size of the class axis
  double abs_error_sum = 0;  // regression: sum |output - label|
  double squared_error_sum = 0;

  EvalResult& operator+=(const EvalResult& other);
  // The figures, named as --log-json writes them after "eval_": "loss" always; classification:
  // "perplexity" (exp of the mean cross-entropy), "top1", and "top5" where there are at least 10
  // classes (fractions in [0, 1]); regression: "mae", "rmse". Empty when nothing was evaluated.
  std::vector<std::pair<std::string, double>> Metrics() const;
};

// Where a run stands, saved with a checkpoint so a resumed run continues the same epoch.
struct TrainingPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  // Early stopping's record (`mixtrain train --early-stop`): the lowest evaluation loss so far
  // (unset: none yet), the step it was measured at and the evaluations since, so a resumed run
  // stops where the uninterrupted one would.
  std::optional<double> best_eval_loss;
  int64_t best_eval_step = 0;
  int32_t evals_since_best = 0;
};

// What a checkpoint says about the run that saved it, read without a Trainer (so `mixtrain
// train --resume=CKPT` can start the run from the checkpoint alone).
struct CheckpointInfo {
  TrainConfig config;         // the config the run was started with (model and data paths too)
  TrainingPosition position;
  int64_t steps = 0;          // Step() calls the run had made
  int64_t planned_steps = 0;  // the run's planned length (SetTotalSteps)
  std::string precision;      // how the config resolved: "amp/bf16, loss scaling off"
  int world_size = 1;         // data-parallel ranks of the run
};
// Reads the checkpoint at `path` (the frame checks of Trainer::LoadCheckpoint: truncation,
// checksum, format version); errors name the file.
absl::StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& path);

// How the trainer resolved TrainConfig::precision and loss_scaler.
struct ResolvedPrecision {
  std::string preset;  // "fp32", "amp" or "half"
  ElementType low_type = ElementType::kFloat32;
  std::string loss_scaling;  // "off", "static" or "dynamic"
  std::string note;  // non-empty when the dtype was chosen for the CPU (e.g. auto -> fp32)
};

// Where the trainer runs (TrainConfig::device resolved).
struct ResolvedDevice {
  std::string name;  // "cpu" or "cuda"
  std::string note;  // non-empty when device = auto chose the CPU, saying why
};

enum class GraphFormat {
  kText,  // one line per node and a summary (what `mixtrain dump` prints)
  kDot,   // Graphviz, nodes coloured by compute dtype
  kOnnx,  // a serialized ONNX ModelProto
};

class Trainer {
 public:
  // Imports the ONNX model at `model_path` (or serialized ModelProto bytes) and builds the
  // training step configured by `config`.
  //
  // Data parallel (config.data_parallel; docs/distributed.md): the step averages the gradients
  // over `communicator`'s ranks (MPI's world, Communicator::MpiWorld(), when null), so every rank
  // holds the same weights. Each rank creates its Trainer with the same model and config (checked
  // here: a mismatch fails on every rank, naming the field or the model), feeds Step its own 1/K
  // of each global batch, and calls Step, SaveCheckpoint and LoadCheckpoint in step with the
  // others. Step's loss is the mean over the ranks; rank 0 writes checkpoints.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const std::string& model_path,
                                                         const TrainConfig& config = {},
                                                         std::shared_ptr<Communicator> communicator = nullptr);
  static absl::StatusOr<std::unique_ptr<Trainer>> CreateFromBytes(std::string_view onnx_bytes,
                                                                  const TrainConfig& config = {},
                                                                  std::shared_ptr<Communicator> communicator = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // What a batch must hold: the model's inputs and the labels (TrainConfig::data.labels_key).
  std::vector<TensorInfo> BatchInputs() const;
  // The model output the loss reads (TrainConfig::output, else the first), shaped as shape
  // inference plans it for the step: -1 for a dim that depends on the batch (its symbol in
  // dim_names). A cross_entropy model's class count is its dim at TrainConfig::class_axis.
  TensorInfo LossOutput() const;
  // Label rows per example of the model's first input: 1, or k when the model flattens its
  // examples' predictions into k rows each (a language model's `logits.view(-1, V)` over N x T
  // tokens: N*T rows of labels, k = T). A data set then holds k label rows per example
  // (Dataset::Create's rows_per_example). 1 when the shapes do not say (no labels, say).
  int64_t LabelRowsPerExample() const;

  // One training step (one micro-batch with gradient accumulation) on `batch`: input name -> tensor.
  absl::StatusOr<StepResult> Step(const TensorMap& batch, StepOptions options = {});
  // Queues the step on the trainer's own thread and returns at once, so the caller can prepare
  // the next batch meanwhile. Queued steps run in call order; every other call on this Trainer
  // first waits for them. Destroying the Trainer runs the steps still queued.
  std::future<absl::StatusOr<StepResult>> StepAsync(TensorMap batch, StepOptions options = {});
  // The loss (and accuracy, for classification) on `batch` with the current weights, in inference
  // form (BatchNorm running statistics, no dropout); no update.
  absl::StatusOr<EvalResult> Evaluate(const TensorMap& batch);

  // Every state tensor (weights, optimizer moments, step counters, loss scale), `position`, the
  // config, a signature of the model and the planned run length (SetTotalSteps), with a format
  // version and a CRC-32, written atomically (a temp file renamed over `path`; a `path` that is a
  // symbolic link or not a regular file is refused). docs/checkpoints.md describes the format.
  absl::Status SaveCheckpoint(const std::string& path, TrainingPosition position = {}) const;
  // Restores a checkpoint saved by a Trainer of the same model and config. Refuses, leaving this
  // Trainer unchanged, a truncated or corrupt file ("truncated", "checksum mismatch"), one of
  // another model (saying which parameter or node differs) or of another config (naming the field
  // and both values; only model, steps, epochs, device, data.path, data.dataset and
  // data.labels_key may differ), and one with invalid contents (a negative step, a non-finite
  // loss scale, missing, unknown or misshapen state). The planned run length of the run that saved
  // it replaces this Trainer's, so a cosine schedule continues exactly as without the interruption.
  absl::StatusOr<TrainingPosition> LoadCheckpoint(const std::string& path);
  // The model with the trained weights in inference form, as ONNX. kFloat16/kBFloat16 store the
  // weights and compute in that type where the precision policy allows.
  // With LoRA (config.lora_rank > 0) the adapters are folded into the weights they adapt: the
  // file has the model's own inputs, outputs, initializer names and shapes.
  absl::Status ExportInferenceModel(const std::string& path,
                                    ElementType type = ElementType::kFloat32) const;
  // LoRA: the adapters alone, an ONNX file of fp32 initializers "<W>.lora_A" [in, rank] and
  // "<W>.lora_B" [rank, out] (docs/lora.md) that config.lora_init reads back to continue.
  absl::Status ExportAdapters(const std::string& path) const;

  // The training-step graph the passes built. As text it is byte for byte what `mixtrain dump
  // --passes=train` prints for the same model and config (the graph, then the precision report);
  // `mixtrain train --show-step=FILE` writes it.
  absl::StatusOr<std::string> TransformedGraph(GraphFormat format = GraphFormat::kText) const;

  // Trainable parameters (fp32 master weights) by initializer name.
  std::vector<std::string> ParameterNames() const;
  absl::StatusOr<HostTensor> GetParameter(const std::string& name) const;
  // Replaces a parameter's value; type and shape must match GetParameter's.
  absl::Status SetParameter(const std::string& name, const HostTensor& value);

  // The Step() calls the whole run will make, for schedules that need the run's length (cosine).
  // Defaults to config().steps; a run bounded by epochs sets it once the data size is known.
  // LoadCheckpoint replaces it with the checkpoint's; calling this after LoadCheckpoint changes
  // the resumed run's schedule on purpose.
  void SetTotalSteps(int64_t steps);

  int64_t steps_taken() const;  // Step() calls so far (restored by LoadCheckpoint)
  // The training step's memory plan for the last Step's batch shapes; empty before the first Step.
  std::optional<PlanStatistics> StepPlanStatistics() const;
  // Where the memory goes: planned by the last Step's plan (and the evaluation's, once Evaluate
  // ran) and measured from the process; empty before the first Step.
  std::optional<MemoryStatistics> StepMemoryStatistics() const;
  // Updates skipped so far for an inf/NaN gradient (restored by LoadCheckpoint). Counted on the
  // device: unlike StepResult::skipped it includes steps run without read_loss.
  absl::StatusOr<int64_t> skipped_steps() const;
  int rank() const;        // data parallel: this process's rank (0 otherwise)
  int world_size() const;  // data parallel: the rank count (1 otherwise)

  // Per-node kernel timing of the training step: with it on, each kernel is synchronized and
  // timed (steps get a little slower). Profile() sums the steps run with it on, one row per node
  // that ran, in graph order; `phase` is forward, loss, backward or optimizer.
  struct NodeTime {
    std::string node, op_type, phase;
    int64_t calls = 0;
    double seconds = 0;
    int64_t allocations = 0;  // heap allocations while it ran (counted with SetHeapAllocationCounter)
    double flops = 0;         // arithmetic of its calls (matrix products and convolutions only)
    double bytes = 0;         // bytes of its inputs and outputs over its calls
  };
  void SetProfiling(bool on);
  std::vector<NodeTime> Profile() const;
  void ResetProfile();
  ResolvedPrecision precision() const;
  ResolvedDevice device() const;
  const TrainConfig& config() const;

  // The precision debugger's statistics (TrainConfig::debug_precision = N > 0): every N-th step
  // (the first included) runs with the statistics nodes and copies them back; the other steps do
  // no extra work and no extra synchronization. A skipped step that was not measured is measured
  // by a dry rerun (same batch, loss scale and random draws; nothing written), so every skipped
  // step is diagnosed. `which`: kSummary sums every measured step; kLast is the latest alone.
  // FailedPrecondition when the debugger is off; kLast before any measured step is empty.
  enum class StatisticsOf { kSummary, kLast };
  absl::StatusOr<PrecisionStatistics> PrecisionStats(StatisticsOf which = StatisticsOf::kSummary) const;

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace v1
}  // namespace mixtrain
