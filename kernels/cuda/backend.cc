// The CUDA backend (kernels/backend.h), as libmixtrain.so sees it: the device and kernels live in
// the plugin libmixtrain_cuda.so (kernels/cuda/cuda_device.h says why), loaded on first use.
#include "kernels/backend.h"
#include "kernels/host_evaluator.h"
#include "kernels/cuda/cuda_device.h"

namespace mixtrain {
namespace {

class Cuda final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::kCUDA; }
  absl::Status Available() const override { return CudaAvailable(); }
  absl::Status LoadKernels() const override { return LoadCudaBackend(); }
  absl::StatusOr<std::unique_ptr<Device>> MakeDevice() const override { return MakeCudaDevice(0); }

  Target target() const override {
    Target t;
    t.name = "cuda";
    // bf16 is native on every GPU the backend accepts (compute capability 8.0 and up). Its
    // products take one dtype (no wide outputs) and its convs ONNX's layout; no fused inference
    // ops: sessions there run the import alone.
    t.caps.native_bf16 = true;
    t.caps.graph_recording = true;
    // Constants fold on the host, with the CPU's kernels.
    t.evaluator = &EvaluateOnHost;
    return t;
  }
};

}  // namespace

const Backend& CudaBackend() {
  static const Cuda* const cuda = new Cuda();
  return *cuda;
}

}  // namespace mixtrain
