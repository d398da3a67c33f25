// The CPU backend (kernels/backend.h): the host as a device, oneDNN's and our own kernels
// (kernels/cpu/), what the CPU's features and oneDNN's ISA make fast, and the target passes of
// kernels/cpu/passes/.
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/dnnl_layout.h"
#include "kernels/host_evaluator.h"
#include "kernels/cpu/passes/cpu_passes.h"
#include "kernels/cpu/simd_target.h"
#include "passes/canonicalize.h"
#include "passes/inference.h"
#include "passes/pass_registry.h"
#include "passes/unroll_loop.h"

namespace mixtrain {
namespace {

// The host's memory (synchronous; the stream is the calling thread).

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


TargetCapabilities Capabilities() {
  TargetCapabilities c;
  c.native_bf16 = dnnl_util::NativeBf16();
  c.wide_output_products = true;  // oneDNN's products and norm gradients store to their output's type
  c.channel_blocked = dnnl_util::NativeChannelBlocked();
  c.training_channel_block = c.channel_blocked ? dnnl_util::kChannelBlock : dnnl_util::kAvx2ChannelBlock;
  // MIXTRAIN_TRAIN_LAYOUT=plain keeps ONNX's layouts in the training step (benchmarks compare both).
  if (const char* layout = std::getenv("MIXTRAIN_TRAIN_LAYOUT"); layout != nullptr && std::string(layout) == "plain")
    c.training_channel_block = 0;
  c.fused_inference = true;
  return c;
}

}  // namespace

Target CpuTarget(const TargetCapabilities& caps) {
  Target t;
  t.name = "cpu";
  t.detail = absl::StrCat("oneDNN ISA ", dnnl_util::DnnlIsaName());
  t.caps = caps;
  t.evaluator = &EvaluateOnHost;
  // bf16 only: bf16 has fp32's range, so widening changes only the rounding; under fp16 a
  // gradient's overflow is what the loss scaler watches (as PyTorch's GradScaler does), and an
  // fp32 sum would hide it.
  if (caps.wide_output_products)
    t.training_passes.push_back(
        {"fp32_grad_products", [](DType low) { return low == DType::kBF16 ? MakeFp32GradProductsPass() : nullptr; }});
  t.training_passes.push_back(
      {"loss_reads_low", [](DType low) { return IsLowFloat(low) ? MakeLossReadsLowPass() : nullptr; }});
  t.training_passes.push_back({"gather_grad_accumulates", [](DType) { return MakeGatherGradAccumulatesPass(); }});
  if (const int64_t block = t.caps.training_channel_block; block != 0)
    t.training_passes.push_back({"conv_layout_train", [block](DType) { return MakeConvLayoutTrainingPass(block); }});
  const bool blocked = t.caps.channel_blocked;
  t.inference_passes = {
      {"conv_layout", 45, [blocked] { return MakeConvLayoutPass(blocked); }},
      {"conv_transposes", 46, [] { return MakeConvTransposesPass(); }},
      {"conv_flatten_weights", 47, [] { return MakeConvFlattenWeightsPass(); }},
      {"conv_pool", 48, [] { return MakeConvPoolPass(); }},
  };
  return t;
}

namespace {

class Cpu final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::kCPU; }
  absl::Status Available() const override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<Device>> MakeDevice() const override { return std::make_unique<CpuDevice>(); }

  Target target() const override { return CpuTarget(Capabilities()); }

  std::vector<BackendFact> Facts() const override {
    return {{"detected", GetDetectedCpuFeatures().ToString()},
            {"cap", CpuIsaCap()},
            {"usable", GetCpuFeatures().ToString()},
            {"onednn_isa", dnnl_util::DnnlIsaName()},
            {"native_bf16", dnnl_util::NativeBf16() ? "true" : "false"},
            {"row_kernels", cpu::Avx512Enabled() ? "avx512" : "avx2"},
            {"cap_error", CpuCapError()}};
  }
};

}  // namespace

const Backend& CpuBackend() {
  static const Cpu* const cpu = new Cpu();
  return *cpu;
}

// Passes by name (`mixtrain dump --passes=...`, tests) run as they would for this machine's CPU:
// those that fold constants with its kernels, the inference pipeline, and its target passes.
MT_REGISTER_PASS(canonicalize, [] {
  CanonicalizeOptions co;
  co.evaluator = &EvaluateOnHost;
  return MakeCanonicalizePass(co);
});
MT_REGISTER_PASS(unroll_loop, [] { return MakeUnrollLoopPass({}, &EvaluateOnHost); });
MT_REGISTER_PASS(inference, [] { return MakeInferencePass(CpuBackend().target()); });
MT_REGISTER_PASS(fp32_grad_products, [] { return MakeFp32GradProductsPass(); });
MT_REGISTER_PASS(conv_layout_train, [] { return MakeConvLayoutTrainingPass(Capabilities().training_channel_block); });
MT_REGISTER_PASS(conv_layout, [] { return MakeConvLayoutPass(Capabilities().channel_blocked); });
MT_REGISTER_PASS(conv_transposes, [] { return MakeConvTransposesPass(); });
MT_REGISTER_PASS(conv_flatten_weights, [] { return MakeConvFlattenWeightsPass(); });
MT_REGISTER_PASS(conv_pool, [] { return MakeConvPoolPass(); });
MT_REGISTER_PASS(loss_reads_low, [] { return MakeLossReadsLowPass(); });
MT_REGISTER_PASS(gather_grad_accumulates, [] { return MakeGatherGradAccumulatesPass(); });

}  // namespace mixtrain
