#include "tools/cli.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mixtrain::cli {
namespace {

std::map<std::string, Command>& Registry() {
  static auto* r = new std::map<std::string, Command>();
  return *r;
}

const FlagSpec* FindSpec(const std::vector<FlagSpec>& specs, const std::string& name) {
  for (const FlagSpec& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv,
                                 const std::vector<FlagSpec>& specs) {
  Args a;
  for (const FlagSpec& s : specs) a.values_[s.name] = s.default_value;
  bool only_positional = false;
  for (const std::string& arg : argv) {
    if (only_positional || arg.size() < 2 || arg[0] != '-' ) {
      a.positional_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      a.help_ = true;
      continue;
    }
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body, value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    const FlagSpec* spec = FindSpec(specs, name);
    if (spec == nullptr && name.rfind("no-", 0) == 0) {
      const FlagSpec* neg = FindSpec(specs, name.substr(3));
      if (neg != nullptr && neg->is_bool && !has_value) {
        a.values_[neg->name] = "false";
        a.set_[neg->name] = true;
        continue;
      }
    }
    if (spec == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '--", name, "' (see --help)"));
    if (spec->is_bool) {
      if (!has_value) value = "true";
      if (value != "true" && value != "false" && value != "1" && value != "0")
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " takes true or false, not '", value, "'"));
      value = (value == "1" || value == "true") ? "true" : "false";
    } else if (!has_value) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value: --", name, "=..."));
    }
    a.values_[name] = value;
    a.set_[name] = true;
  }
  return a;
}

std::string Args::str(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::string() : it->second;
}

absl::StatusOr<int64_t> Args::integer(const std::string& name) const {
  int64_t v;
  if (!absl::SimpleAtoi(str(name), &v))
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", name, " expects an integer, got '", str(name), "'"));
  return v;
}

absl::StatusOr<double> Args::number(const std::string& name) const {
  double v;
  if (!absl::SimpleAtod(str(name), &v))
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", name, " expects a number, got '", str(name), "'"));
  return v;
}

bool Args::flag(const std::string& name) const { return str(name) == "true"; }

std::vector<std::string> Args::list(const std::string& name) const {
  std::string s = str(name);
  if (s.empty()) return {};
  return absl::StrSplit(s, ',', absl::SkipEmpty());
}

void RegisterCommand(Command c) { Registry()[c.name] = std::move(c); }
const std::map<std::string, Command>& Commands() { return Registry(); }

std::string HelpText(const Command& c) {
  std::string out = absl::StrCat("usage: ", c.usage, "\n\n", c.summary, "\n");
  if (!c.flags.empty()) out += "\nflags:\n";
  for (const FlagSpec& f : c.flags) {
    std::string left = absl::StrCat("  --", f.name, f.is_bool ? "" : "=...");
    if (left.size() < 26) left.resize(26, ' ');
    absl::StrAppend(&out, left, " ", f.help);
    if (!f.default_value.empty()) absl::StrAppend(&out, " (default: ", f.default_value, ")");
    out += "\n";
  }
  return out;
}

int Fail(const std::string& cmd, const absl::Status& s) {
  std::fprintf(stderr, "mixtrain %s: %s\n", cmd.c_str(), std::string(s.message()).c_str());
  return 1;
}

}  // namespace mixtrain::cli
