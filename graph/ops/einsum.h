// Einsum's equation, parsed once for the shape rule (graph/ops/einsum.cc) and the CPU
// kernel (kernels/cpu/einsum.cc), so the planned output shape and the kernel agree.
// Errors carry no node name; callers prefix it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mixtrain::einsum {

// Labels are small ints: letters as their char code; the dims an ellipsis stands for as
// kEllipsisBase + k, k counted from the right (so broadcast ellipses line up).
inline constexpr int kEllipsisBase = 1000;

struct Plan {
  std::vector<std::vector<int>> inputs;  // one label per dim of each input
  std::vector<int> output;               // one label per output dim
  std::vector<int> labels;               // every distinct label, output labels first
  std::vector<int64_t> sizes;            // size of each entry of `labels`
};

// Parses `equation` ("bij,bjk->bik", "...ii->...i", implicit "i,i") against the inputs' dims;
// without "->" the output is the ellipsis dims then the labels used once, alphabetically.
// Ellipsis dims broadcast numpy-style (size 1 against n).
absl::StatusOr<Plan> Parse(const std::string& equation,
                           const std::vector<std::vector<int64_t>>& input_dims);

// The output dims of a plan.
std::vector<int64_t> OutputDims(const Plan& p);

}  // namespace mixtrain::einsum
