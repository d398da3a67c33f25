// See inference.h.
#include "passes/inference.h"

#include <algorithm>
#include <mutex>
#include <tuple>

#include "graph/check.h"
#include "absl/strings/str_cat.h"
#include "passes/canonicalize.h"
#include "passes/precision.h"
#include "passes/unroll_loop.h"

namespace mixtrain {
namespace {

struct Entry {
  int position;
  std::string name;
  PassFactory factory;
};

struct Registry {
  std::mutex mu;
  std::vector<Entry> entries;  // sorted by (position, name)
};

Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

std::vector<Entry> Entries() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.entries;
}

// The registered passes and the target's, by (position, name); unroll_loop first, with the
// target's evaluator (the other passes see the loops written out).
std::vector<Entry> PipelineFor(const Target& target) {
  std::vector<Entry> all = Entries();
  for (const TargetInferencePass& p : target.inference_passes) all.push_back({p.position, p.name, p.make});
  std::stable_sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.position, a.name) < std::tie(b.position, b.name);
  });
  const HostEvaluator eval = target.evaluator;
  all.insert(all.begin(), Entry{0, "unroll_loop", [eval] { return MakeUnrollLoopPass({}, eval); }});
  return all;
}

// `inference` as one pass (for dump --passes=inference and pipelines built by name).
class InferencePass : public Pass {
 public:
  explicit InferencePass(const Target& target) : entries_(PipelineFor(target)) {}
  absl::string_view name() const override { return "inference"; }
  absl::StatusOr<bool> Run(Graph& g) override {
    bool changed = false;
    for (const Entry& e : entries_) {
      std::unique_ptr<Pass> p = e.factory();
      auto c = p->Run(g);
      if (!c.ok()) return Annotate(c.status(), p->name());
      changed |= *c;
    }
    std::unique_ptr<Pass> cleanup = MakeCleanupPass();
    auto c = cleanup->Run(g);
    if (!c.ok()) return Annotate(c.status(), cleanup->name());
    return changed || *c;
  }

 private:
  static absl::Status Annotate(const absl::Status& s, absl::string_view pass) {
    return absl::Status(s.code(), absl::StrCat("inference pass ", pass, ": ", s.message()));
  }
  std::vector<Entry> entries_;
};

}  // namespace

void RegisterInferencePass(const std::string& name, int position, PassFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Entry& e : r.entries) MT_CHECK(e.name != name) << "inference pass registered twice: " << name;
  r.entries.push_back({position, name, std::move(factory)});
  std::sort(r.entries.begin(), r.entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.position, a.name) < std::tie(b.position, b.name);
  });
}

std::vector<std::string> InferencePassNames(const Target& target) {
  std::vector<std::string> names;
  for (const Entry& e : PipelineFor(target)) names.push_back(e.name);
  return names;
}

std::unique_ptr<Pass> MakeInferencePass(const Target& target) { return std::make_unique<InferencePass>(target); }

absl::Status ImportForInference(Graph& g, const Target& target) {
  PassManager pm;
  CanonicalizeOptions co;
  co.evaluator = target.evaluator;
  pm.Add(MakeCanonicalizePass(co));
  pm.Add(MakeUnrollLoopPass({}, target.evaluator));
  return pm.Run(g);
}

absl::Status OptimizeForInference(Graph& g, const Target& target) {
  PassManager pm;
  CanonicalizeOptions co;
  co.evaluator = target.evaluator;
  pm.Add(MakeCanonicalizePass(co));
  for (const Entry& e : PipelineFor(target)) pm.Add(e.factory());
  pm.Add(MakeCleanupPass());
  return pm.Run(g);
}


}  // namespace mixtrain
