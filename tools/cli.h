// The command line's small framework: subcommands register themselves (one file per subcommand,
// tools/cmd_<name>.cc) and declare their flags, so `mixtrain CMD --help` lists exactly CMD's flags
// and an unknown or malformed flag is an error naming it. Every numeric flag of every command is a
// row of one table (kNumericFlags in cli.cc) and is checked while parsing, before a command runs.
// Also the checks of the files a command reads and writes, made before any work starts.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mixtrain/train_config.h"

namespace mixtrain::cli {

struct FlagSpec {
  std::string name;           // without dashes: "format"
  std::string default_value;  // shown in --help; "" = no default
  std::string help;
  bool is_bool = false;       // --x, --x=true|false, --no-x
  std::string bare_value;     // non-empty: a valued flag given as plain --x takes this value
};

// A numeric flag: the values it takes. A flag that sets a TrainConfig field takes that field's
// rule (TrainConfig::NumberRuleOf), so `--lr` and a config file's `optimizer.lr` agree.
struct NumericFlag {
  std::string name;          // "lr"
  std::string config_field;  // "optimizer.lr", or "" for a flag of the command line only
  NumberRule rule;           // the field's rule where config_field is set
  std::vector<std::string> words;  // accepted besides numbers ("dynamic", "off")
};
// The kinds of flag tools/step_flags_fields.inc names (MT_STEP_FLAG rows, generated from the
// proto's field options): the value as it is, a number checked by the field's rule, a bool flag,
// an enum by its proto name.
enum FieldFlagKind { kString, kNumber, kBool, kEnum };

// Every numeric flag of every command, one row each.
const std::vector<NumericFlag>& NumericFlags();

class Args {
 public:
  // Parses argv (after the subcommand name) against `specs`. "--help" sets help(). Every numeric
  // flag's value (given or default) is checked against its NumericFlag row here, so a command
  // never sees an out-of-range number: "--lr=-1: must be a finite number > 0".
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::vector<FlagSpec>& specs);
  bool help() const { return help_; }
  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& name) const { return set_.contains(name); }  // given explicitly
  std::string str(const std::string& name) const;
  // A numeric flag's checked value; `name` must be a NumericFlags() row of the command (and, for a
  // flag with words, hold a number): anything else is a bug, and aborts.
  int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  bool flag(const std::string& name) const;
  // Comma-separated list; empty string -> empty list.
  std::vector<std::string> list(const std::string& name) const;

 private:
  bool help_ = false;
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
  std::map<std::string, double> numbers_;  // the numeric flags that hold a number
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

// Registers a command. A flag whose default is a number must be a NumericFlags() row (aborts
// otherwise), so no numeric flag goes unchecked.
void RegisterCommand(Command c);
const std::map<std::string, Command>& Commands();
std::string HelpText(const Command& c);

// Prints "mixtrain <cmd>: <status message>" to stderr and returns 1 (for commands' error paths).
int Fail(const std::string& cmd, const absl::Status& s);

// An input file, checked before it is opened: it exists and is a regular file (a FIFO would
// block the reader, a directory or device is no input). `what` names it in the error ("--data",
// "MODEL.onnx").
absl::Status CheckInputPath(const std::string& what, const std::string& path);
// The contents of an input file (CheckInputPath's rules; the open never blocks).
absl::StatusOr<std::string> ReadInputFile(const std::string& what, const std::string& path);
// An output file, checked before any work: its folder exists and is writable, and the path is
// not a directory, device, FIFO, socket or symbolic link (an existing regular file is replaced).
// `flag` names it in the error ("--save").
absl::Status CheckOutputPath(const std::string& flag, const std::string& path);

// A file a command reads or writes, as the user named it: `what` is the flag or argument
// ("--data", "MODEL.onnx"), `path` the path given.
struct FileArg {
  std::string what;
  std::string path;
};
// Every file a command reads and writes, checked before any work: each input by CheckInputPath,
// each output by CheckOutputPath, then no two outputs and no output and input the same file.
// Paths are compared as files, not as text: "a", "./a", "d/../a", a symbolic link to it and a
// hard link to it (same device and inode) are one file. The error names both. `may_share` lists
// (output, input) pairs that may be one file, e.g. {"--save", "--resume"}: a checkpoint read in
// full before the run replaced atomically by the run's own.
absl::Status CheckFiles(const std::vector<FileArg>& inputs, const std::vector<FileArg>& outputs,
                        const std::vector<std::pair<std::string, std::string>>& may_share = {});

// A file written in full or not at all: the contents go to an unpredictable temp file created
// next to the target with O_EXCL (".<name>.tmp.<pid>.XXXXXX", never an existing file or a link
// planted there), renamed over the target by Commit(). Destroyed uncommitted, it removes the temp.
class AtomicOutputFile {
 public:
  static absl::StatusOr<std::unique_ptr<AtomicOutputFile>> Open(const std::string& flag, const std::string& path);
  // The whole of `contents` to `path` at once: Open, write, Commit (nothing left on failure).
  static absl::Status Write(const std::string& flag, const std::string& path, std::string_view contents);
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;
  std::FILE* file() const { return f_; }
  // Flushes, syncs and renames the temp over the target; the file mode is what a plain
  // open(O_CREAT) would give (0666 minus the umask; an existing target's permissions are kept).
  absl::Status Commit();

 private:
  AtomicOutputFile(std::string flag, std::string path, std::string tmp, std::FILE* f)
      : flag_(std::move(flag)), path_(std::move(path)), tmp_(std::move(tmp)), f_(f) {}
  std::string flag_, path_, tmp_;
  std::FILE* f_ = nullptr;
};

// A number as JSON: finite values with 8 significant digits, NaN and infinities as null (JSON
// has no literal for them).
std::string JsonNumber(double v);

#define MT_REGISTER_COMMAND(tag, ...) \
  static const bool mt_command_registered_##tag = (::mixtrain::cli::RegisterCommand(__VA_ARGS__), true)

}  // namespace mixtrain::cli
