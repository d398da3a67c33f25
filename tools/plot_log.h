// The log of `mixtrain train --log-json` read back for `mixtrain plot`: one flat JSON object per
// line, a step {"step": 12, "loss": 0.43, "loss_scale": 65536, "skipped": false, "lr": 0.001,
// "ms": 11.2} or an evaluation {"step": 12, "epoch": 1, "eval_loss": 0.5, "eval_top1": 0.8, ...,
// "eval_examples": 1000}, non-finite numbers written as null. Parsed by nlohmann-json and read
// strictly: any other line is an error that names the file and line, so a plot is never drawn
// from a half-understood file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mixtrain::cli {

// One step; a null number (NaN or infinite when written) is NaN here.
struct LogStep {
  int64_t step = 0;
  double loss = 0, loss_scale = 0, lr = 0, ms = 0;
  bool skipped = false;
};

// One evaluation: the step it followed and its figures by name without "eval_" ("loss", "top1",
// "perplexity", "mae", ...); a null figure is NaN.
struct LogEval {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> metrics;
  double Metric(const std::string& name) const;  // NaN when absent
};

struct TrainLog {
  std::string path;  // as given
  std::string name;  // its basename, for the legend
  std::vector<LogStep> steps;  // at least one, steps strictly increasing
  std::vector<LogEval> evals;  // steps not decreasing
};

// Parses a log's text. Keys other than the six are ignored (a later version may add some) but
// must still hold a number, string, boolean or null: the lines are flat objects. Errors read
// "PATH:LINE: what is wrong"; a text with no step is "PATH: empty log".
absl::StatusOr<TrainLog> ParseTrainLog(const std::string& path, const std::string& text);
// Reads and parses a log file (cli::ReadInputFile's checks: a regular file that exists).
absl::StatusOr<TrainLog> ReadTrainLog(const std::string& path);

}  // namespace mixtrain::cli
