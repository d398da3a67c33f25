#include "tools/train_outputs.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mixtrain/status_macros.h"

namespace mixtrain::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

void OnStop(int sig) { g_stop_signal = sig; }

// "dir/run.ckpt" -> {"dir", "run", ".ckpt"}; a name without an extension (or a dot file) has "".
struct PathParts {
  std::filesystem::path dir;
  std::string stem, ext;
};
PathParts Split(const std::string& path) {
  std::filesystem::path p(path);
  PathParts parts{p.parent_path(), p.filename().string(), ""};
  if (size_t dot = parts.stem.rfind('.'); dot != std::string::npos && dot > 0) {
    parts.ext = parts.stem.substr(dot);
    parts.stem.resize(dot);
  }
  return parts;
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnStop;
  // SA_RESETHAND: a second signal takes the default action (ends the process) for a user who
  // does not want to wait for the step; SA_RESTART: reads in progress are not cut short.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int StopSignal() { return g_stop_signal; }

std::string CheckpointKeeper::NumberedPath(int64_t step) const {
  const PathParts p = Split(path_);
  return (p.dir / absl::StrCat(p.stem, "-step", step, p.ext)).string();
}

absl::Status CheckpointKeeper::Save(const Trainer& t, const TrainingPosition& position) const {
  MIXTRAIN_RETURN_IF_ERROR(t.SaveCheckpoint(path_, position));
  if (keep_ <= 1 || t.rank() != 0) return absl::OkStatus();
  // The file just renamed over path_ also gets the step's name; the next save replaces path_ with
  // a new file, so this one stays as it is.
  const std::string numbered = NumberedPath(t.steps_taken());
  if (::unlink(numbered.c_str()) != 0 && errno != ENOENT)
    return absl::InternalError(absl::StrCat("--keep: cannot replace '", numbered, "': ", std::strerror(errno)));
  if (::link(path_.c_str(), numbered.c_str()) != 0)
    return absl::InternalError(absl::StrCat("--keep: cannot link '", path_, "' as '", numbered, "': ", std::strerror(errno)));
  // The numbered checkpoints of this path, by step; all but the newest `keep` go.
  const PathParts p = Split(path_);
  const std::string prefix = p.stem + "-step";
  std::map<int64_t, std::filesystem::path> numbered_files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(p.dir.empty() ? "." : p.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + p.ext.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - p.ext.size(), p.ext.size(), p.ext) != 0)
      continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - p.ext.size());
    int64_t step;
    if (!digits.empty() && std::all_of(digits.begin(), digits.end(), ::isdigit) && absl::SimpleAtoi(digits, &step))
      numbered_files[step] = entry.path();
  }
  if (ec) return absl::InternalError(absl::StrCat("--keep: cannot list '", p.dir.string(), "': ", ec.message()));
  while (numbered_files.size() > static_cast<size_t>(keep_)) {
    if (!std::filesystem::remove(numbered_files.begin()->second, ec) && ec)
      return absl::InternalError(absl::StrCat("--keep: cannot remove '", numbered_files.begin()->second.string(),
                                              "': ", ec.message()));
    numbered_files.erase(numbered_files.begin());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RunLog>> RunLog::Open(const std::string& json_path, const std::string& log_dir) {
  auto log = std::unique_ptr<RunLog>(new RunLog());
  if (!json_path.empty()) {
    // An unpredictable temp file renamed over the target when the run ends, so a failed run leaves
    // nothing behind (and a link planted at a guessable name is never used).
    MIXTRAIN_ASSIGN_OR_RETURN(log->json_log_, AtomicOutputFile::Open("--log-json", json_path));
    log->json_ = log->json_log_->file();
  }
  if (!log_dir.empty()) {
    absl::StatusOr<std::unique_ptr<SummaryWriter>> w = SummaryWriter::Create(log_dir);
    if (!w.ok()) return absl::Status(w.status().code(), absl::StrCat("--log-dir: ", w.status().message()));
    log->events_ = *std::move(w);
  }
  return log;
}

absl::Status RunLog::Step(const StepRow& r) {
  if (json_)  // NaN and infinities as null: JSON has no literal for them
    std::fprintf(json_, "{\"step\": %lld, \"loss\": %s, \"loss_scale\": %s, \"skipped\": %s, \"lr\": %s, \"ms\": %.4f}\n",
                 static_cast<long long>(r.step), JsonNumber(r.loss).c_str(), JsonNumber(r.loss_scale).c_str(),
                 r.skipped ? "true" : "false", JsonNumber(r.lr).c_str(), r.ms);
  if (!events_ || !r.read) return absl::OkStatus();  // the loss is read on log steps
  return events_->AddScalars(r.step, {{"train/loss", r.loss},
                                      {"train/learning_rate", r.lr},
                                      {"train/loss_scale", r.loss_scale},
                                      {"train/step_ms", r.ms}});
}

absl::Status RunLog::Progress(int64_t step, double examples_per_s, double ms_per_step, int64_t skipped) {
  if (!events_) return absl::OkStatus();
  return events_->AddScalars(step, {{"train/examples_per_s", examples_per_s},
                                    {"train/window_ms_per_step", ms_per_step},
                                    {"train/skipped_steps", static_cast<double>(skipped)}});
}

absl::Status RunLog::Eval(int64_t step, int64_t epoch, const EvalResult& e) {
  const std::vector<std::pair<std::string, double>> metrics = e.Metrics();
  if (json_) {
    std::string row = absl::StrFormat("{\"step\": %lld, \"epoch\": %lld", static_cast<long long>(step),
                                      static_cast<long long>(epoch));
    for (const auto& [name, v] : metrics) absl::StrAppend(&row, ", \"eval_", name, "\": ", JsonNumber(v));
    absl::StrAppendFormat(&row, ", \"eval_examples\": %d}\n", e.examples);
    std::fputs(row.c_str(), json_);
  }
  if (!events_ || metrics.empty()) return absl::OkStatus();
  std::vector<std::pair<std::string, double>> scalars;
  for (const auto& [name, v] : metrics) scalars.emplace_back("eval/" + name, v);
  return events_->AddScalars(step, scalars);
}

absl::Status RunLog::Commit() { return json_log_ ? json_log_->Commit() : absl::OkStatus(); }

}  // namespace mixtrain::cli
