// The device copy of a separable map's adjoint tables (kernels/common/separable_map.h) for
// LaunchSeparableAdjoint: built on the host once per shape, uploaded on the node's stream, and
// kept (host and device) by the kernel instance. PadGrad and ResizeGrad use it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/separable_map.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/owned_buffer.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {

class AdjointTables {
 public:
  // Uploads `a` for dY of `dy_dims` and dX of the axes' input lengths `dx_dims` (rank <= 8).
  AdjointArgs Upload(void* stream, sep::Adjoint a, const std::vector<int64_t>& dy_dims,
                     const std::vector<int64_t>& dx_dims) {
    host_ = std::move(a);
    packed_ = host_.offsets;
    packed_.insert(packed_.end(), host_.lists.begin(), host_.lists.end());
    const auto s = static_cast<cudaStream_t>(stream);
    auto* ints = static_cast<int64_t*>(ints_.Get(std::max<size_t>(packed_.size(), 1) * sizeof(int64_t)));
    if (!packed_.empty())
      MT_CUDA_CHECK(cudaMemcpyAsync(ints, packed_.data(), packed_.size() * sizeof(int64_t), cudaMemcpyHostToDevice, s));
    float* weights = nullptr;
    if (!host_.weights.empty()) {
      weights = static_cast<float*>(weights_.Get(host_.weights.size() * sizeof(float)));
      MT_CUDA_CHECK(cudaMemcpyAsync(weights, host_.weights.data(), host_.weights.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, s));
    }
    AdjointArgs args;
    args.rank = static_cast<int>(dx_dims.size());
    for (int d = 0; d < args.rank; ++d) {
      args.dy_dims[d] = dy_dims[d];
      args.dx_dims[d] = dx_dims[d];
      args.base[d] = host_.base[d];
    }
    args.offsets = ints;
    args.lists = ints + host_.offsets.size();
    args.weights = weights;
    return args;
  }

 private:
  sep::Adjoint host_;
  std::vector<int64_t> packed_;  // offsets, then lists: what the device reads (kept until replaced)
  OwnedBuffer ints_, weights_;
};

}  // namespace mixtrain::cuda
