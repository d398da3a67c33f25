// Fuzz target: ONNX bytes -> ImportOnnxBytes (parse, graph building, topological sort, Verify,
// shape inference), then the properties an imported graph promises: it verifies again, renders as
// text and DOT, and import -> export -> import -> export is byte-identical (graph/onnx_export.h).
// External data is refused (no base folder), so the input is the whole model.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/text_format.h"
#include "graph/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mixtrain;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<Graph>> g = ImportOnnxBytes(bytes, "");
  if (!g.ok()) {
    MT_CHECK(!g.status().message().empty()) << "an import error without a message";
    return 0;
  }
  MT_CHECK_OK(Verify(**g));
  (void)GraphToText(**g);
  (void)GraphToDot(**g);
  const std::string exported = SerializeDeterministic(ExportOnnx(**g));
  absl::StatusOr<std::unique_ptr<Graph>> again = ImportOnnxBytes(exported, "");
  MT_CHECK(again.ok()) << "the exported model does not import: " << again.status();
  MT_CHECK(SerializeDeterministic(ExportOnnx(**again)) == exported)
      << "import -> export -> import -> export is not byte-identical";
  return 0;
}
