// mixtrain public API: one fp32 forward + backward pass on a batch, for checking gradients
// against another framework (`mixtrain grad`, the PyTorch parity tests): train-mode
// BatchNorm/Dropout, the loss appended, reverse-mode autodiff; no loss scaling, no update.
//
// Errors: as Trainer (see mixtrain/trainer.h): a non-OK absl::Status naming the file, input or
// option. Thread safety: calls share no mutable state.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "mixtrain/tensor.h"

namespace mixtrain {
inline namespace v1 {

struct GradientOptions {
  // cross_entropy (int64 labels), mse, l1, bce_with_logits, or output:NAME to differentiate a loss
  // the model computes itself (then no labels are read).
  std::string loss = "cross_entropy";
  std::string labels = "labels";  // the batch key of the labels
  std::string output;             // the model output the loss applies to; "" = the first
  int32_t class_axis = 1;         // cross_entropy's class axis in the logits (-1: N x T x V)
  // Trainable parameters: by default the framework's parameters (README "How to export for
  // training"); `trainable`, when set, replaces them by the float initializers whose whole name
  // it matches; `freeze` removes matches. ECMAScript regexes. Only those reaching the loss train.
  std::string freeze;
  std::string trainable;
};

struct Gradients {
  HostTensor loss;                              // the f32 scalar
  std::map<std::string, HostTensor> gradients;  // by parameter (initializer) name
};

// Imports the ONNX model at `model_path` and differentiates the loss on `batch` (one tensor per
// graph input, plus the labels) with respect to every trainable parameter.
absl::StatusOr<Gradients> ComputeGradients(const std::string& model_path, const TensorMap& batch,
                                           const GradientOptions& options = {});

}  // namespace v1
}  // namespace mixtrain
