#include "tools/plot_log.h"

#include <cmath>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"

namespace mixtrain::cli {
namespace {

using nlohmann::json;

// A member's value as the checks below read it.
enum class Kind { kNumber, kString, kBool, kNull, kNested };
Kind KindOf(const json& v) {
  if (v.is_number()) return Kind::kNumber;
  if (v.is_string()) return Kind::kString;
  if (v.is_boolean()) return Kind::kBool;
  if (v.is_null()) return Kind::kNull;
  return Kind::kNested;
}

// The six keys train writes, and what each may hold.
enum class Want { kStep, kNumberOrNull, kBool };
struct Key {
  const char* name;
  Want want;
};
constexpr Key kKeys[] = {{"step", Want::kStep},     {"loss", Want::kNumberOrNull}, {"loss_scale", Want::kNumberOrNull},
                         {"skipped", Want::kBool}, {"lr", Want::kNumberOrNull},   {"ms", Want::kNumberOrNull}};
constexpr int kNumKeys = sizeof(kKeys) / sizeof(kKeys[0]);

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kNumber: return "a number";
    case Kind::kString: return "a string";
    case Kind::kBool: return "a boolean";
    case Kind::kNull: return "null";
    case Kind::kNested: return "an object or array";
  }
  return "?";
}

// Whether `v` is what `want` takes; the error says what it should have been.
absl::Status Check(const std::string& key, const json& v, Want want) {
  const Kind kind = KindOf(v);
  const bool ok = want == Want::kBool ? kind == Kind::kBool
                  : want == Want::kStep
                      ? kind == Kind::kNumber && v.get<double>() >= 0 && v.get<double>() <= 9007199254740992.0 &&
                            v.get<double>() == std::floor(v.get<double>())
                      : kind == Kind::kNumber || kind == Kind::kNull;
  if (ok) return absl::OkStatus();
  const char* what = want == Want::kBool ? "true or false" : want == Want::kStep ? "an integer >= 0" : "a number or null";
  return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be ", what, ", not ",
                                                 kind == Kind::kNumber ? absl::StrCat(v.get<double>()) : KindName(kind)));
}

double NumberOrNan(const json& v) { return v.is_null() ? NAN : v.get<double>(); }

// A step line: every one of the six keys, each with its kind.
absl::StatusOr<LogStep> ToStep(const json& row) {
  for (const Key& k : kKeys) {
    if (!row.contains(k.name)) return absl::InvalidArgumentError(absl::StrCat("no key \"", k.name, "\""));
    MIXTRAIN_RETURN_IF_ERROR(Check(k.name, row.at(k.name), k.want));
  }
  return LogStep{.step = row.at("step").get<int64_t>(), .loss = NumberOrNan(row.at("loss")),
                 .loss_scale = NumberOrNan(row.at("loss_scale")), .lr = NumberOrNan(row.at("lr")),
                 .ms = NumberOrNan(row.at("ms")), .skipped = row.at("skipped").get<bool>()};
}

// An evaluation line: "step", and "eval_*" numbers (or null).
absl::StatusOr<LogEval> ToEval(const json& row) {
  if (!row.contains("step")) return absl::InvalidArgumentError("no key \"step\"");
  MIXTRAIN_RETURN_IF_ERROR(Check("step", row.at("step"), Want::kStep));
  LogEval e{.step = row.at("step").get<int64_t>()};
  for (const auto& [key, v] : row.items()) {
    if (key.rfind("eval_", 0) != 0) continue;
    MIXTRAIN_RETURN_IF_ERROR(Check(key, v, Want::kNumberOrNull));
    e.metrics.emplace_back(key.substr(5), NumberOrNan(v));
  }
  return e;
}

}  // namespace

double LogEval::Metric(const std::string& name) const {
  for (const auto& [n, v] : metrics)
    if (n == name) return v;
  return NAN;
}

absl::StatusOr<TrainLog> ParseTrainLog(const std::string& path, const std::string& text) {
  TrainLog log;
  log.path = path;
  log.name = path.substr(path.rfind('/') + 1);  // npos + 1 == 0: the whole path
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty log (no steps)"));
  size_t begin = 0;
  for (int64_t line = 1; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view s(text.data() + begin, end - begin);
    begin = end + 1;
    auto fail = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", what));
    };
    const size_t first = s.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) return fail("empty line (expected one JSON object)");
    if (s[first] != '{') return fail("expected '{' (each line is one JSON object)");
    const json row = json::parse(s, /*cb=*/nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded()) return fail("not valid JSON (each line is one JSON object)");
    if (!row.is_object()) return fail("expected '{' (each line is one JSON object)");
    // Flat objects: a nested value is no part of any log train writes.
    for (const auto& [key, v] : row.items())
      if (KindOf(v) == Kind::kNested) return fail(absl::StrCat("\"", key, "\" holds an object or array"));
    if (row.contains("eval_loss")) {
      absl::StatusOr<LogEval> e = ToEval(row);
      if (!e.ok()) return fail(std::string(e.status().message()));
      if (!log.evals.empty() && e->step < log.evals.back().step)
        return fail(absl::StrCat("evaluation at step ", e->step, " follows one at step ", log.evals.back().step));
      log.evals.push_back(*std::move(e));
      continue;
    }
    absl::StatusOr<LogStep> step = ToStep(row);
    if (!step.ok()) return fail(std::string(step.status().message()));
    if (!log.steps.empty() && step->step <= log.steps.back().step)
      return fail(absl::StrCat("step ", step->step, " follows step ", log.steps.back().step, ": steps must increase"));
    log.steps.push_back(*step);
  }
  if (log.steps.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no step rows (only evaluations)"));
  return log;
}

absl::StatusOr<TrainLog> ReadTrainLog(const std::string& path) {
  MIXTRAIN_ASSIGN_OR_RETURN(std::string text, ReadInputFile("LOG.jsonl", path));
  return ParseTrainLog(path, text);
}

}  // namespace mixtrain::cli
