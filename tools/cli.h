// The command line's small framework: subcommands register themselves (one file per subcommand,
// tools/cmd_<name>.cc) and declare their flags, so `mixtrain CMD --help` lists exactly CMD's flags
// and an unknown or malformed flag is an error naming it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mixtrain::cli {

struct FlagSpec {
  std::string name;           // without dashes: "format"
  std::string default_value;  // shown in --help; "" = no default
  std::string help;
  bool is_bool = false;       // --x, --x=true|false, --no-x
};

class Args {
 public:
  // Parses argv (after the subcommand name) against `specs`. "--help" sets help().
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::vector<FlagSpec>& specs);
  bool help() const { return help_; }
  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& name) const { return set_.contains(name); }  // given explicitly
  std::string str(const std::string& name) const;
  absl::StatusOr<int64_t> integer(const std::string& name) const;  // error names the flag
  absl::StatusOr<double> number(const std::string& name) const;
  bool flag(const std::string& name) const;
  // Comma-separated list; empty string -> empty list.
  std::vector<std::string> list(const std::string& name) const;

 private:
  bool help_ = false;
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> set_;
};

struct Command {
  std::string name;
  std::string usage;    // "mixtrain dump MODEL.onnx [flags]"
  std::string summary;  // one line for `mixtrain --help`
  std::vector<FlagSpec> flags;
  // Returns the process exit code. Errors are printed by the command as "mixtrain CMD: <msg>".
  std::function<int(const Args&)> run;
};

void RegisterCommand(Command c);
const std::map<std::string, Command>& Commands();
std::string HelpText(const Command& c);

// Prints "mixtrain <cmd>: <status message>" to stderr and returns 1 (for commands' error paths).
int Fail(const std::string& cmd, const absl::Status& s);

#define MT_REGISTER_COMMAND(tag, ...) \
  static const bool mt_command_registered_##tag = (::mixtrain::cli::RegisterCommand(__VA_ARGS__), true)

}  // namespace mixtrain::cli
