// The layers of docs/architecture.md, checked on the sources: graph <- passes <- kernels <-
// runtime <- api <- tools, each folder including only its own and those below it. Within kernels/,
// kernels/common is shared, each backend (kernels/cpu, kernels/cuda) is one folder that no other
// backend reaches into, and above kernels/ only the Backend interface (kernels/*.h) is known:
// runtime/ and api/ include no backend's headers and no oneDNN. (tools/ is held to the public API
// by its include path; see CMakeLists.txt.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

struct Rule {
  std::string folder;                // sources under it (its own subfolders by their own rules)
  std::vector<std::string> allowed;  // prefixes of what its files may include ("" = none of ours)
};

// Prefixes of our own headers; anything else (system, abseil, ONNX, protobuf, CUDA) is free,
// except oneDNN, which only the CPU backend may include.
const std::vector<std::string> kOurs = {"graph/", "passes/", "kernels/", "runtime/", "api/", "tools/", "proto/",
                                        "mixtrain/", "dnnl", "oneapi/dnnl"};

const std::vector<Rule> kRules = {
    {"graph", {"graph/", "proto/"}},
    {"passes", {"graph/", "passes/", "proto/"}},
    {"kernels/common", {"graph/", "kernels/common/", "kernels/registry.h"}},
    // The backend interface and what every backend shares.
    {"kernels", {"graph/", "passes/", "proto/", "kernels/backend.h", "kernels/device.h", "kernels/registry.h",
                 "kernels/host_evaluator.h", "kernels/common/"}},
    // The CPU backend: oneDNN, and the collective ops' public Communicator interface.
    {"kernels/cpu", {"graph/", "passes/", "proto/", "kernels/backend.h", "kernels/device.h", "kernels/registry.h",
                     "kernels/host_evaluator.h", "kernels/common/", "kernels/cpu/", "dnnl", "oneapi/dnnl",
                     "mixtrain/communicator.h"}},
    {"kernels/cuda", {"graph/", "passes/", "proto/", "kernels/backend.h", "kernels/device.h", "kernels/registry.h",
                      "kernels/host_evaluator.h", "kernels/common/", "kernels/cuda/"}},
    {"runtime", {"graph/", "passes/", "proto/", "kernels/backend.h", "kernels/device.h", "kernels/registry.h",
                 "kernels/host_evaluator.h", "kernels/common/", "runtime/", "mixtrain/"}},
    {"api", {"graph/", "passes/", "proto/", "kernels/backend.h", "kernels/device.h", "kernels/registry.h",
             "kernels/host_evaluator.h", "kernels/common/", "runtime/", "api/", "mixtrain/"}},
};

bool StartsWith(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The rule for a source file: the longest folder that contains it.
const Rule* RuleFor(const std::string& rel) {
  const Rule* best = nullptr;
  for (const Rule& r : kRules)
    if (StartsWith(rel, r.folder + "/") && (best == nullptr || r.folder.size() > best->folder.size())) {
      // A file in a deeper folder than the rule's (kernels/cpu/passes/x.cc) takes the nearest rule.
      best = &r;
    }
  return best;
}

TEST(Layering, EveryIncludeGoesDown) {
  const fs::path root = MT_SOURCE_DIR;
  const std::regex include(R"(^\s*#\s*include\s*[<"]([^">]+)[">])");
  std::vector<std::string> violations;
  int files = 0;
  for (const Rule& rule : kRules) {
    for (const auto& e : fs::recursive_directory_iterator(root / rule.folder)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
      const std::string rel = fs::relative(e.path(), root).string();
      if (RuleFor(rel) != &rule) continue;  // a deeper folder's rule applies
      ++files;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        const std::string inc = m[1];
        bool ours = false;
        for (const std::string& p : kOurs) ours |= StartsWith(inc, p);
        if (!ours) continue;
        bool ok = false;
        for (const std::string& p : rule.allowed) ok |= StartsWith(inc, p);
        if (!ok) violations.push_back(rel + ":" + std::to_string(n) + " includes " + inc);
      }
    }
  }
  EXPECT_GT(files, 200) << "the source tree was not found under " << root;
  std::string all;
  for (const std::string& v : violations) all += "\n  " + v;
  EXPECT_TRUE(violations.empty()) << violations.size() << " includes go up or across a layer:" << all;
}

// The check can fail: a made-up include of the runtime from a kernel is a violation by the rules.
TEST(Layering, RulesRefuseAnUpwardInclude) {
  const Rule* cuda = RuleFor("kernels/cuda/gemm.cc");
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->folder, "kernels/cuda");
  bool ok = false;
  for (const std::string& p : cuda->allowed) ok |= StartsWith("runtime/session.h", p);
  EXPECT_FALSE(ok);
  const Rule* runtime = RuleFor("runtime/planner.cc");
  ASSERT_NE(runtime, nullptr);
  for (const std::string& inc : {"kernels/cpu/dnnl_common.h", "dnnl.hpp", "kernels/cuda/cuda_device.h"}) {
    bool allowed = false;
    for (const std::string& p : runtime->allowed) allowed |= StartsWith(inc, p);
    EXPECT_FALSE(allowed) << inc;
  }
  EXPECT_EQ(RuleFor("kernels/cpu/passes/conv_layout.cc")->folder, "kernels/cpu");
}

}  // namespace
}  // namespace mixtrain
