#include "runtime/device.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace mixtrain {
namespace {

class CpuDevice final : public Device {
 public:
  DeviceType type() const override { return DeviceType::kCPU; }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    size_t n = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, n == 0 ? 64 : n);
    if (p == nullptr)
      return absl::ResourceExhaustedError(absl::StrCat("out of host memory allocating ", bytes, " bytes"));
    return p;
  }
  void Free(void* p) override { std::free(p); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyToHost(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void Synchronize() override {}
  void* stream() override { return nullptr; }
  bool shares_host_memory() const override { return true; }
};

}  // namespace

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(Device* device, size_t bytes) {
  DeviceBuffer b;
  MT_ASSIGN_OR_RETURN(b.data_, device->Allocate(bytes));
  b.device_ = device;
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    std::swap(device_, o.device_);
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (data_ != nullptr) device_->Free(data_);
  device_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

std::unique_ptr<Device> MakeCpuDevice() { return std::make_unique<CpuDevice>(); }

}  // namespace mixtrain
