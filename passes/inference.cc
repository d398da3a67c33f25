// See inference.h.
#include "passes/inference.h"

#include <algorithm>
#include <atomic>
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

// `inference` as one pass (for dump --passes=inference and pipelines built by name).
class InferencePass : public Pass {
 public:
  absl::string_view name() const override { return "inference"; }
  absl::StatusOr<bool> Run(Graph& g) override {
    bool changed = false;
    for (const Entry& e : Entries()) {
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
};

}  // namespace

namespace {
std::atomic<TargetTraitsQuery> target_query{nullptr};
}  // namespace

TargetTraitsQuery RegisterTargetTraits(TargetTraitsQuery query) { return target_query.exchange(query); }

TargetTraits CurrentTargetTraits() {
  TargetTraitsQuery q = target_query.load();
  return q == nullptr ? TargetTraits{} : q();
}

void RegisterInferencePass(const std::string& name, int position, PassFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Entry& e : r.entries) MT_CHECK(e.name != name) << "inference pass registered twice: " << name;
  r.entries.push_back({position, name, std::move(factory)});
  std::sort(r.entries.begin(), r.entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.position, a.name) < std::tie(b.position, b.name);
  });
}

std::vector<std::string> InferencePassNames() {
  std::vector<std::string> names;
  for (const Entry& e : Entries()) names.push_back(e.name);
  return names;
}

absl::Status ImportForInference(Graph& g) {
  PassManager pm;
  pm.Add(MakeCanonicalizePass());
  pm.Add(MakeUnrollLoopPass());
  return pm.Run(g);
}

absl::Status OptimizeForInference(Graph& g) {
  PassManager pm;
  pm.Add(MakeCanonicalizePass());  // unroll_loop is the first registered inference pass
  for (const Entry& e : Entries()) pm.Add(e.factory());
  pm.Add(MakeCleanupPass());
  return pm.Run(g);
}

MT_REGISTER_PASS(inference, [] { return std::make_unique<InferencePass>(); });

}  // namespace mixtrain
