// The registry's CPU kernels run on host tensors, outside any plan (every backend's host is a
// CPU): the planner folds small computations with ComputeOnHost, and EvaluateOnHost is the
// HostEvaluator every backend's Target hands the passes that fold constants (passes/target.h),
// so they compute what the graph would.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/shape_inference.h"
#include "kernels/registry.h"

namespace mixtrain {

// Runs the CPU kernel `def` for `node` on host memory, its outputs allocated with `out_types`. A
// null entry of `inputs` is an omitted optional input.
absl::StatusOr<std::vector<Tensor>> ComputeOnHost(const Node& node, int64_t opset, const KernelDef& def,
                                                  const std::vector<const TensorView*>& inputs,
                                                  const std::vector<TypeInfo>& out_types);

// Infers `node`'s outputs from `inputs`, finds its CPU kernel and runs it.
absl::StatusOr<std::vector<Tensor>> EvaluateOnHost(const Node& node, int64_t opset,
                                                   const std::vector<const Tensor*>& inputs);

}  // namespace mixtrain
