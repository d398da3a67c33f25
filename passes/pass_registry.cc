// See pass_registry.h. Also holds the two passes that exist before any rewrite does: `import`
// (the graph is already imported when passes run, so it changes nothing; it lets a pipeline name
// its start) and `verify` (the structural verifier as a pass).
#include "passes/pass_registry.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/verifier.h"

namespace mixtrain {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, PassFactory> factories;
};

Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

class ImportPass : public Pass {
 public:
  absl::string_view name() const override { return "import"; }
  absl::StatusOr<bool> Run(Graph&) override { return false; }
};

class VerifyPass : public Pass {
 public:
  absl::string_view name() const override { return "verify"; }
  absl::StatusOr<bool> Run(Graph& g) override {
    MT_RETURN_IF_ERROR(Verify(g));
    return false;
  }
};

}  // namespace

void RegisterPass(const std::string& name, PassFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  MT_CHECK(r.factories.emplace(name, std::move(factory)).second)
      << "pass registered twice: " << name;
}

absl::StatusOr<std::unique_ptr<Pass>> CreatePassByName(const std::string& name) {
  PassFactory f;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) f = it->second;
  }
  if (!f)
    return absl::NotFoundError(absl::StrCat("unknown pass '", name, "' (known: ",
                                            absl::StrJoin(RegisteredPassNames(), ", "), ")"));
  return f();
}

std::vector<std::string> RegisteredPassNames() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

MT_REGISTER_PASS(import, [] { return std::make_unique<ImportPass>(); });
MT_REGISTER_PASS(verify, [] { return std::make_unique<VerifyPass>(); });

}  // namespace mixtrain
