// ONNX -> Graph. Accepts opsets 11..21 of the default domain (other domains are kept as they are),
// every initializer encoding, external data confined to the model's folder, and keeps what the IR
// does not interpret (subgraph attributes, functions, training info) opaque for export. A Loop or
// Scan body's reads of the enclosing graph become explicit inputs of the node (graph/subgraph.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "onnx/onnx_pb.h"

namespace mixtrain {

inline constexpr int64_t kMinOnnxOpset = 6;
inline constexpr int64_t kMaxOnnxOpset = 21;

// Reads, parses and imports a model file; errors start with the path.
absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxFile(const std::string& path);
// Parses serialized ModelProto bytes (up to 2 GiB; larger models keep weights in external data).
// External data paths resolve against `base_dir` (empty: external data is refused).
absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxBytes(const std::string& bytes,
                                                       const std::string& base_dir);
// Imports an already parsed model: builds the graph, sorts it topologically, verifies it and runs
// shape inference.
absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxModel(const onnx::ModelProto& model,
                                                       const std::string& base_dir);

// Parses bytes as a ModelProto with the 2 GiB size limit (protobuf's default is 64 MiB in some
// versions).
absl::Status ParseModelProto(const std::string& bytes, onnx::ModelProto* model);

}  // namespace mixtrain
