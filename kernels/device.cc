#include "kernels/device.h"

#include "graph/check.h"

namespace mixtrain {

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

}  // namespace mixtrain
