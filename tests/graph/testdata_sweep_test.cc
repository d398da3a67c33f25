// Feeds every model.onnx of Debian's libonnx-testdata through import + verify + export + checker:
// nothing may crash; a model is either imported (then its round trip is byte-identical and, where
// the ONNX library knows its opset and domains, it passes the full checker) or refused with a
// clean error (opset below 6, types the IR has no dtype for such as uint32 or sequences).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/verifier.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
const char kTestData[] = "/usr/share/libonnx-testdata/data";

// Domains the ONNX 1.12 checker has schemas for.
bool CheckerKnows(const onnx::ModelProto& m) {
  for (const auto& op : m.opset_import()) {
    const std::string& d = op.domain();
    if (d.empty() || d == "ai.onnx") {
      if (op.version() > 17) return false;
    } else if (d != "ai.onnx.ml" && d != "ai.onnx.preview.training" && d != "ai.onnx.training") {
      return false;
    }
  }
  return true;
}

TEST(TestdataSweep, EveryModelImportsOrFailsCleanly) {
  // A build dependency (tools/install-deps.sh): missing data is a failure, not a skip.
  ASSERT_TRUE(fs::exists(kTestData)) << kTestData << " missing (apt install libonnx-testdata)";
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(kTestData))
    if (e.path().filename() == "model.onnx") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GT(files.size(), 1000u);

  int imported = 0, refused = 0, checked = 0, checker_rejects_original = 0;
  std::map<std::string, int> refusal_kinds;
  for (const fs::path& path : files) {
    SCOPED_TRACE(path.string());
    auto g = ImportOnnxFile(path.string());
    if (!g.ok()) {
      ++refused;
      std::string msg(g.status().message());
      EXPECT_EQ(msg.rfind(path.string(), 0), 0u) << "error does not name the file: " << msg;
      // Bucket by the reason (the message minus the file and the value names).
      std::string kind = msg.find("opset") != std::string::npos ? "opset out of range"
                         : msg.find("element type") != std::string::npos ? "unsupported dtype"
                         : msg.find("not a tensor") != std::string::npos ? "non-tensor type"
                         : "other: " + msg;
      ++refusal_kinds[kind];
      continue;
    }
    ++imported;
    EXPECT_TRUE(Verify(**g).ok());
    onnx::ModelProto m1 = ExportOnnx(**g);
    std::string b1 = SerializeDeterministic(m1);
    auto g2 = ImportOnnxBytes(b1, path.parent_path().string());
    ASSERT_TRUE(g2.ok()) << "re-import failed: " << g2.status();
    EXPECT_EQ(b1, SerializeDeterministic(ExportOnnx(**g2))) << "round trip differs";
    if (CheckerKnows(m1)) {
      // A few old models (opset-1 Constants with int64 outputs) fail ONNX's own checker as
      // shipped; only models the checker accepts must still pass it after our round trip.
      onnx::ModelProto original;
      std::ifstream in(path, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (ParseModelProto(bytes, &original).ok() && !CheckOnnxModel(original).ok()) {
        ++checker_rejects_original;
        continue;
      }
      ++checked;
      absl::Status s = CheckOnnxModel(m1);
      EXPECT_TRUE(s.ok()) << s;
    }
  }
  std::printf("testdata models: %zu, imported %d (round trip identical), checker-verified %d, "
              "refused %d, rejected by ONNX's checker as shipped %d\n",
              files.size(), imported, checked, refused, checker_rejects_original);
  for (const auto& [kind, n] : refusal_kinds) std::printf("  refused (%s): %d\n", kind.c_str(), n);
  // Most models use opsets 6..17; far more must import than not.
  EXPECT_GT(imported, refused);
}

}  // namespace
}  // namespace mixtrain
