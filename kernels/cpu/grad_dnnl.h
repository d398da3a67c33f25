// Plumbing shared by the oneDNN-backed backward kernels (grad_conv.cc, grad_pool.cc). They
// compute in dnnl_util::ComputeType and stage the rest through fp32, as the forward kernels do.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/dnnl_common.h"

namespace mixtrain::cpu {

// oneDNN's logical weights of a (grouped) convolution over ONNX's [M, C/G, k...] bytes:
// [G, M/G, C/G, k...] when G > 1 (the same bytes), else the ONNX dims.
std::vector<int64_t> GroupedWeightDims(const std::vector<int64_t>& w, int64_t group);

}  // namespace mixtrain::cpu
