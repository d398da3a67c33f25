// See CheckReservedNames in training.h: the names the training step's passes give the values they
// add, checked against the model's and the labels' before any pass runs, so a model with a value
// named "lr" or labels named "step" is refused instead of colliding inside a pass.
#include <string_view>

#include "absl/strings/str_cat.h"
#include "passes/passes.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

struct Reserved {
  const char* name;
  const char* use;
};
constexpr Reserved kNames[] = {
    {kScaledLossName, "the scaled loss"},      {kLossScaleName, "the loss scale"},
    {kGoodStepsName, "the loss scaler's count"}, {kStepName, "the update counter"},
    {kSkippedStepsName, "the skipped-update counter"}, {kLrName, "the learning rate input"},
    {kApplyName, "the accumulation input"},   {kFoundInfName, "the overflow flag"},
    {kPrecisionStatsName, "the precision debugger's output"},
};
// Per-parameter state: "<prefix><parameter>" (every one of kOptimizerStatePrefixes).
constexpr Reserved kPrefixes[] = {
    {kStatePrefix, "a state output"},         {kAccumPrefix, "gradient accumulation"},
    {kAdamMPrefix, "Adam's first moment"},    {kAdamVPrefix, "Adam's second moment"},
    {kSgdMomentumPrefix, "SGD's momentum"},   {kAdagradSumPrefix, "Adagrad's sum"},
};

// The use `name` is reserved for, or null.
const char* ReservedUse(std::string_view name) {
  for (const Reserved& r : kNames)
    if (name == r.name) return r.use;
  for (const Reserved& r : kPrefixes)
    if (name.substr(0, std::string_view(r.name).size()) == r.name) return r.use;
  return nullptr;
}

}  // namespace

absl::Status CheckReservedNames(const Graph& model, const std::string& labels) {
  if (!labels.empty()) {
    const char* use = labels == kLossName ? "the loss" : ReservedUse(labels);
    if (use != nullptr)
      return absl::InvalidArgumentError(absl::StrCat("the labels may not be named '", labels,
                                                     "': the training step names ", use, " so (choose --labels)"));
  }
  for (const Value* v : model.values())
    if (const char* use = ReservedUse(v->name))
      return absl::InvalidArgumentError(absl::StrCat("the model's value '", v->name, "' has a name the training step "
                                                     "gives ", use, "; rename it in the model"));
  return absl::OkStatus();
}

}  // namespace mixtrain
