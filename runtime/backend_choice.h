// `--device=cpu|cuda|auto`: which Device a Trainer or Session runs on. `auto` takes the GPU when
// one is usable and otherwise falls back to the CPU, with a note saying why; `cuda` on a machine
// without a usable GPU is an error naming the flag and the reason. Compiled in every build.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/registry.h"
#include "runtime/device.h"

namespace mixtrain {

enum class DeviceRequest { kCpu, kCuda, kAuto };

// Parses a --device value; the error names the flag and the accepted values.
absl::StatusOr<DeviceRequest> ParseDeviceFlag(std::string_view value);

struct DeviceSelection {
  DeviceType type = DeviceType::kCPU;
  // Empty, or one line for the user when the choice was not what they might expect
  // ("--device=auto: no usable GPU (...); running on the CPU").
  std::string note;
};

// The decision, given what CudaAvailable() says (passed in so every branch is testable).
absl::StatusOr<DeviceSelection> SelectDevice(DeviceRequest request, const absl::Status& cuda_status);
// The same with this machine's CudaAvailable().
absl::StatusOr<DeviceSelection> SelectDevice(DeviceRequest request);

// A new device of the selected type (the CPU device, or GPU 0).
absl::StatusOr<std::unique_ptr<Device>> MakeDevice(DeviceType type);

}  // namespace mixtrain
