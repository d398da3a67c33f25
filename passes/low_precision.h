// InferenceOptions::compute_type (`mixtrain run/bench --dtype=fp16|bf16`), the "everything in the
// low type" baseline without a precision policy: every fp32 tensor of the model (initializers,
// Constant values, fp32 graph inputs, Casts to fp32) becomes the low type, so every float op runs
// in it; callers cast the outputs back to fp32.
#pragma once

#include "absl/status/status.h"
#include "graph/graph.h"

namespace mixtrain {

// Rewrites `g` in place to compute in `low` (f16 or bf16) instead of f32.
absl::Status LowerFloatModel(Graph& g, DType low);

}  // namespace mixtrain
