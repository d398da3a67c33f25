// mixtrain public API: InferenceSession, which runs an ONNX model (e.g. one exported by
// Trainer::ExportInferenceModel) on the CPU runtime.
//
// Errors: as Trainer (see mixtrain/trainer.h): a non-OK absl::Status naming the file or input.
// Thread safety: every method may be called from any thread. On the CPU, Run calls from several
// threads run concurrently (each borrows an execution context of the session's); on a GPU they
// take turns. SetProfiling and Profile wait for the runs in flight. docs/embedding.md, "Threads".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mixtrain/tensor.h"

namespace mixtrain {
inline namespace v1 {

struct InferenceOptions {
  // kFloat32, or kFloat16 / kBFloat16 to compute every float op in that type: the model's fp32
  // weights, constants and inputs, and its Casts to fp32, become the low type (no precision
  // policy: this is the "everything low" baseline). Any other type fails Create.
  ElementType compute_type = ElementType::kFloat32;
  // Float outputs come back as fp32 (true) or in the type they were computed in (false).
  bool float32_outputs = true;
  // Run the inference passes first (fusions such as Conv+Relu or MatMul+bias+Gelu into one
  // oneDNN primitive, channels-last layouts for conv stacks, weights pre-arranged once). They
  // change results only by rounding; false runs the graph as imported and canonicalized (the
  // import stage every graph goes through: constants folded, sequence ops and exporters'
  // random-mask dropout rewritten into ops with kernels; the values are the same).
  bool optimize = true;
  // Where it runs: "cpu" (the default), "cuda" (an error naming the reason where no GPU is usable,
  // or naming every op without a CUDA kernel, at Create), or "auto" (the GPU when it is usable and
  // has a kernel for every op, else the CPU; DeviceNote() says why). On a GPU `optimize` applies
  // no passes past canonicalization: they arrange the graph for oneDNN's CPU kernels.
  std::string device = "cpu";
};

// What the memory planner did for the last Run's input shapes.
struct PlanStatistics {
  size_t peak_planned_bytes = 0;  // the arena: intermediate tensors with buffer reuse
  size_t naive_bytes = 0;         // every kernel output in its own buffer
  int kernels = 0;                // kernels launched per Run
  int folded_nodes = 0;           // nodes computed once at plan time
  int view_nodes = 0;             // Reshape-like nodes turned into zero-copy views
  int inplace_outputs = 0;        // outputs written over a dying input
};

// Kernel time of one op type, summed over the runs made with profiling on.
struct OpTypeTime {
  std::string op_type;
  int64_t calls = 0;
  double seconds = 0;
};

class InferenceSession {
 public:
  static absl::StatusOr<std::unique_ptr<InferenceSession>> Create(const std::string& model_path,
                                                                  const InferenceOptions& options = {});
  static absl::StatusOr<std::unique_ptr<InferenceSession>> CreateFromBytes(std::string_view onnx_bytes,
                                                                           const InferenceOptions& options = {});
  ~InferenceSession();
  InferenceSession(const InferenceSession&) = delete;
  InferenceSession& operator=(const InferenceSession&) = delete;

  // The graph inputs Run needs. With a low compute_type, fp32 inputs are listed in that type; Run
  // also takes them as fp32 (and converts them on each call).
  std::vector<TensorInfo> Inputs() const;
  // "cpu" or "cuda": where Create put the session; and, when it was not the one asked for (auto
  // fell back to the CPU), one line saying why ("" otherwise).
  std::string DeviceName() const;
  std::string DeviceNote() const;
  std::vector<std::string> OutputNames() const;

  // Runs the model on `feeds` (one tensor per input) and returns the outputs named in `fetch`
  // (default: every graph output), by name. Each new input shape is planned once and cached.
  absl::StatusOr<TensorMap> Run(const TensorMap& feeds, const std::vector<std::string>& fetch = {});

  // The plan statistics of the last Run; empty before the first.
  std::optional<PlanStatistics> LastPlanStatistics() const;
  // Profiling times every kernel of the following Runs (off by default: it costs a clock read per
  // kernel). Profile() returns the totals by op type, slowest first.
  void SetProfiling(bool on);
  std::vector<OpTypeTime> Profile() const;

 private:
  struct Impl;
  explicit InferenceSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace v1
}  // namespace mixtrain
