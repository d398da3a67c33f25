// ONNX's own conformance cases (Debian's libonnx-testdata) run through the importer, planner,
// executor and CPU kernels. Every case whose ops all have CPU kernels runs; outputs are compared
// with ONNX's tolerances (rtol 1e-3, atol 1e-7, NaNs equal; dtype and shape exact).
// tests/runtime/conformance_expected.txt lists the cases that pass: one failing is a regression
// and fails the test. tests/runtime/conformance_known_failures.txt lists supported-op cases that
// cannot pass, with the reason. MT_CONFORMANCE_WRITE=1 rewrites the expected list from this run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/external_data.h"
#include "graph/onnx_import.h"
#include "kernels/registry.h"
#include "onnx/onnx_pb.h"
#include "runtime/session.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

const char* kDataRoot = "/usr/share/libonnx-testdata/data";
const char* kSuites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
const double kRtol = 1e-3, kAtol = 1e-7;

std::string ListPath(const char* name) { return std::string(MT_SOURCE_DIR) + "/tests/runtime/" + name; }

std::set<std::string> ReadList(const std::string& path) {
  std::set<std::string> cases;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    cases.insert(line.substr(0, line.find_first_of(" \t")));
  }
  return cases;
}

absl::StatusOr<Tensor> ReadTensorPb(const fs::path& path, std::string* name) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::TensorProto p;
  if (!in || !p.ParseFromString(bytes.str()))
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a TensorProto"));
  *name = p.name();
  return TensorFromProto(p, "", path.filename().string());
}

// numpy.allclose semantics, plus exact dtype and dims; integers and bools compare exactly.
std::string Compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return absl::StrCat("dtype ", DTypeName(got.dtype()), ", expected ", DTypeName(want.dtype()));
  if (got.dims() != want.dims()) return absl::StrCat("shape ", Shape::Of(got.dims()).ToString(),
                                                     ", expected ", Shape::Of(want.dims()).ToString());
  if (want.dtype() == DType::kString) return "string outputs are not compared";
  bool is_float = IsFloat(want.dtype());
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (!is_float) {
      if (got.GetInt(i) != want.GetInt(i))
        return absl::StrCat("element ", i, " is ", got.GetInt(i), ", expected ", want.GetInt(i));
      continue;
    }
    double a = got.GetDouble(i), b = want.GetDouble(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (a == b) continue;  // also equal infinities
    if (std::isfinite(a) && std::isfinite(b) && std::fabs(a - b) <= kAtol + kRtol * std::fabs(b)) continue;
    return absl::StrCat("element ", i, " is ", a, ", expected ", b);
  }
  return "";
}

enum class Outcome { kPassed, kFailed, kSkipped };

// Runs one case directory; `reason` says why it failed or was skipped.
Outcome RunCase(const fs::path& dir, std::string* reason) {
  auto graph = ImportOnnxFile((dir / "model.onnx").string());
  if (!graph.ok()) {
    *reason = absl::StrCat("import: ", graph.status().message());
    return Outcome::kSkipped;
  }
  for (const auto& n : (*graph)->nodes()) {
    std::string domain = n->domain() == "ai.onnx" ? "" : n->domain();
    if (!KernelRegistry::Global().Has(domain, n->op_type(), DeviceType::kCPU)) {
      *reason = absl::StrCat("no CPU kernel for ", n->op_type());
      return Outcome::kSkipped;
    }
  }
  std::shared_ptr<const Graph> g(std::move(*graph));
  auto session = Session::Create(g);
  if (!session.ok()) {
    *reason = absl::StrCat("session: ", session.status().message());
    return Outcome::kFailed;
  }
  // Inputs fed by position are the graph inputs that have no default initializer.
  std::vector<const Value*> free_inputs;
  for (const Value* v : g->inputs())
    if (!v->is_initializer()) free_inputs.push_back(v);
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) {
    *reason = "no test data sets";
    return Outcome::kSkipped;
  }
  for (const fs::path& set : sets) {
    std::map<std::string, Tensor> feeds;
    for (size_t i = 0;; ++i) {
      fs::path p = set / absl::StrCat("input_", i, ".pb");
      if (!fs::exists(p)) break;
      std::string name;
      auto t = ReadTensorPb(p, &name);
      if (!t.ok()) {
        *reason = std::string(t.status().message());
        return Outcome::kSkipped;  // sequences, optionals: not tensors
      }
      if (name.empty() || g->FindValue(name) == nullptr) {
        if (i >= free_inputs.size()) {
          *reason = absl::StrCat("input_", i, ".pb has no graph input");
          return Outcome::kFailed;
        }
        name = free_inputs[i]->name;
      }
      feeds[name] = *t;
    }
    auto outs = (*session)->Run(feeds);
    if (!outs.ok()) {
      *reason = absl::StrCat(set.filename().string(), ": ", outs.status().message());
      return Outcome::kFailed;
    }
    for (size_t i = 0; i < g->outputs().size(); ++i) {
      std::string name;
      auto want = ReadTensorPb(set / absl::StrCat("output_", i, ".pb"), &name);
      if (!want.ok()) {
        *reason = std::string(want.status().message());
        return Outcome::kSkipped;
      }
      std::string diff = Compare((*outs)[i], *want);
      if (!diff.empty()) {
        *reason = absl::StrCat(set.filename().string(), ": output '", g->outputs()[i]->name, "' ", diff);
        return Outcome::kFailed;
      }
    }
  }
  return Outcome::kPassed;
}

TEST(Conformance, OnnxBackendCases) {
  std::vector<std::string> cases;
  for (const char* suite : kSuites) {
    fs::path root = fs::path(kDataRoot) / suite;
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "model.onnx")) cases.push_back(absl::StrCat(suite, "/", e.path().filename().string()));
  }
  ASSERT_FALSE(cases.empty()) << "no cases under " << kDataRoot << " (install libonnx-testdata)";
  std::sort(cases.begin(), cases.end());

  const std::set<std::string> expected = ReadList(ListPath("conformance_expected.txt"));
  const std::set<std::string> known = ReadList(ListPath("conformance_known_failures.txt"));
  int passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> passing, regressions, unexplained, new_passes;
  std::map<std::string, int> skip_reasons;
  for (const std::string& c : cases) {
    std::string reason;
    auto t0 = std::chrono::steady_clock::now();
    Outcome o = RunCase(fs::path(kDataRoot) / c, &reason);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (secs > 2) std::printf("slow: %s took %.1f s\n", c.c_str(), secs);
    if (o == Outcome::kPassed) {
      ++passed;
      passing.push_back(c);
      if (!expected.contains(c)) new_passes.push_back(c);
      continue;
    }
    if (o == Outcome::kSkipped) {
      ++skipped;
      ++skip_reasons[reason.substr(0, 80)];
    }
    if (o == Outcome::kFailed) {
      ++failed;
      std::printf("FAILED %s: %s\n", c.c_str(), reason.c_str());
      if (!known.contains(c)) unexplained.push_back(c);
    }
    if (expected.contains(c)) {
      regressions.push_back(c);
      ADD_FAILURE() << "regression: " << c << " is in conformance_expected.txt but now: " << reason;
    }
  }
  std::vector<std::pair<int, std::string>> top;
  for (const auto& [r, n] : skip_reasons) top.emplace_back(n, r);
  std::sort(top.rbegin(), top.rend());
  std::printf("most common reasons to skip:\n");
  for (size_t i = 0; i < top.size() && i < 200; ++i) std::printf("  %4d  %s\n", top[i].first, top[i].second.c_str());
  for (const std::string& c : new_passes) std::printf("newly passing (add to conformance_expected.txt): %s\n", c.c_str());
  for (const std::string& c : unexplained)
    std::printf("failing and not in conformance_known_failures.txt: %s\n", c.c_str());
  if (const char* w = std::getenv("MT_CONFORMANCE_WRITE"); w != nullptr && std::string(w) == "1") {
    std::ofstream out(ListPath("conformance_expected.txt"));
    out << "# ONNX conformance cases expected to pass (tests/runtime/conformance_test.cc).\n"
           "# Regenerate: MT_CONFORMANCE_WRITE=1 conformance_test\n";
    for (const std::string& c : passing) out << c << "\n";
    std::printf("wrote %zu cases to conformance_expected.txt\n", passing.size());
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
}

}  // namespace
}  // namespace mixtrain
