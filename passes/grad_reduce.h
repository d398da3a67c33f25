// Shared by the Reduce* gradient rules (passes/grad_rules_movement.cc,
// grad_rules_onnx_coverage.cc).
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "passes/autodiff.h"

namespace mixtrain {

// Which axes a Reduce* node reduced (`mask`, when known statically), and dY and Y with those
// axes restored as size 1 so they broadcast against X. Axes computed at run time (or X's rank
// unknown) need no statics: with keepdims=1 dY already broadcasts; with keepdims=0 Unsqueeze
// takes the same run-time axes (negative ones count from X's rank, which is Unsqueeze's output
// rank). Empty or absent axes need nothing either way: a full reduction leaves a scalar, which
// broadcasts, and noop_with_empty_axes leaves Y = X.
struct Reduced {
  std::optional<std::vector<bool>> mask;
  Value* dy_keep = nullptr;  // dY broadcastable against X
  Value* y_keep = nullptr;   // Y broadcastable against X
};
absl::StatusOr<Reduced> ReducedOf(GradContext& c);

}  // namespace mixtrain
