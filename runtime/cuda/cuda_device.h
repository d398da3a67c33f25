// The CUDA device: one stream, a caching allocator for device memory (no cudaMalloc once the
// sizes of a step have been seen), pinned host staging for uploads so they are asynchronous, and
// the per-stream resources kernels share (cuBLASLt handle and workspace). This header needs no
// CUDA headers: it is compiled in every build, and without CUDA the functions say so.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/device.h"

namespace mixtrain {

// OK when this process can run on a GPU; otherwise Unavailable saying why (this build has no
// CUDA backend, no driver or one too old, no device, a device below compute capability 8.0).
// Never aborts and never needs a GPU to answer. The answer is computed once and cached.
absl::Status CudaAvailable();

// The CUDA device on GPU `ordinal`; CudaAvailable()'s error when there is none.
absl::StatusOr<std::unique_ptr<Device>> MakeCudaDevice(int ordinal = 0);

// What kernels running on a CudaDevice's stream share. Owned by the device; valid while it lives.
struct CudaStreamResources {
  void* cublaslt = nullptr;    // cublasLtHandle_t
  void* workspace = nullptr;   // device memory for cuBLASLt (and later cuDNN)
  size_t workspace_bytes = 0;
};

// The resources of the CudaDevice whose stream() is `stream` (KernelContext::stream()). Aborts
// when no live CudaDevice owns that stream: a CUDA kernel run off a CUDA device is a runtime bug.
const CudaStreamResources& CudaResourcesFor(void* stream);

}  // namespace mixtrain
