// mixtrain public API: InferenceSession, which runs an ONNX model (e.g. one exported by
// Trainer::ExportInferenceModel) on the CPU runtime.
//
// Errors: as Trainer (see mixtrain/trainer.h): a non-OK absl::Status naming the file or input.
// Thread safety: Run may be called from several threads; calls on one session are serialized by
// an internal lock. Separate sessions run in parallel.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mixtrain/tensor.h"

namespace mixtrain {
inline namespace v1 {

class InferenceSession {
 public:
  static absl::StatusOr<std::unique_ptr<InferenceSession>> Create(const std::string& model_path);
  static absl::StatusOr<std::unique_ptr<InferenceSession>> CreateFromBytes(std::string_view onnx_bytes);
  ~InferenceSession();
  InferenceSession(const InferenceSession&) = delete;
  InferenceSession& operator=(const InferenceSession&) = delete;

  std::vector<TensorInfo> Inputs() const;  // the graph inputs Run needs
  std::vector<std::string> OutputNames() const;

  // Runs the model on `feeds` (one tensor per input) and returns the outputs named in `fetch`
  // (default: every graph output), by name. Each new input shape is planned once and cached.
  absl::StatusOr<TensorMap> Run(const TensorMap& feeds, const std::vector<std::string>& fetch = {});

 private:
  struct Impl;
  explicit InferenceSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace v1
}  // namespace mixtrain
