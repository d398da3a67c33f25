// `--device=cpu|cuda|auto`: the one place that chooses the backend (kernels/backend.h) a Trainer,
// an InferenceSession, `mixtrain check` and `mixtrain dump` build for. `auto` takes the GPU when
// one is usable and it has every kernel the graphs need, and otherwise falls back to the CPU with
// a note saying why; `cuda` without a usable GPU, or with a kernel missing there, is an error
// naming the flag and the reason. Compiled in every build.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"

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

// The decision by availability alone, given what CudaBackend().Available() says (passed in so
// every branch is testable).
absl::StatusOr<DeviceSelection> SelectDevice(DeviceRequest request, const absl::Status& cuda_status);
// The same with this machine's answer (asking for the CPU never touches the CUDA driver).
absl::StatusOr<DeviceSelection> SelectDevice(DeviceRequest request);

// A graph as a session will run it, for the coverage check.
struct GraphToRun {
  const Graph* graph = nullptr;
  std::vector<std::pair<std::string, std::string>> state_updates;
  int64_t symbolic_dim = 2;  // what the plan assumes for dims the model leaves open
};

// What `backend` lacks to run `graphs`: "" when nothing; else the ops without any kernel there,
// or, when every op has one, the planner's error naming the kernels missing for the dtypes.
std::string MissingOn(const Backend& backend, const std::vector<GraphToRun>& graphs);

struct BackendChoice {
  const Backend* backend = nullptr;
  std::string note;  // non-empty when `auto` chose the CPU, saying why
};

// Chooses, building with `build(backend)`, which makes what will run there and returns what that
// backend lacks ("" for nothing; the CPU's answer is not asked for). `flag` names the setting in
// messages ("--device", "InferenceOptions::device"); `verb` what the caller does ("trains",
// "runs"). `cuda` with something missing fails naming it; `auto` builds again for the CPU.
absl::StatusOr<BackendChoice> ChooseBackend(
    DeviceRequest request, absl::string_view flag, absl::string_view verb,
    const std::function<absl::StatusOr<std::string>(const Backend&)>& build);

}  // namespace mixtrain
