// Trainer: the training step as one graph, built by the pass pipeline (train mode, loss,
// precision, loss scale, autodiff, optimizer, cleanup) from an ONNX model and a pb::TrainConfig, and
// run by a Session with fp32 master weights as state. Also an eval graph (the model in inference
// form with the same precision policy) sharing the trained weights, checkpoints and export.
//
// Thread safety: a Trainer is used from one thread at a time; several Trainers may run
// concurrently in one process (no global mutable state besides the immutable op/kernel tables).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "kernels/backend.h"
#include "mixtrain/communicator.h"
#include "passes/precision_policy.h"
#include "runtime/eval_metrics.h"
#include "runtime/memory_report.h"
#include "passes/training.h"
#include "proto/mixtrain_pb.h"
#include "runtime/precision_debugger.h"
#include "runtime/session.h"

namespace mixtrain {

struct StepResult {
  float loss = 0;        // unscaled loss of the batch
  float loss_scale = 1;  // the scale used by this step (1 without loss scaling)
  bool skipped = false;  // an inf/NaN gradient skipped the update
  float lr = 0;          // learning rate of this step
  bool precision_gathered = false;  // the precision debugger measured this step
  std::optional<PrecisionDiagnosis> nonfinite;  // a skipped step's first non-finite value
};

struct EvalResult {
  double loss_sum = 0;  // sum over examples of the loss
  int64_t examples = 0;
  EvalTask task = EvalTask::kOther;
  int64_t classes = 0;  // classification: size of the class axis
  EvalCounts counts;    // runtime/eval_metrics.h
};

// How the trainer resolved the config (printed by `train`, kept in checkpoints).
struct ResolvedPrecision {
  PrecisionPreset preset = PrecisionPreset::kFp32;
  DType low = DType::kF32;
  std::string scaling;  // off | static | dynamic
  std::string note;     // why --dtype=auto chose what it did, when the user should know
};

// Where a run stands beyond the trainer's state, saved with a checkpoint: the epoch and batch to
// continue from, and early stopping's record (the lowest evaluation loss, its step, and the
// evaluations since it) so a resumed run stops where the uninterrupted one would.
struct CheckpointPosition {
  int64_t epoch = 0, batch = 0;
  std::optional<double> best_eval_loss;
  int64_t best_eval_step = 0;
  int32_t evals_since_best = 0;
};

struct StepNodeTime {
  const Node* node = nullptr;
  StepPhase phase = StepPhase::kForward;
  int64_t calls = 0;
  double seconds = 0;
  int64_t allocations = 0;
  double flops = 0, bytes = 0;
};

class Trainer {
 public:
  // The model from a file (or ONNX bytes with CreateFromBytes), configured by `config`. With
  // config.data_parallel the step averages gradients over `communicator`'s ranks (MPI's world
  // when null); every rank must create its Trainer with the same model and config (checked here:
  // a mismatch fails on every rank, naming what differs).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const std::string& model_path,
                                                         const pb::TrainConfig& config,
                                                         std::shared_ptr<Communicator> communicator = nullptr);
  static absl::StatusOr<std::unique_ptr<Trainer>> CreateFromBytes(
      const std::string& bytes, const pb::TrainConfig& config, std::shared_ptr<Communicator> communicator = nullptr);
  // `device`, when set, is where the step and evaluation run whatever config.device says (tests
  // run the off-host path on a device of their own; see tests/runtime/device_session_test.cc).
  static absl::StatusOr<std::unique_ptr<Trainer>> CreateFromGraph(
      std::unique_ptr<Graph> model, const pb::TrainConfig& config,
      std::shared_ptr<Communicator> communicator = nullptr, std::shared_ptr<Device> device = nullptr);

  // One micro-batch: graph inputs by name plus the labels under config.data.labels_key. With
  // accumulate = N, every N-th call applies the update. `read_loss` = false skips reading the
  // loss back (result.loss is then NaN). Data parallel: `batch` is this rank's shard, every rank
  // calls Step in step, and the loss read is the mean over the ranks.
  // result.skipped is read with the loss; without it, on a device with its own memory, it is false
  // and only SkippedSteps() counts the step.
  absl::StatusOr<StepResult> Step(const std::map<std::string, Tensor>& batch, bool read_loss = true);
  // Updates skipped so far for an inf/NaN gradient (counted on the device; reading it copies 8 bytes).
  absl::StatusOr<int64_t> SkippedSteps() const;
  // Loss (and accuracy for classification) on a batch, in inference form, no update.
  absl::StatusOr<EvalResult> Evaluate(const std::map<std::string, Tensor>& batch);

  // Every state tensor, the step count, `epoch` and `batch`, the config, the model's signature and
  // the planned run length, framed with a format version and a CRC-32 (docs/checkpoints.md) and
  // written atomically. Data parallel: rank 0 writes (every rank calls it; all fail if it fails).
  absl::Status SaveCheckpoint(const std::string& path, const CheckpointPosition& position) const;
  absl::Status SaveCheckpoint(const std::string& path, int64_t epoch = 0, int64_t batch = 0) const {
    return SaveCheckpoint(path, CheckpointPosition{epoch, batch});
  }
  // Restores state; returns the (epoch, batch) position saved with it. Refuses, changing nothing, a
  // file that is truncated or fails its checksum, has a negative counter or a bad loss scale, was
  // made for another model (naming what differs) or another config (naming the field and both
  // values; only where the model and data come from, the run's length and the device may differ),
  // or whose state tensors do not match this trainer's. Adopts the saved planned run length (see
  // set_total_steps), so a schedule continues as the uninterrupted run would. Data parallel: every
  // rank reads it; a checkpoint of another rank count is refused; all fail if any rank fails.
  absl::StatusOr<CheckpointPosition> LoadCheckpointPosition(const std::string& path);
  absl::StatusOr<std::pair<int64_t, int64_t>> LoadCheckpoint(const std::string& path) {
    MT_ASSIGN_OR_RETURN(CheckpointPosition p, LoadCheckpointPosition(path));
    return std::make_pair(p.epoch, p.batch);
  }
  // The model with the trained weights in inference form (BatchNorm with running statistics);
  // `dtype` f16/bf16 stores weights and computes in the low type where the policy allows.
  // With LoRA the adapters are folded into the weights they adapt (W + (alpha/rank)·A·B): the
  // file has the model's own initializers and shapes, and no adapter.
  absl::Status ExportInferenceModel(const std::string& path, DType dtype = DType::kF32) const;
  // LoRA: the adapters alone, as an ONNX file of fp32 initializers "<W>.lora_A" [in, rank] and
  // "<W>.lora_B" [rank, out] with metadata_props mixtrain.lora.rank and mixtrain.lora.alpha
  // (docs/lora.md); config.lora_init reads it back. Fails when the run has no adapters.
  absl::Status ExportAdapters(const std::string& path) const;

  const Graph& TransformedGraph() const { return *train_graph_; }
  const Graph& EvalGraph() const { return *eval_graph_; }
  // The model output the loss reads, in the evaluation graph (shaped by shape inference).
  const Value& LossOutput() const;
  // Rows of labels per example of the first input: the labels' first dim over the input's, when
  // shape inference makes it a whole number (k = T for logits flattened to N*T rows); else 1.
  int64_t LabelRowsPerExample() const;
  std::vector<std::string> ParameterNames() const { return params_; }
  absl::StatusOr<Tensor> GetParameter(const std::string& name) const;
  absl::Status SetParameter(const std::string& name, const Tensor& value);
  // Every state tensor (params, moments, counters, scaler, BN stats) by name.
  absl::StatusOr<std::map<std::string, Tensor>> State() const;

  int64_t calls() const { return calls_; }  // Step() calls so far
  // The training step's memory plan for the last Step's shapes (null before the first Step).
  std::optional<PlanStats> step_plan_stats() const { return train_->last_plan_stats(); }
  // Where the memory goes, planned (the last Step's plan and the evaluation's, once it ran) and
  // measured (the process); null before the first Step.
  std::optional<MemoryReport> memory_report() const;
  // Per-node kernel timing of the training step (each kernel synchronized and timed; a little
  // slower while on). Profile() sums the steps run with it on, by node in graph order.
  void set_profiling(bool on) { train_->set_profiling(on); }
  std::vector<StepNodeTime> Profile() const;
  void ResetProfile() { train_->ResetProfile(); }
  const ResolvedPrecision& precision() const { return precision_; }
  // Where the step runs ("cpu" or "cuda"), and why when config.device = auto chose the CPU.
  const char* device_name() const { return DeviceName(device_->type()); }
  const std::string& device_note() const { return device_note_; }
  const pb::TrainConfig& config() const { return config_; }
  // The precision debugger (config.debug_precision = N > 0): statistics of every N-th step (the
  // first included) and of every skipped step, which a dry rerun measures when it was not one of
  // them. Null when the debugger is off.
  const PrecisionDebugger* precision_debugger() const { return debugger_.get(); }
  // Learning rate for update number `update` (0-based) by the schedule.
  float LearningRate(int64_t update) const;
  // Step() calls the whole run will make; schedules that need the run's length (cosine) use it.
  // Defaults to config.steps(); a run bounded by epochs sets it once the data size is known.
  // LoadCheckpoint replaces it with the length the checkpoint's run planned; setting it after
  // loading changes the schedule of the resumed run deliberately.
  void set_total_steps(int64_t steps) { total_steps_ = steps; }
  int64_t total_steps() const { return total_steps_; }
  std::string input_name() const { return input_name_; }
  // Data parallel: this process's rank and the rank count (0 and 1 otherwise).
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world_size() const { return comm_ ? comm_->size() : 1; }

 private:
  Trainer() = default;
  // Picks the device (config.device: cpu, cuda, or auto = cuda where a GPU is usable and has a
  // kernel for every op of the step, else the CPU with a note) and builds there.
  absl::Status Build(std::unique_ptr<Graph> model);
  // Builds the step and eval graphs for `backend` and their sessions on `device` (one of its
  // devices). Off the CPU, returns what the backend lacks for them ("" when nothing) before
  // creating any session (runtime/backend_choice.h).
  absl::StatusOr<std::string> BuildOn(std::unique_ptr<Graph> model, const Backend& backend,
                                      std::shared_ptr<Device> device);
  // Data parallel: every rank has the same model signature and config (less where files are).
  absl::Status CheckRanksAgree() const;
  // Data parallel: `mine` on this rank, an error on every rank when any rank failed.
  absl::Status AgreeOnSuccess(const absl::Status& mine, const std::string& what) const;
  absl::StatusOr<CheckpointPosition> LoadCheckpointHere(const std::string& path);
  // The precision statistics of the step just run, measured by a dry rerun of it.
  absl::StatusOr<Tensor> RerunForStatistics(const std::map<std::string, Tensor>& feeds, float loss_scale);
  // Copies trained parameters and BN statistics into the eval session, where it does not read
  // the step's buffers themselves.
  absl::Status SyncEval();
  // Before the step's session writes its state in place (host memory), when the model came from
  // the caller (who may hold clones sharing its tensors): each state tensor the model brought is
  // copied first, so training changes only the trainer's own graphs (the canonical model, the
  // step and the evaluation graph). A model the trainer imported itself is its own.
  void OwnStateBuffers();
  // Trainer::Create and CreateFromBytes import the model themselves.
  static absl::StatusOr<std::unique_ptr<Trainer>> CreateFromOwnGraph(
      std::unique_ptr<Graph> model, const pb::TrainConfig& config, std::shared_ptr<Communicator> communicator,
      std::shared_ptr<Device> device, bool model_is_ours);
  bool model_is_ours_ = false;

  pb::TrainConfig config_;
  ResolvedPrecision precision_;
  std::unique_ptr<Graph> model_;  // as imported, for export
  std::shared_ptr<Graph> train_graph_, eval_graph_;
  std::unique_ptr<Session> train_, eval_;
  std::vector<std::string> params_;
  std::vector<std::string> state_names_;  // targets of state updates
  std::string input_name_, output_name_, labels_name_;
  EvalMetricsSpec eval_spec_;
  bool eval_stale_ = true;
  int64_t calls_ = 0;
  int64_t total_steps_ = 0;
  pb::ModelSignature signature_;  // of model_ and params_, saved with checkpoints
  std::unique_ptr<PrecisionDebugger> debugger_;
  std::shared_ptr<Communicator> comm_;  // data parallel; null otherwise
  std::shared_ptr<Device> device_;      // shared by the step and eval sessions
  std::string device_note_;
};

// The checkpoint file format: "MXTRCKPT", version (u32 LE), payload length (u64 LE), the
// serialized pb::Checkpoint, CRC-32 (u32 LE) of everything before it. Decode checks the frame
// only (truncation, checksum, version), naming `path` in errors; LoadCheckpoint checks the rest.
inline constexpr uint32_t kCheckpointVersion = 1;
absl::StatusOr<std::string> EncodeCheckpoint(const pb::Checkpoint& ck);
absl::StatusOr<pb::Checkpoint> DecodeCheckpoint(std::string_view bytes, const std::string& path);
// Reads and decodes the checkpoint file at `path` (a regular file; DecodeCheckpoint's checks).
absl::StatusOr<pb::Checkpoint> ReadCheckpointFile(const std::string& path);

}  // namespace mixtrain
