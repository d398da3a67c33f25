// Plumbing shared by the oneDNN-backed backward kernels (grad_conv.cc, grad_pool.cc): which
// dtype oneDNN computes a backward op in, and staging of tensors stored in another type through
// fp32 scratch. fp32 runs natively; bf16 runs natively where the CPU has native bf16 dot
// products (oneDNN's avx512_core_bf16 / AMX kernels), and is staged through fp32 elsewhere
// (oneDNN has no bf16 backward below avx512_core); fp16 is always staged, as in the forward
// kernels.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/dnnl_common.h"

namespace mixtrain::cpu {

// The storage type oneDNN reads and writes for tensors stored as `t`.
DType GradComputeType(DType t);

// Stages every tensor whose storage type oneDNN does not compute in (GradComputeType) via fp32.
class GradStaging : public dnnl_util::Fp32Staging {
 public:
  GradStaging() : Fp32Staging(GradComputeType(DType::kBF16) != DType::kBF16) {}
};

// oneDNN's logical weights of a (grouped) convolution over ONNX's [M, C/G, k...] bytes:
// [G, M/G, C/G, k...] when G > 1 (the same bytes), else the ONNX dims.
std::vector<int64_t> GroupedWeightDims(const std::vector<int64_t>& w, int64_t group);

}  // namespace mixtrain::cpu
