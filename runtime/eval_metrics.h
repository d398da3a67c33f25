// What Trainer::Evaluate measures beyond the loss, chosen by the loss and the logits' shape:
// classification (cross-entropy) counts top-1 and top-5 hits over every labelled position of N x C,
// N x C x d... or N x T x V logits; regression (mse, l1) sums absolute and squared errors over
// every element. Kept apart from the trainer so the arithmetic is tested on its own.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "graph/tensor.h"

namespace mixtrain {

// Sums over the batches of an evaluation; the reported figures are ratios of them.
struct EvalCounts {
  int64_t positions = 0;     // labelled positions (classification) or elements (regression)
  int64_t correct = 0;       // top-1: the label's logit is the largest (the first, on ties)
  int64_t correct_top5 = 0;  // the label's logit is among the 5 largest
  double abs_error_sum = 0;  // regression: sum |y - t|
  double squared_error_sum = 0;
};

enum class EvalTask { kClassification, kRegression, kOther };

struct EvalMetricsSpec {
  EvalTask task = EvalTask::kOther;
  int64_t class_axis = 1;                // classification; negative counts from the end
  std::optional<int64_t> ignore_index;   // labels equal to it are not counted
};

// Adds one batch's counts to `counts`. Classification: `labels` has the logits' shape without the
// class axis (numel = positions); a position whose logits hold NaN is a miss. Regression: `output`
// and `labels` have the same number of elements. Errors name the mismatching shapes.
absl::Status AccumulateEvalCounts(const EvalMetricsSpec& spec, const Tensor& output,
                                  const Tensor& labels, EvalCounts& counts);

}  // namespace mixtrain
