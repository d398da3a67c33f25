// See backend_choice.h.
#include "runtime/backend_choice.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "runtime/planner.h"

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
  if (request == DeviceRequest::kCpu) return DeviceSelection{};
  return SelectDevice(request, CudaBackend().Available());
}

std::string MissingOn(const Backend& backend, const std::vector<GraphToRun>& graphs) {
  std::vector<std::string> ops;
  for (const GraphToRun& g : graphs)
    for (std::string& op : OpsWithoutKernels(*g.graph, backend.type()))
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(std::move(op));
  std::sort(ops.begin(), ops.end());
  if (!ops.empty())
    return absl::StrCat("no ", backend.name(), " kernel for ", ops.size(), ops.size() == 1 ? " op: " : " ops: ",
                        absl::StrJoin(ops, ", "));
  // Every op has some kernel there: plan as the sessions will, so a kernel lacking a dtype the
  // graphs use is named now, not mid-run.
  for (const GraphToRun& g : graphs) {
    absl::Status st = DryPlan(*g.graph, backend.type(), g.state_updates, g.symbolic_dim);
    if (absl::IsUnimplemented(st)) return std::string(st.message());
  }
  return "";
}

absl::StatusOr<BackendChoice> ChooseBackend(
    DeviceRequest request, absl::string_view flag, absl::string_view verb,
    const std::function<absl::StatusOr<std::string>(const Backend&)>& build) {
  MT_ASSIGN_OR_RETURN(DeviceSelection where, SelectDevice(request));
  BackendChoice choice;
  choice.note = where.note;
  if (where.type == DeviceType::kCUDA) {
    MT_ASSIGN_OR_RETURN(std::string missing, build(CudaBackend()));
    if (missing.empty()) {
      choice.backend = &CudaBackend();
      return choice;
    }
    if (request == DeviceRequest::kCuda)
      return absl::UnimplementedError(absl::StrCat(flag, "=cuda: ", missing, " (nothing ran; ", flag, "=cpu ",
                                                   verb, " it)"));
    choice.note = absl::StrCat(flag, "=auto: the GPU lacks what this needs (", missing, "); on the CPU");
  }
  MT_RETURN_IF_ERROR(build(CpuBackend()).status());
  choice.backend = &CpuBackend();
  return choice;
}

}  // namespace mixtrain
