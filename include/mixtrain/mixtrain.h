// mixtrain's public C++ API: include this one header.
//
//   mixtrain::Trainer           build and run a mixed-precision training step for an ONNX model
//   mixtrain::TrainConfig       how to train (optimizer, schedule, precision, loss scaling)
//   mixtrain::InferenceSession  run an ONNX model (e.g. the trained, exported one)
//   mixtrain::HostTensor        the tensors passed in and out (host memory, row-major)
//   mixtrain::Dataset, ReadNpz  batches from named arrays; .npz files
//   mixtrain::TransformModel    run named compiler passes on a model and render the graph
//   mixtrain::ComputeGradients  one fp32 forward + backward pass: the loss and every gradient
//
// Everything here returns absl::Status / absl::StatusOr for errors a caller can cause. Only what
// include/mixtrain/ declares is the stable API; the library's other headers are internal.
#pragma once

#define MIXTRAIN_VERSION_MAJOR 0
#define MIXTRAIN_VERSION_MINOR 1
#define MIXTRAIN_VERSION_PATCH 0

#include "mixtrain/data.h"
#include "mixtrain/gradients.h"
#include "mixtrain/inference_session.h"
#include "mixtrain/tensor.h"
#include "mixtrain/train_config.h"
#include "mixtrain/trainer.h"
#include "mixtrain/transform.h"

namespace mixtrain {
inline namespace v1 {

// "0.1.0" — the version of the library actually loaded (may differ from the header's macros
// when an application runs against a newer libmixtrain.so).
const char* Version();

}  // namespace v1
}  // namespace mixtrain
