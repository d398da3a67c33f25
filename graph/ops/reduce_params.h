// Which axes a Reduce* node reduces, shared by the shape rules (graph/ops/reduce_ops.cc) and the
// CPU kernels (kernels/cpu/reduce.cc) so the planned output shape and the kernel always agree.
// Errors carry no node name; callers prefix it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mixtrain::reduce {

// Per-dimension "is reduced" mask of a Reduce* node over an input of rank `rank`. Axes come from
// the `axes` attribute (opset < 18; ReduceSum < 13) or from input 1 (`axes_input`, null when the
// input is omitted). No axes means every axis, or none at all (the identity) when
// noop_with_empty_axes=1.
absl::StatusOr<std::vector<bool>> ReduceMask(const Node& node,
                                             const std::vector<int64_t>* axes_input, int64_t rank);

// The output dims: reduced dims become 1 (keepdims) or disappear.
std::vector<int64_t> ReducedDims(const std::vector<int64_t>& dims, const std::vector<bool>& mask,
                                 bool keepdims);

}  // namespace mixtrain::reduce
