// The kernel registry: (op, domain, device, dtype) -> kernel factory. A node with no kernel fails
// at plan time with an error naming the node, op and dtypes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace mixtrain {
inline namespace v1 {
class Communicator;  // mixtrain/communicator.h
}

enum class DeviceType : uint8_t { kCPU, kCUDA };
const char* DeviceName(DeviceType d);

// A non-owning view of device memory with its dtype and dims (row-major, dense).
struct TensorView {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  void* data = nullptr;

  int64_t numel() const { return NumElements(dims); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

class KernelContext {
 public:
  KernelContext(const Node& node, DeviceType device, std::vector<const TensorView*> inputs,
                std::vector<TensorView*> outputs, void* stream = nullptr, int64_t opset = 0)
      : node_(node), device_(device), inputs_(std::move(inputs)), outputs_(std::move(outputs)),
        stream_(stream), opset_(opset) {}
  const Node& node() const { return node_; }
  DeviceType device() const { return device_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  // Null for an omitted optional input/output. Outputs arrive allocated with their planned dims.
  const TensorView* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  TensorView* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  void* stream() const { return stream_; }  // cudaStream_t on CUDA
  // What the device's kernels share (Device::kernel_resources(): CUDA's library handles and
  // workspace); null on the CPU.
  const void* resources() const { return resources_; }
  void set_resources(const void* r) { resources_ = r; }
  // The opset of the node's domain; ops whose semantics changed between opsets (Softmax's axis at
  // 13) read it. 0 = not given: kernels then follow the newest opset.
  int64_t opset() const { return opset_; }
  // Which run of the session this is (0, 1, 2, ...). Random ops (training-mode Dropout) key their
  // counter-based RNG on it, so masks are fresh per step and a checkpoint that saves the count
  // resumes them exactly.
  uint64_t run_index() const { return run_index_; }
  void set_run_index(uint64_t i) { run_index_ = i; }
  // True when input i's contents (and address) stay the same for every Compute of this kernel
  // instance: a folded constant or a weight nothing updates. Kernels may then cache work derived
  // from it, such as weights reordered into a primitive's layout; the session re-plans (new
  // kernels) when such an initializer is replaced.
  bool input_constant(size_t i) const { return i < constant_inputs_.size() && constant_inputs_[i]; }
  void set_constant_inputs(std::vector<bool> c) { constant_inputs_ = std::move(c); }
  // Input i's contents on the host when they are fixed for the plan (a folded constant: shape
  // arithmetic, pads, slice bounds; or an initializer no state update writes), else null; on the
  // CPU the same view as input(i). A kernel on a device with its own memory reads such
  // parameters here instead of copying them back.
  const TensorView* host_input(size_t i) const {
    const TensorView* h = i < host_inputs_.size() ? host_inputs_[i] : nullptr;
    return h != nullptr && (h->data != nullptr || h->numel() == 0) ? h : nullptr;
  }
  void set_host_inputs(std::vector<const TensorView*> h) { host_inputs_ = std::move(h); }
  // The ranks collective ops (ai.mixtrain.AllReduce) reduce over; null when the session has none.
  Communicator* communicator() const { return communicator_; }
  void set_communicator(Communicator* c) { communicator_ = c; }
  absl::Status Error(absl::string_view msg) const;  // names the node and op

 private:
  const Node& node_;
  DeviceType device_;
  std::vector<const TensorView*> inputs_;
  std::vector<TensorView*> outputs_;
  void* stream_;
  const void* resources_ = nullptr;
  int64_t opset_;
  uint64_t run_index_ = 0;
  std::vector<bool> constant_inputs_;
  std::vector<const TensorView*> host_inputs_;
  Communicator* communicator_ = nullptr;
};

// One instance per node of a plan; may cache per-shape state (oneDNN primitives, cuDNN algos).
class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual absl::Status Compute(KernelContext& ctx) = 0;
};

using KernelFactory = std::function<absl::StatusOr<std::unique_ptr<OpKernel>>(const Node&)>;

struct KernelDef {
  std::string op_type;
  std::string domain;  // "" = ai.onnx
  DeviceType device = DeviceType::kCPU;
  // The dtypes this kernel accepts for input `type_input` (or output 0 when type_input < 0).
  // Empty = any dtype.
  std::vector<DType> dtypes;
  int type_input = 0;
  KernelFactory factory;
};

// Adapts a plain function to an OpKernel (for stateless kernels).
using KernelFn = absl::Status (*)(KernelContext&);
KernelFactory FnKernel(KernelFn fn);
// A new K (an OpKernel with a default constructor) per node: for kernels that keep what they
// worked out on their first call (shapes, converted parameters, library plans) for the next ones.
template <typename K>
KernelFactory ClassKernel() {
  return [](const Node&) -> absl::StatusOr<std::unique_ptr<OpKernel>> { return std::make_unique<K>(); };
}

class KernelRegistry {
 public:
  static KernelRegistry& Global();
  void Register(KernelDef def);
  // The kernel for this node given its input/output dtypes, or an error naming node, op, dtypes.
  absl::StatusOr<const KernelDef*> Find(const Node& node, DeviceType device,
                                        const std::vector<DType>& input_dtypes,
                                        const std::vector<DType>& output_dtypes) const;
  bool Has(std::string_view domain, std::string_view op_type, DeviceType device) const;
  const std::vector<KernelDef>& defs() const { return defs_; }

 private:
  std::vector<KernelDef> defs_;
};

// Registers kernels from a static initializer in the file that defines them:
//   MT_REGISTER_KERNELS(relu) { r.Register({"Relu", "", DeviceType::kCPU, kFloatTypes, 0, FnKernel(Relu)}); }
#define MT_REGISTER_KERNELS(tag)                                               \
  static void MtRegisterKernels_##tag(::mixtrain::KernelRegistry& r);          \
  static const bool mt_kernels_registered_##tag = [] {                         \
    MtRegisterKernels_##tag(::mixtrain::KernelRegistry::Global());             \
    return true;                                                               \
  }();                                                                         \
  static void MtRegisterKernels_##tag(::mixtrain::KernelRegistry& r)

// fp32, fp16, bf16: the float types every float kernel supports.
inline const std::vector<DType> kFloatTypes = {DType::kF32, DType::kF16, DType::kBF16};

}  // namespace mixtrain
