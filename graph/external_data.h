// Tensor <-> onnx::TensorProto conversion, including ONNX external data (weights stored in a
// separate file next to the model). External paths are confined to the model's folder: a model
// file is untrusted input and must not make us read /etc/passwd or ../../secret.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "graph/tensor.h"
#include "onnx/onnx_pb.h"

namespace mixtrain {

// Resolves an external-data `location` against `base_dir`: relative paths only, no escape via
// '..' or symlinks. Fails naming the location.
absl::StatusOr<std::string> ResolveExternalPath(const std::string& base_dir,
                                                const std::string& location);

// Decodes every ONNX encoding: raw_data, the typed fields (float_data, int32_data also holding
// f16/bf16/bool/int8/uint8, int64_data, double_data) and external data under `base_dir` (empty:
// external data refused). `what` names the tensor in errors ("initializer 'w'").
absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& base_dir,
                                       const std::string& what);

// Encodes as raw_data (always little-endian, like every host we run on).
void TensorToProto(const Tensor& t, onnx::TensorProto* p);

}  // namespace mixtrain
