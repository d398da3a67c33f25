// Models that once crashed mixtrain (tests/data/crashers/models/, written by
// tools/probe/make_crashers.py from what tools/probe/probe_models.py and the issues found): each
// must now fail at import with a one-line error naming the node, and so must every public entry
// point that ran the passes which crashed on it (check: canonicalization and the training
// pipeline; gradients: train mode, loss, autodiff, the planner).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "graph/onnx_import.h"
#include "mixtrain/mixtrain.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Crashers() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(std::string(MT_SOURCE_DIR) + "/tests/data/crashers/models"))
    if (e.path().extension() == ".onnx") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

void ExpectCleanError(const absl::Status& s, const std::string& path) {
  ASSERT_FALSE(s.ok()) << path << " was accepted";
  const std::string msg(s.message());
  EXPECT_NE(msg.find("node '"), std::string::npos) << "does not name the node: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

TEST(Crashers, ImportRefusesEach) {
  const std::vector<std::string> files = Crashers();
  ASSERT_GE(files.size(), 3u);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    ExpectCleanError(ImportOnnxFile(path).status(), path);
  }
}

TEST(Crashers, CheckAndGradientsRefuseEach) {
  absl::StatusOr<HostTensor> x = HostTensor::FromVector<float>({2, 4}, std::vector<float>(8, 1.f));
  absl::StatusOr<HostTensor> labels = HostTensor::FromVector<int64_t>({2}, {0, 1});
  ASSERT_TRUE(x.ok() && labels.ok());
  const TensorMap batch{{"x", *x}, {"labels", *labels}};
  for (const std::string& path : Crashers()) {
    SCOPED_TRACE(path);
    ExpectCleanError(CheckModel(path).status(), path);
    ExpectCleanError(ComputeGradients(path, batch).status(), path);
  }
}

// Models that import but crashed when planned (tests/data/crashers/plan/): a declared input whose
// byte count overflows int64 aborted check's dry plan (the probe's huge_dims category). check
// reports it as blocking, naming the input; gradients refuse it.
TEST(Crashers, PlanRefusesSizesPastInt64) {
  const std::string path = std::string(MT_SOURCE_DIR) + "/tests/data/crashers/plan/huge_declared_input.onnx";
  absl::StatusOr<ModelCheck> check = CheckModel(path);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_FALSE(check->trains);
  bool named = false;
  for (const std::string& b : check->blockers)
    named = named || (b.find("input 'x'") != std::string::npos && b.find("64-bit") != std::string::npos);
  EXPECT_TRUE(named) << "no blocker names input 'x' and its size";
  absl::StatusOr<HostTensor> x = HostTensor::FromVector<float>({1, 1, 4}, std::vector<float>(4, 1.f));
  absl::StatusOr<HostTensor> labels = HostTensor::FromVector<int64_t>({1}, {0});
  ASSERT_TRUE(x.ok() && labels.ok());
  EXPECT_FALSE(ComputeGradients(path, {{"x", *x}, {"labels", *labels}}).ok());
}

}  // namespace
}  // namespace mixtrain
