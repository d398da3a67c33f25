#include "tools/cli.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mixtrain/status_macros.h"

namespace mixtrain::cli {
namespace {

// A broken invariant of the command line itself (not a user's error): file, line, abort.
#define MT_CLI_CHECK(cond, msg)                                                      \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,         \
                   std::string(msg).c_str());                                        \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

// A flag that sets a TrainConfig field, with the field's rule.
NumericFlag Field(std::string name, std::string field, std::vector<std::string> words = {}) {
  const NumberRule* rule = TrainConfig::NumberRuleOf(field);
  MT_CLI_CHECK(rule != nullptr, absl::StrCat("--", name, ": '", field, "' is no numeric TrainConfig field"));
  return {std::move(name), std::move(field), *rule, std::move(words)};
}
NumericFlag Own(std::string name, NumberRule rule) { return {std::move(name), "", rule, {}}; }

const NumericFlag* FindNumeric(const std::string& name) {
  for (const NumericFlag& f : NumericFlags())
    if (f.name == name) return &f;
  return nullptr;
}

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

const std::vector<NumericFlag>& NumericFlags() {
  static const auto* flags = [] {
    auto* rows = new std::vector<NumericFlag>{
        Field("loss-scale", "loss_scaler.init_scale", {"dynamic", "off"}),
        Field("debug-precision", "debug_precision"),
        Field("epochs", "epochs"),
        Field("steps", "steps"),
        Field("batch-size", "data.batch_size"),  // train; bench's random batch
        // data.seed takes any uint64; a flag's value must be exact in a double.
        Own("seed", NumberRule::Integer(0, 9007199254740991.0)),
        // train's run: checkpoints, evaluation, logs (TrainConfig.run, saved with checkpoints)
        Field("limit-train", "run.limit_train"),
        Field("limit-test", "run.limit_test"),
        Field("log-every", "run.log_every"),
        Field("save-every", "run.save_every"),
        Field("keep", "run.keep"),
        Field("eval-every", "run.eval_every"),
        Field("early-stop", "run.early_stop"),
        Own("warmup", NumberRule::Integer(0, 1e6)),  // bench
        Own("iters", NumberRule::Integer(1, 1e6)),   // bench
        Own("smooth", NumberRule::Float(0, 1, false, true)),  // plot: the loss EMA's factor, [0, 1)
        Own("width", NumberRule::Integer(200, 10000)),        // plot
        Own("height", NumberRule::Integer(150, 10000)),       // plot
    };
    // The step flags that set a numeric TrainConfig field (from the proto's field options).
#define MT_STEP_FLAG(name, def, help, kind, path, member, values) \
    if (kind == kNumber) rows->push_back(Field(name, path));
#include "tools/step_flags_fields.inc"
#undef MT_STEP_FLAG
    return rows;
  }();
  return *flags;
}

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
    } else if (!has_value && !spec->bare_value.empty()) {
      value = spec->bare_value;
    } else if (!has_value || value.empty()) {
      // An empty value names nothing: `--labels=` would reach the graph as a value without a name,
      // `--data=` would quietly mean the built-in data set.
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value: --", name, "=..."));
    }
    a.values_[name] = value;
    a.set_[name] = true;
  }
  for (const FlagSpec& s : specs) {
    const NumericFlag* n = FindNumeric(s.name);
    if (n == nullptr || s.is_bool) continue;
    const std::string& v = a.values_[s.name];
    if (std::find(n->words.begin(), n->words.end(), v) != n->words.end()) continue;
    if (v.empty() && !a.has(s.name)) continue;  // no default: the command decides
    absl::StatusOr<double> x = ParseNumber("--" + s.name, v, n->rule);
    if (!x.ok()) {
      if (n->words.empty()) return x.status();
      return absl::InvalidArgumentError(
          absl::StrCat(x.status().message(), ", or one of: ", absl::StrJoin(n->words, ", ")));
    }
    a.numbers_[s.name] = *x;
  }
  return a;
}

std::string Args::str(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::string() : it->second;
}

int64_t Args::integer(const std::string& name) const {
  const NumericFlag* n = FindNumeric(name);
  MT_CLI_CHECK(n != nullptr && n->rule.kind == NumberRule::Kind::kInteger,
               absl::StrCat("--", name, " is no integer flag of NumericFlags()"));
  return static_cast<int64_t>(number(name));
}

double Args::number(const std::string& name) const {
  auto it = numbers_.find(name);
  MT_CLI_CHECK(it != numbers_.end(), absl::StrCat("--", name, " holds no checked number"));
  return it->second;
}

bool Args::flag(const std::string& name) const { return str(name) == "true"; }

std::vector<std::string> Args::list(const std::string& name) const {
  std::string s = str(name);
  if (s.empty()) return {};
  return absl::StrSplit(s, ',', absl::SkipEmpty());
}

void RegisterCommand(Command c) {
  for (const FlagSpec& f : c.flags) {
    double unused;
    MT_CLI_CHECK(f.is_bool || FindNumeric(f.name) != nullptr || !absl::SimpleAtod(f.default_value, &unused),
                 absl::StrCat("flag --", f.name, " of '", c.name, "' has a numeric default but no NumericFlags() row"));
  }
  Registry()[c.name] = std::move(c);
}
const std::map<std::string, Command>& Commands() { return Registry(); }

std::string HelpText(const Command& c) {
  std::string out = absl::StrCat("usage: ", c.usage, "\n\n", c.summary, "\n");
  if (!c.flags.empty()) out += "\nflags:\n";
  for (const FlagSpec& f : c.flags) {
    std::string left = absl::StrCat("  --", f.name, f.is_bool ? "" : "=...");
    if (left.size() < 26) left.resize(26, ' ');
    absl::StrAppend(&out, left, " ", f.help);
    const NumericFlag* n = f.is_bool ? nullptr : FindNumeric(f.name);
    if (!f.default_value.empty() || n != nullptr) {
      std::vector<std::string> notes;
      if (!f.default_value.empty()) notes.push_back("default: " + f.default_value);
      if (n != nullptr) notes.push_back(n->rule.Describe());
      absl::StrAppend(&out, " (", absl::StrJoin(notes, "; "), ")");
    }
    out += "\n";
  }
  return out;
}

int Fail(const std::string& cmd, const absl::Status& s) {
  std::fprintf(stderr, "mixtrain %s: %s\n", cmd.c_str(), std::string(s.message()).c_str());
  return 1;
}

namespace {

const char* FileKind(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) || S_ISBLK(m) ? "a device"
         : S_ISSOCK(m) ? "a socket" : S_ISLNK(m) ? "a symbolic link" : "a special file";
}

// The folder and the name of a path ("a/b.txt" -> "a", "b.txt"; "b.txt" -> ".", "b.txt").
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace

absl::Status CheckInputPath(const std::string& what, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(what, ": cannot open '", path, "': ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", path, "' is ", FileKind(st.st_mode), ", not a regular file"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadInputFile(const std::string& what, const std::string& path) {
  MIXTRAIN_RETURN_IF_ERROR(CheckInputPath(what, path));
  // O_NONBLOCK: should a FIFO replace the file after the check, the open still returns.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(what, ": cannot open '", path, "': ", std::strerror(errno)));
  struct stat st;
  std::string out;
  absl::Status status;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is not a regular file"));
  } else {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    char buf[1 << 16];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = absl::DataLossError(absl::StrCat(what, ": cannot read '", path, "': ", std::strerror(errno)));
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return out;
}

absl::Status CheckOutputPath(const std::string& flag, const std::string& path) {
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": ", parts...));
  };
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a file name"));
  const auto [dir, name] = SplitPath(path);
  if (name.empty() || name == "." || name == "..") return error("names a folder, not a file");
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return error("folder '", dir, "': ", std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return error("'", dir, "' is not a folder");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return error("cannot write in folder '", dir, "': ", std::strerror(errno));
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return error("is ", FileKind(st.st_mode), "; only a regular file is replaced");
  } else if (errno != ENOENT) {
    return error(std::strerror(errno));
  }
  return absl::OkStatus();
}

namespace {

// What a path is, as a file: its device and inode when it exists, else the real path of its folder
// and its name (a file not yet there, which is one file with another path only when both name it
// so).
struct FileId {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string resolved;
  bool operator==(const FileId& o) const {
    return exists == o.exists && (exists ? dev == o.dev && ino == o.ino : resolved == o.resolved);
  }
};

FileId IdOf(const std::string& path) {
  FileId id;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    return id;
  }
  const auto [dir, name] = SplitPath(path);
  char* real = ::realpath(dir.c_str(), nullptr);
  id.resolved = absl::StrCat(real != nullptr ? real : dir, "/", name);
  std::free(real);
  return id;
}

}  // namespace

absl::Status CheckFiles(const std::vector<FileArg>& inputs, const std::vector<FileArg>& outputs,
                        const std::vector<std::pair<std::string, std::string>>& may_share) {
  for (const FileArg& in : inputs) MIXTRAIN_RETURN_IF_ERROR(CheckInputPath(in.what, in.path));
  for (const FileArg& out : outputs) MIXTRAIN_RETURN_IF_ERROR(CheckOutputPath(out.what, out.path));
  auto same = [](const FileArg& a, const FileArg& b, const char* why) {
    return absl::InvalidArgumentError(absl::StrCat(a.what, "=", a.path, " and ", b.what, "=", b.path,
                                                   " are the same file: ", why));
  };
  std::vector<FileId> out_ids;
  for (const FileArg& out : outputs) out_ids.push_back(IdOf(out.path));
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (out_ids[i] == out_ids[j]) return same(outputs[j], outputs[i], "one output would replace the other");
    for (const FileArg& in : inputs) {
      const bool allowed = std::find(may_share.begin(), may_share.end(),
                                     std::make_pair(outputs[i].what, in.what)) != may_share.end();
      if (!allowed && out_ids[i] == IdOf(in.path))
        return same(outputs[i], in, "the output would destroy the input");
    }
  }
  return absl::OkStatus();
}

absl::Status AtomicOutputFile::Write(const std::string& flag, const std::string& path, std::string_view contents) {
  MIXTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<AtomicOutputFile> f, Open(flag, path));
  if (std::fwrite(contents.data(), 1, contents.size(), f->file()) != contents.size())
    return absl::DataLossError(absl::StrCat(flag, "=", path, ": cannot write"));  // the temp goes with `f`
  return f->Commit();
}

absl::StatusOr<std::unique_ptr<AtomicOutputFile>> AtomicOutputFile::Open(const std::string& flag,
                                                                         const std::string& path) {
  MIXTRAIN_RETURN_IF_ERROR(CheckOutputPath(flag, path));
  const auto [dir, name] = SplitPath(path);
  // O_EXCL with a random name, created 0666 so the umask decides the mode (as a plain open does).
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    unsigned char r[6];
    if (::getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) break;
    static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string suffix;
    for (unsigned char c : r) suffix += kAlnum[c % 62];
    tmp = absl::StrCat(dir, "/.", name, ".tmp.", ::getpid(), ".", suffix);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": cannot create a file there: ", std::strerror(errno)));
  std::FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(flag, "=", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<AtomicOutputFile>(new AtomicOutputFile(flag, path, std::move(tmp), f));
}

AtomicOutputFile::~AtomicOutputFile() {
  if (f_ == nullptr) return;
  std::fclose(f_);
  ::unlink(tmp_.c_str());
}

absl::Status AtomicOutputFile::Commit() {
  MT_CLI_CHECK(f_ != nullptr, "AtomicOutputFile committed twice");
  // A replaced file keeps its permissions; a new one has the mode the umask gave the temp.
  struct stat st;
  bool ok = std::fflush(f_) == 0;
  if (ok && ::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ok = ::fchmod(fileno(f_), st.st_mode & 07777) == 0;
  ok = ok && ::fsync(fileno(f_)) == 0;
  ok = std::fclose(f_) == 0 && ok;
  f_ = nullptr;
  if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    return absl::DataLossError(absl::StrCat(flag_, "=", path_, ": cannot write: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

std::string JsonNumber(double v) { return std::isfinite(v) ? absl::StrFormat("%.8g", v) : "null"; }

}  // namespace mixtrain::cli
