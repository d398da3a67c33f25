// Evaluation metrics (runtime/eval_metrics.h).
#include "runtime/eval_metrics.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mixtrain {
namespace {

std::vector<float> AsFloats(const Tensor& t) {
  Tensor f = ConvertFloat(t, DType::kF32);
  if (f.dtype() == DType::kF32) return {f.data_as<float>(), f.data_as<float>() + f.numel()};
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<float>(t.GetDouble(i));
  return out;
}

std::string Shape(const Tensor& t) { return absl::StrCat("[", absl::StrJoin(t.dims(), ", "), "]"); }

absl::Status Classification(const EvalMetricsSpec& spec, const Tensor& logits, const Tensor& labels,
                            EvalCounts& counts) {
  const int64_t rank = logits.rank();
  const int64_t axis = spec.class_axis < 0 ? spec.class_axis + rank : spec.class_axis;
  if (axis < 0 || axis >= rank)
    return absl::InvalidArgumentError(absl::StrCat("logits ", Shape(logits), " have no class axis ", spec.class_axis));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= logits.dims()[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= logits.dims()[d];
  const int64_t classes = logits.dims()[axis];
  if (labels.numel() != outer * inner)
    return absl::InvalidArgumentError(absl::StrCat("labels ", Shape(labels), " do not match logits ",
                                                   Shape(logits), " with class axis ", spec.class_axis));
  const std::vector<float> x = AsFloats(logits);
  const std::vector<int64_t> y = labels.ToInt64Vector();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t label = y[o * inner + i];
      if (spec.ignore_index && label == *spec.ignore_index) continue;
      ++counts.positions;
      if (label < 0 || label >= classes) continue;  // a label outside the classes is a miss
      const float* row = &x[o * classes * inner + i];
      const float target = row[label * inner];
      // The label's rank: classes scoring above it, and those tied with it that come first
      // (argmax takes the first of equal values). One pass, no sort.
      int64_t above = 0;
      bool nan = std::isnan(target);
      for (int64_t c = 0; c < classes && !nan; ++c) {
        const float v = row[c * inner];
        nan = std::isnan(v);
        above += v > target || (v == target && c < label);
      }
      if (nan) continue;
      counts.correct += above == 0;
      counts.correct_top5 += above < 5;
    }
  return absl::OkStatus();
}

absl::Status Regression(const Tensor& output, const Tensor& labels, EvalCounts& counts) {
  if (output.numel() != labels.numel())
    return absl::InvalidArgumentError(absl::StrCat("output ", Shape(output), " and labels ", Shape(labels),
                                                   " differ in size"));
  const std::vector<float> y = AsFloats(output), t = AsFloats(labels);
  for (size_t i = 0; i < y.size(); ++i) {
    const double e = static_cast<double>(y[i]) - static_cast<double>(t[i]);
    counts.abs_error_sum += std::abs(e);
    counts.squared_error_sum += e * e;
  }
  counts.positions += output.numel();
  return absl::OkStatus();
}

}  // namespace

absl::Status AccumulateEvalCounts(const EvalMetricsSpec& spec, const Tensor& output,
                                  const Tensor& labels, EvalCounts& counts) {
  switch (spec.task) {
    case EvalTask::kClassification: return Classification(spec, output, labels, counts);
    case EvalTask::kRegression: return Regression(output, labels, counts);
    case EvalTask::kOther: return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace mixtrain
