// What `mixtrain train` leaves behind while a long run goes on: checkpoints every N steps with the
// last K kept, the stop request of SIGTERM/SIGINT (finish the step, save, exit non-zero), and the
// logs, one row per step and per evaluation, to --log-json and to TensorBoard (--log-dir).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mixtrain/summary_writer.h"
#include "mixtrain/trainer.h"
#include "tools/cli.h"

namespace mixtrain::cli {

// SIGTERM (what a cluster scheduler sends before preempting) and SIGINT (Ctrl-C) ask the run to
// stop after the current step; a second one ends the process at once (the default action).
void InstallStopHandlers();
int StopSignal();  // the signal received, 0 when none

// Checkpoints at one path (--save): each save replaces it atomically. With keep > 1 the last
// `keep` saves stay, each under its step-numbered name beside it ("run.ckpt" ->
// "run-step1200.ckpt", a hard link to the file just written, so no second write); the path names
// the newest, and older numbered ones are removed.
class CheckpointKeeper {
 public:
  CheckpointKeeper(std::string path, int keep) : path_(std::move(path)), keep_(keep) {}
  // Saves `t` at `path` (every rank calls it; rank 0 writes and rotates).
  absl::Status Save(const Trainer& t, const TrainingPosition& position) const;
  const std::string& path() const { return path_; }
  // The step-numbered name of the checkpoint of `step`.
  std::string NumberedPath(int64_t step) const;

 private:
  std::string path_;
  int keep_;
};

// The rows of a run's logs. --log-json: one JSON object per line, a step row {"step", "loss",
// "loss_scale", "skipped", "lr", "ms"} or an evaluation row {"step", "epoch", "eval_loss", ...,
// "eval_examples"}; the file appears when the run ends (Commit). --log-dir: the same figures as
// TensorBoard scalars ("train/loss", "eval/top1", ...).
class RunLog {
 public:
  // Either may be empty (not logged). `json_path`'s flag was checked by CheckOutputPath.
  static absl::StatusOr<std::unique_ptr<RunLog>> Open(const std::string& json_path, const std::string& log_dir);
  bool json() const { return json_ != nullptr; }
  bool tensorboard() const { return events_ != nullptr; }
  std::string event_file() const { return events_ ? events_->path() : ""; }

  struct StepRow {
    int64_t step = 0;
    float loss = 0;  // NaN when not read (or not finite)
    bool read = false;  // the step read its loss (and so its scale and skip flag)
    float loss_scale = 1;
    bool skipped = false;
    float lr = 0;
    double ms = 0;
  };
  absl::Status Step(const StepRow& row);
  // TensorBoard only, on log steps: the window's throughput and the run's skipped updates.
  absl::Status Progress(int64_t step, double examples_per_s, double ms_per_step, int64_t skipped);
  absl::Status Eval(int64_t step, int64_t epoch, const EvalResult& e);
  // The JSON file appears at its path; the event file is complete after every row already.
  absl::Status Commit();

 private:
  std::unique_ptr<AtomicOutputFile> json_log_;
  std::FILE* json_ = nullptr;
  std::unique_ptr<SummaryWriter> events_;
};

}  // namespace mixtrain::cli
