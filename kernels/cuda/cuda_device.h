// The CUDA device: one stream, a caching allocator for device memory (no cudaMalloc once the
// sizes of a step have been seen), pinned host staging for uploads so they are asynchronous, and
// the per-stream resources kernels share (cuBLASLt handle and workspace). This header needs no
// CUDA headers: it is compiled in every build, and without CUDA the functions say so.
//
// The device and the CUDA kernels live in a plugin, libmixtrain_cuda.so (kernels/cuda/,
// kernels/cuda/), the only library that links cudart, cuBLAS and cuBLASLt. Loading those maps
// and relocates ~155 MB that every process kept resident, GPU or not (a CPU training run of
// fashion_cnn peaked at 266 MB, 155 of them cuBLAS's). libmixtrain.so loads the plugin on the
// first CudaAvailable()/MakeCudaDevice() call, and only where an NVIDIA driver (libcuda.so.1)
// exists: a machine without one has no GPU to offer.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device.h"
#include "kernels/registry.h"

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
  void* cudnn = nullptr;       // cudnnHandle_t, bound to the stream
  void* workspace = nullptr;   // device memory for cuBLASLt and cuDNN (one kernel at a time)
  size_t workspace_bytes = 0;
};

// Loads the plugin (next to libmixtrain.so, else by the library search path) whether or not a
// driver exists, so its kernels are registered: for tests and tools that list kernels. OK when
// loaded; Unavailable saying why not (no CUDA in this build, the file missing or not loadable).
absl::Status LoadCudaBackend();

// The plugin's entry points (MixtrainCudaBackend() in kernels/cuda/cuda_device_impl.cc).
struct CudaBackendApi {
  absl::Status (*available)();
  absl::StatusOr<std::unique_ptr<Device>> (*make_device)(int ordinal);
};

// The resources of the CudaDevice a kernel runs on (Device::kernel_resources(), handed to the
// kernel by its context). Aborts when there are none: a CUDA kernel run off a CUDA device is a
// runtime bug.
const CudaStreamResources& CudaResources(const KernelContext& ctx);

}  // namespace mixtrain
