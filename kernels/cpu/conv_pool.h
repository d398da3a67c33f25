// FusedConv with a max pool folded in (pool_kernel_shape, graph/ops/fused_conv_ops.cc): an
// image's first conv (few NC<sp> input channels) into a channel-blocked, pooled Y, computed
// directly so that the full-resolution conv output never goes to memory.
#pragma once

#include <vector>

#include "kernels/registry.h"

namespace mixtrain {

// The weights regrouped per output block (cpu::PackStemWeights) and the bias, in fp32; kept
// across calls while they are constant.
struct ConvPoolWeights {
  std::vector<float> w, bias;
  bool packed = false;
};

// Computes ctx's FusedConv (X [N, C, H, W], Y [N, M/16, PH, PW, 16]) with its max pool.
absl::Status ConvMaxPool(KernelContext& ctx, ConvPoolWeights& cache);

}  // namespace mixtrain
