// Graph -> ONNX. Keeps names, node order, attributes, opset imports, ir_version, metadata, node
// annotations (as "mixtrain:key=value" doc_string lines) and value_info for intermediate values
// with known types, so import -> export -> import -> export is byte-identical.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "graph/graph.h"
#include "onnx/onnx_pb.h"

namespace mixtrain {

struct OnnxSaveOptions {
  // When the initializers hold more bytes than this, every initializer of at least
  // `external_min_bytes` goes to "<model file name>.data" beside the model. A serialized
  // ModelProto cannot exceed 2 GiB, so the default keeps headroom below that.
  int64_t external_data_threshold = int64_t{1} << 30;
  int64_t external_min_bytes = 1024;
};

// The model with every initializer inline (raw_data).
onnx::ModelProto ExportOnnx(const Graph& g);

// Serializes deterministically (the same model always gives the same bytes).
std::string SerializeDeterministic(const onnx::ModelProto& m);

// Writes the model (and its external data file, if the threshold asks for one) atomically: temp
// files in the same folder, then rename; on error nothing is left behind.
absl::Status SaveOnnxFile(const Graph& g, const std::string& path,
                          const OnnxSaveOptions& options = {});

// The ONNX checker's full check (check_model, then strict shape inference with type checks),
// with mixtrain's own schemas registered. ONNX throws; this returns the message as a Status.
absl::Status CheckOnnxModel(const onnx::ModelProto& m);

// Registers ONNX OpSchemas for the ai.mixtrain domain (graph/mixtrain_schemas.cc) so the checker
// accepts our own ops. Idempotent; CheckOnnxModel calls it.
void RegisterMixtrainSchemas();
inline constexpr char kMixtrainDomain[] = "ai.mixtrain";

}  // namespace mixtrain
