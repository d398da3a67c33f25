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

#include <string>

#define MIXTRAIN_VERSION_MAJOR 0
#define MIXTRAIN_VERSION_MINOR 1
#define MIXTRAIN_VERSION_PATCH 0

#include "mixtrain/check.h"
#include "mixtrain/data.h"
#include "mixtrain/gradients.h"
#include "mixtrain/inference_session.h"
#include "mixtrain/memory_statistics.h"
#include "mixtrain/profile.h"
#include "mixtrain/summary_writer.h"
#include "mixtrain/tensor.h"
#include "mixtrain/train_config.h"
#include "mixtrain/trainer.h"
#include "mixtrain/transform.h"

namespace mixtrain {
inline namespace v1 {

// "0.1.0" — the version of the library actually loaded (may differ from the header's macros
// when an application runs against a newer libmixtrain.so).
const char* Version();

// What the CPU backend found on this machine and what it will use (`mixtrain info`).
struct CpuInfo {
  std::string detected;    // features of the CPU: "avx2 avx512_core avx512_bf16"
  std::string cap;         // MIXTRAIN_MAX_ISA: avx2, avx512_core, avx512 or native
  std::string usable;      // the features under the cap
  std::string onednn_isa;  // oneDNN's effective ISA after its own cap and ours
  bool native_bf16 = false;  // bf16 matmul/conv run natively (else fp32 math on bf16 storage)
  std::string row_kernels;   // "avx512" or "avx2": our elementwise/softmax/norm row loops
  std::string auto_dtype;    // what --dtype=auto trains with here: "bf16" or "fp32"
  std::string cap_error;     // non-empty when MIXTRAIN_MAX_ISA has a value we do not know
};
CpuInfo GetCpuInfo();

}  // namespace v1
}  // namespace mixtrain
