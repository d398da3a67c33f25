// Passes by name, for `--passes=a,b,c` on the command line. Each pass registers itself from its
// own file, so adding a pass never touches a central list:
//   MT_REGISTER_PASS(cast_fold, [] { return std::make_unique<CastFoldPass>(); });
// The registered name is the pass's name() ("cast_fold" above).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "passes/pass.h"

namespace mixtrain {

using PassFactory = std::function<std::unique_ptr<Pass>()>;

void RegisterPass(const std::string& name, PassFactory factory);
// Fails naming the pass and listing the known ones.
absl::StatusOr<std::unique_ptr<Pass>> CreatePassByName(const std::string& name);
std::vector<std::string> RegisteredPassNames();  // sorted

#define MT_REGISTER_PASS(name, factory) \
  static const bool mt_pass_registered_##name = (::mixtrain::RegisterPass(#name, factory), true)

}  // namespace mixtrain
