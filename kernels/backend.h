// A backend: one kind of device with its kernels, what it can do, and the passes it adds to the
// pipelines (docs/architecture.md, "Backends"). XLA's per-backend compiler is the model: the
// runtime and the API know this interface only; each backend lives in one folder, the CPU's in
// kernels/cpu/ (oneDNN and our own kernels, CPU features, its target passes in kernels/cpu/passes/),
// CUDA's in kernels/cuda/ (device, allocator, step graphs, kernels, cuBLASLt/cuDNN handles handed to
// the kernels through their context). Which backend runs is chosen in one place
// (runtime/backend_choice.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device.h"
#include "kernels/registry.h"
#include "passes/target.h"

namespace mixtrain {

// A fact a backend found on this machine, for `mixtrain info` ("onednn_isa", "avx512_core_bf16").
struct BackendFact {
  std::string key, value;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  const char* name() const { return DeviceName(type()); }

  // OK when this process can run on it; otherwise Unavailable saying why. Never aborts and needs
  // no device to answer.
  virtual absl::Status Available() const = 0;
  // Registers its kernels in the registry whether or not a device exists (so `check` can list
  // what a model lacks there). OK when they are registered, else why not.
  virtual absl::Status LoadKernels() const { return absl::OkStatus(); }
  // A new device (the CPU; GPU 0): Available()'s error when there is none.
  virtual absl::StatusOr<std::unique_ptr<Device>> MakeDevice() const = 0;
  // What it can do and the passes it adds, for the pipelines (passes/target.h). The same answer
  // for the life of the process, except where an environment variable it documents says otherwise.
  virtual Target target() const = 0;
  virtual std::vector<BackendFact> Facts() const { return {}; }

  // Its kernels: the registry's entries for this device.
  const KernelRegistry& kernels() const { return KernelRegistry::Global(); }
  bool HasKernel(const Node& n) const { return kernels().Has(n.domain(), n.op_type(), type()); }
};

const Backend& CpuBackend();   // kernels/cpu/backend.cc
const Backend& CudaBackend();  // kernels/cuda/backend.cc
const Backend& BackendFor(DeviceType type);

// A fact of `b` by key, or "".
std::string FactOf(const Backend& b, const std::string& key);

}  // namespace mixtrain
