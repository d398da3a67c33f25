// Parameter arithmetic shared by the data-movement ops' shape-inference rules (graph/ops/
// movement_ops.cc) and their kernels (kernels/cpu/movement_*.cc), so that the planned output shape
// and what the kernel reads can never disagree: Slice's clamping, Pad's pads/axes expansion, Shape's
// start/end window, axis normalization. Errors carry no node name; callers prefix it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace mixtrain::movement {

// Maps an ONNX axis in [-rank, rank) to [0, rank); an error names the axis and rank.
absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank);
// Normalizes every axis and rejects duplicates.
absl::StatusOr<std::vector<int64_t>> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank);

// One axis of a Slice after ONNX's rules (negative start/end count from the end, then clamp to
// [0, dim] for positive steps and [-1, dim-1] for negative ones): the first index read and the
// number of elements produced.
struct SliceAxis {
  int64_t start = 0;
  int64_t count = 0;
};
SliceAxis ComputeSliceAxis(int64_t dim, int64_t start, int64_t end, int64_t step);

// Per-dimension start/step for all `rank` dims (dims not sliced get start 0, step 1) from Slice's
// starts/ends/axes/steps; empty axes = [0..n), empty steps = all 1. `dims` may hold -1 for unknown
// sizes; count is then -1 unless the slice is the identity (start 0, end past the end, step 1),
// where the dim is kept (count -2 means "same as input").
struct SlicePlan {
  std::vector<int64_t> start, step, count;
};
inline constexpr int64_t kSameAsInput = -2;
absl::StatusOr<SlicePlan> PlanSlice(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& starts,
                                    const std::vector<int64_t>& ends,
                                    const std::vector<int64_t>& axes,
                                    const std::vector<int64_t>& steps);

// Pad's amounts as [begin_0..begin_{r-1}, end_0..end_{r-1}] from the pads input (2*len(axes)
// entries in the same layout) and optional axes (opset 18; empty = all dims).
absl::StatusOr<std::vector<int64_t>> ExpandPads(int64_t rank, const std::vector<int64_t>& pads,
                                                const std::vector<int64_t>& axes);

// Shape's [start, end) window (opset 15) over a tensor of rank `rank`, clamped like Slice.
struct Window {
  int64_t begin = 0, end = 0;
};
Window ShapeWindow(int64_t rank, int64_t start, int64_t end);

// The number of elements Range produces: max(ceil((limit - start) / delta), 0).
absl::StatusOr<int64_t> RangeCount(double start, double limit, double delta);

}  // namespace mixtrain::movement
