// Devices: where tensors live and kernels run. Each backend makes its own (kernels/backend.h):
// the CPU's in kernels/cpu/backend.cc, CUDA's in kernels/cuda/cuda_device_impl.cc.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/registry.h"

namespace mixtrain {

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceType type() const = 0;
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;  // 64-byte aligned
  virtual void Free(void* p) = 0;
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;    // on the stream
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;      // on the stream
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;    // on the stream
  virtual void Synchronize() = 0;  // waits for the stream
  virtual void* stream() = 0;      // cudaStream_t on CUDA, null on the CPU
  // True when Allocate returns memory the host reads and writes directly (the CPU): the runtime
  // then uses host tensors (initializers, feeds, folded constants) in place. Otherwise every
  // one of them is copied in through CopyToDevice and read back through CopyToHost.
  virtual bool shares_host_memory() const { return false; }
  // What the backend's kernels share on this device (CUDA: the cuBLASLt and cuDNN handles and
  // their workspace), handed to every kernel through KernelContext::resources(); null on the CPU.
  virtual const void* kernel_resources() const { return nullptr; }

  // Step graphs (CUDA graphs): the work queued on the stream between BeginRecording and
  // EndRecording is recorded, not run, into a Recording that Replay queues again, whole, with the
  // addresses and launch parameters it was recorded with. Devices without them say CanRecord()
  // false. EndRecording returns null when the device could not record (the recorded work is then
  // lost: the caller runs it again without recording).
  class Recording {
   public:
    virtual ~Recording() = default;
    virtual void Replay() = 0;  // on the stream
  };
  virtual bool CanRecord() const { return false; }
  virtual void BeginRecording() {}
  virtual std::unique_ptr<Recording> EndRecording() { return nullptr; }
};

// Owns one allocation of a Device (move-only); frees it on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(Device* device, size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  void Reset();

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace mixtrain
