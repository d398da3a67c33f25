// Device memory a CUDA kernel instance keeps for itself (dense operand copies, sort scratch):
// grown on a new shape with cudaMalloc, never shrunk, freed with the kernel. The steps after a
// plan's first allocate nothing, so they can be captured into a CUDA graph.
#pragma once

#include <cstddef>

#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {

class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  ~OwnedBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  // At least `bytes` of device memory (the previous block's contents are not kept).
  void* Get(size_t bytes) {
    if (bytes > bytes_) {
      if (p_ != nullptr) MT_CUDA_CHECK(cudaFree(p_));
      p_ = nullptr;
      MT_CUDA_CHECK(cudaMalloc(&p_, bytes));
      bytes_ = bytes;
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace mixtrain::cuda
