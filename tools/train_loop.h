// `mixtrain train`'s loop over the steps, once the model, the data and a checkpoint are in place:
// progress lines with an ETA, evaluation every N steps and at each epoch's end (with early
// stopping and the best checkpoint kept), checkpoints every N steps, and the stop that SIGTERM
// or SIGINT asks for (the step finishes, a checkpoint is saved).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mixtrain/mixtrain.h"
#include "tools/train_outputs.h"

namespace mixtrain::cli {

struct TrainLoop {
  Trainer* trainer = nullptr;
  const Dataset* train = nullptr;
  const Dataset* test = nullptr;  // null: no evaluation
  int64_t batch_size = 0, eval_batch_size = 0;
  bool fixed_batch = false;  // the model takes batches of one size only
  int64_t per_epoch = 0;     // batches
  int64_t total = 0;         // steps of the whole run
  int rank = 0, ranks = 1;
  std::shared_ptr<Communicator> world;  // data parallel: the ranks agree on stopping
  TrainingPosition start;
  TrainConfig::Run run;
  bool shuffle = true;
  uint64_t seed = 0;
  bool profile = false;
  std::FILE* info = stderr;
  RunLog* log = nullptr;
};

struct TrainLoopEnd {
  TrainingPosition position;  // where the run stands now (what a checkpoint saves)
  int64_t skipped = 0;        // updates this call skipped
  double seconds = 0;
  int stop_signal = 0;        // non-zero: SIGTERM/SIGINT stopped it; saved at `saved_to`
  bool early_stopped = false;
  std::string saved_to;       // the last checkpoint written and its step (-1: none)
  int64_t saved_step = -1;
};

// Steps from loop.start until loop.total (or a stop). Checkpoints go to run.save (every
// run.save_every steps, at epoch ends, and when stopped; on a signal without run.save, to
// "interrupted-step<N>.ckpt" in the working directory).
absl::StatusOr<TrainLoopEnd> RunTrainLoop(const TrainLoop& loop);

// The evaluation over all of `ds` in batches of `bs` (a model with a fixed batch drops the last
// partial one), and its line: "test loss 0.4123  test accuracy 85.20%  ... (10000 examples)".
absl::StatusOr<EvalResult> EvaluateAll(Trainer& t, const Dataset& ds, int64_t bs, bool fixed);
std::string EvalLine(const EvalResult& e);

}  // namespace mixtrain::cli
