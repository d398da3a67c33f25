#include "passes/pass.h"

#include "absl/strings/str_cat.h"
#include "graph/verifier.h"

namespace mixtrain {

absl::Status PassManager::Run(Graph& g) {
  for (const auto& pass : passes_) {
    absl::StatusOr<bool> changed = pass->Run(g);
    if (!changed.ok())
      return absl::Status(changed.status().code(),
                          absl::StrCat("pass ", pass->name(), ": ", changed.status().message()));
    absl::Status v = Verify(g);
    if (!v.ok())
      return absl::InternalError(absl::StrCat("graph invalid after pass ", pass->name(), ": ", v.message()));
  }
  return absl::OkStatus();
}

}  // namespace mixtrain
