// The precision debugger's host side: reads the rows of "precision_stats" (passes/training.h,
// MakePrecisionStatsPass) back into named per-value statistics, sums them over the steps it is
// given, and on a skipped step names the first value, in graph order, that went inf or NaN,
// with the ranges of its producer's inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "kernels/common/precision_stats.h"
#include "passes/training.h"

namespace mixtrain {

// One watched value and its statistics.
struct PrecisionValue {
  std::string value;    // the watched tensor (for a Cast to a low type: the Cast's output)
  std::string node;     // its producer; "" for a graph input or an initializer
  std::string op_type;  // the producer's op
  StepPhase phase = StepPhase::kForward;
  DType dtype = DType::kF32;  // the value's type: the range it was measured against
  bool cast_input = false;    // measured on the Cast's wider input (exact overflow/flush counts)
  std::vector<std::string> inputs;     // the producer's inputs
  std::vector<std::string> consumers;  // the nodes that read `value`
  StatsAccumulator stats;
};

struct PrecisionDiagnosis {
  int64_t step = 0;                    // 1-based Step() call
  PrecisionValue value;                // the first non-finite value in graph order
  std::vector<PrecisionValue> inputs;  // its producer's float inputs, as measured in that step
};

struct PrecisionReport {
  int64_t steps = 0;                    // steps summed in `values`
  std::vector<PrecisionValue> values;   // graph order; counts summed, max_abs the largest
  std::vector<PrecisionDiagnosis> skipped;  // the first kMaxDiagnoses skipped steps
  int64_t skipped_steps = 0;                // all diagnosed skipped steps
};

class PrecisionDebugger {
 public:
  static constexpr size_t kMaxDiagnoses = 1000;
  // Reads the watched values from the training-step graph; fails when it has no statistics.
  static absl::StatusOr<std::unique_ptr<PrecisionDebugger>> Create(const Graph& step);

  // Adds one step's "precision_stats" tensor. `skipped`: the step skipped its update, so it is
  // diagnosed; `initializer` returns the current contents of an initializer the culprit read
  // (weights are not watched in the graph; they did not change, the update was skipped).
  using InitializerFn = std::function<absl::StatusOr<Tensor>(const std::string&)>;
  // Returns the diagnosis when `skipped` (nullopt when no value was non-finite: the overflow was in
  // a value nothing watches, e.g. an optimizer input).
  absl::StatusOr<std::optional<PrecisionDiagnosis>> Record(const Tensor& rows, int64_t step, bool skipped,
                                                           const InitializerFn& initializer);

  const PrecisionReport& summary() const { return summary_; }
  const std::optional<PrecisionReport>& last() const { return last_; }  // the latest step added

 private:
  PrecisionDebugger() = default;
  std::vector<PrecisionValue> watched_;
  absl::flat_hash_map<std::string, size_t> row_of_value_;  // value name -> row (last writer)
  absl::flat_hash_map<std::string, const Value*> initializers_;
  PrecisionReport summary_;
  std::optional<PrecisionReport> last_;
};

// A tensor's statistics measured on the host against `range`'s dtype.
StatsAccumulator MeasureOnHost(const Tensor& t, DType range);

}  // namespace mixtrain
