// --device selection (see device_select.h).
#include "runtime/cuda/device_select.h"

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_device.h"

namespace mixtrain {

absl::StatusOr<DeviceRequest> ParseDeviceFlag(std::string_view value) {
  if (value == "cpu") return DeviceRequest::kCpu;
  if (value == "cuda") return DeviceRequest::kCuda;
  if (value == "auto") return DeviceRequest::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("--device=", std::string(value), ": expected cpu, cuda or auto"));
}

absl::StatusOr<DeviceSelection> SelectDevice(DeviceRequest request, const absl::Status& cuda_status) {
  DeviceSelection s;
  switch (request) {
    case DeviceRequest::kCpu:
      return s;
    case DeviceRequest::kCuda:
      if (!cuda_status.ok())
        return absl::FailedPreconditionError(absl::StrCat(
            "--device=cuda: no usable GPU: ", std::string(cuda_status.message()),
            " (use --device=cpu or --device=auto to run on the CPU)"));
      s.type = DeviceType::kCUDA;
      return s;
    case DeviceRequest::kAuto:
      if (cuda_status.ok()) {
        s.type = DeviceType::kCUDA;
      } else {
        s.note = absl::StrCat("--device=auto: no usable GPU (", std::string(cuda_status.message()),
                              "); running on the CPU");
      }
      return s;
  }
  return absl::InternalError("unknown DeviceRequest");
}

absl::StatusOr<DeviceSelection> SelectDevice(DeviceRequest request) {
  // Asking for the CPU must not touch the CUDA driver at all.
  if (request == DeviceRequest::kCpu) return DeviceSelection{};
  return SelectDevice(request, CudaAvailable());
}

absl::StatusOr<std::unique_ptr<Device>> MakeDevice(DeviceType type) {
  if (type == DeviceType::kCUDA) return MakeCudaDevice(0);
  return MakeCpuDevice();
}

}  // namespace mixtrain
