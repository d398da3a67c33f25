#include "tools/train_loop.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mixtrain/status_macros.h"
#include "tools/precision_report.h"

namespace mixtrain::cli {
namespace {

using Clock = std::chrono::steady_clock;

// "2h05m", "3m12s", "41s".
std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

double MetricOf(const EvalResult& e, const std::string& name) {
  for (const auto& [n, v] : e.Metrics())
    if (n == name) return v;
  return NAN;
}

// The loop's state between steps: what a checkpoint saves, plus the progress line's window.
class Loop {
 public:
  explicit Loop(const TrainLoop& l) : l_(l), t_(*l.trainer), pos_(l.start) {}

  absl::StatusOr<TrainLoopEnd> Run() {
    TrainLoopEnd end;
    const int64_t first_step = t_.steps_taken();
    MIXTRAIN_ASSIGN_OR_RETURN(skipped_before_, t_.skipped_steps());
    t0_ = Clock::now();
    bool stop = false;
    while (t_.steps_taken() < l_.total && !stop) {
      const std::vector<int64_t> order = l_.train->Order(l_.shuffle, l_.seed, pos_.epoch);
      while (pos_.batch < l_.per_epoch && t_.steps_taken() < l_.total && !stop) {
        MIXTRAIN_RETURN_IF_ERROR(Step(order, first_step));
        const int64_t step = t_.steps_taken();
        const bool epoch_end = ++pos_.batch == l_.per_epoch;
        if (epoch_end) {
          if (tty_) std::fprintf(l_.info, "\n");
          ++pos_.epoch;
          pos_.batch = 0;
          MIXTRAIN_RETURN_IF_ERROR(Evaluate(absl::StrCat("epoch ", pos_.epoch), step, &stop));
        } else if (l_.run.eval_every > 0 && step % l_.run.eval_every == 0) {
          if (tty_) std::fprintf(l_.info, "\n");
          MIXTRAIN_RETURN_IF_ERROR(Evaluate(absl::StrCat("step ", step), step, &stop));
        }
        end.early_stopped = stop;
        MIXTRAIN_ASSIGN_OR_RETURN(end.stop_signal, StopRequested());
        if (end.stop_signal != 0) stop = true;
        const bool periodic = l_.run.save_every > 0 && step % l_.run.save_every == 0;
        if (!l_.run.save.empty() && (epoch_end || periodic || stop)) MIXTRAIN_RETURN_IF_ERROR(Save(l_.run.save, &end));
        if (end.stop_signal != 0 && l_.run.save.empty())
          MIXTRAIN_RETURN_IF_ERROR(Save(absl::StrCat("interrupted-step", step, ".ckpt"), &end));
        if (epoch_end) break;  // the next epoch has its own order
      }
    }
    if (tty_) std::fprintf(l_.info, "\n");
    end.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    MIXTRAIN_ASSIGN_OR_RETURN(const int64_t skipped_after, t_.skipped_steps());
    end.skipped = skipped_after - skipped_before_;
    end.position = pos_;
    return end;
  }

 private:
  absl::Status Step(const std::vector<int64_t>& order, int64_t first_step) {
    const int64_t bs = l_.batch_size;
    const int64_t begin = pos_.batch * bs, end = std::min(l_.train->size(), begin + bs);
    // This rank's shard of the global batch [begin, end) (every batch is whole: drop_last).
    const int64_t shard = (end - begin) / l_.ranks;
    MIXTRAIN_ASSIGN_OR_RETURN(TensorMap feeds,
                              l_.train->Gather(order, begin + l_.rank * shard, begin + (l_.rank + 1) * shard));
    const int64_t step = t_.steps_taken() + 1;
    const bool log = step % l_.run.log_every == 0 || step == l_.total || tty_;
    const auto s0 = Clock::now();
    MIXTRAIN_ASSIGN_OR_RETURN(StepResult r, t_.Step(feeds, {.read_loss = log || l_.log->json()}));
    // --profile: every step after the first (which builds the plans and primitives) is timed.
    if (l_.profile && t_.steps_taken() == first_step + 1) t_.SetProfiling(true);
    const float loss = r.loss.value_or(NAN);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
    window_ms_ += ms;
    ++window_n_;
    if (r.nonfinite && ++diagnosed_ <= kShownDiagnoses) {
      if (tty_) std::fprintf(l_.info, "\n");
      std::fprintf(l_.info, "mixtrain train: %s\n", DescribeNonFinite(*r.nonfinite).c_str());
      if (diagnosed_ == kShownDiagnoses)
        std::fprintf(l_.info, "mixtrain train: (further skipped steps are diagnosed in the summary)\n");
    }
    if (!std::isnan(loss)) loss_ema_ = std::isnan(loss_ema_) ? loss : 0.9 * loss_ema_ + 0.1 * loss;
    MIXTRAIN_RETURN_IF_ERROR(l_.log->Step({.step = step, .loss = loss, .read = r.loss.has_value(),
                                           .loss_scale = r.loss_scale, .skipped = r.skipped,
                                           .lr = r.learning_rate, .ms = ms}));
    if (!log) return absl::OkStatus();
    MIXTRAIN_ASSIGN_OR_RETURN(const int64_t skipped_now, t_.skipped_steps());
    const int64_t skipped = skipped_now - skipped_before_;
    const double ex_s = window_n_ * static_cast<double>(end - begin) / (window_ms_ / 1000.0);
    // The ETA from this call's pace so far (evaluations included).
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0_).count();
    const double eta = elapsed / static_cast<double>(step - first_step) * static_cast<double>(l_.total - step);
    std::string line = absl::StrFormat(
        "step %lld/%lld  epoch %lld  loss %.4f  %.0f ex/s  %.2f ms/step  scale %g  skipped %lld  ETA %s",
        static_cast<long long>(step), static_cast<long long>(l_.total), static_cast<long long>(pos_.epoch + 1),
        loss_ema_, ex_s, window_ms_ / window_n_, r.loss_scale, static_cast<long long>(skipped),
        Duration(eta).c_str());
    if (tty_) {
      const int width = 30, filled = static_cast<int>(width * step / l_.total);
      std::fprintf(l_.info, "\r[%s%s] %s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), line.c_str());
    } else {
      std::fprintf(l_.info, "%s\n", line.c_str());
    }
    if (step % l_.run.log_every == 0 || step == l_.total)
      MIXTRAIN_RETURN_IF_ERROR(l_.log->Progress(step, ex_s, window_ms_ / window_n_, skipped));
    if (!tty_ || step % l_.run.log_every == 0) window_ms_ = 0, window_n_ = 0;
    return absl::OkStatus();
  }

  // Evaluates on the test set (rank 0), prints "<when>: test loss ...", logs it, keeps the best
  // checkpoint and sets *stop when early stopping's patience has run out.
  absl::Status Evaluate(const std::string& when, int64_t step, bool* stop) {
    if (l_.test == nullptr) return absl::OkStatus();
    double loss = NAN;
    if (l_.rank == 0) {
      MIXTRAIN_ASSIGN_OR_RETURN(EvalResult e, EvaluateAll(t_, *l_.test, l_.eval_batch_size, l_.fixed_batch));
      std::printf("%s: %s\n", when.c_str(), EvalLine(e).c_str());
      std::fflush(stdout);
      MIXTRAIN_RETURN_IF_ERROR(l_.log->Eval(step, pos_.batch == 0 ? pos_.epoch : pos_.epoch + 1, e));
      loss = MetricOf(e, "loss");
    }
    if (l_.run.early_stop == 0 && l_.run.save_best.empty()) return absl::OkStatus();
    // Data parallel: rank 0's loss decides for every rank (they save and stop together).
    if (l_.ranks > 1) {
      float shared = l_.rank == 0 ? static_cast<float>(loss) : 0.0f;
      MIXTRAIN_RETURN_IF_ERROR(l_.world->AllReduceSum(&shared, 1, /*fixed_order=*/true));
      loss = shared;
    }
    if (!pos_.best_eval_loss || loss < *pos_.best_eval_loss) {
      pos_.best_eval_loss = loss;
      pos_.best_eval_step = step;
      pos_.evals_since_best = 0;
      if (!l_.run.save_best.empty()) MIXTRAIN_RETURN_IF_ERROR(t_.SaveCheckpoint(l_.run.save_best, pos_));
      return absl::OkStatus();
    }
    ++pos_.evals_since_best;
    if (l_.run.early_stop > 0 && pos_.evals_since_best >= l_.run.early_stop) {
      *stop = true;
      std::fprintf(l_.info, "mixtrain train: early stop at step %lld: the test loss has not gone below %.6g "
                   "(step %lld) in %d evaluations\n", static_cast<long long>(step), *pos_.best_eval_loss,
                   static_cast<long long>(pos_.best_eval_step), pos_.evals_since_best);
    }
    return absl::OkStatus();
  }

  // The SIGTERM or SIGINT seen, 0 for none (data parallel: by any rank, so all stop at the same
  // step; a rank that saw none reports SIGTERM).
  absl::StatusOr<int> StopRequested() {
    int sig = StopSignal();
    if (l_.ranks > 1) {
      float any = sig != 0 ? 1.0f : 0.0f;
      MIXTRAIN_RETURN_IF_ERROR(l_.world->AllReduceSum(&any, 1, /*fixed_order=*/true));
      if (any > 0 && sig == 0) sig = SIGTERM;
    }
    return sig;
  }

  absl::Status Save(const std::string& path, TrainLoopEnd* end) {
    if (end->saved_to == path && end->saved_step == t_.steps_taken()) return absl::OkStatus();
    MIXTRAIN_RETURN_IF_ERROR(CheckpointKeeper(path, path == l_.run.save ? l_.run.keep : 1).Save(t_, pos_));
    end->saved_to = path;
    end->saved_step = t_.steps_taken();
    return absl::OkStatus();
  }

  static constexpr int64_t kShownDiagnoses = 5;
  const TrainLoop& l_;
  Trainer& t_;
  TrainingPosition pos_;
  const bool tty_ = isatty(fileno(stderr));
  Clock::time_point t0_;
  int64_t skipped_before_ = 0, diagnosed_ = 0;
  double window_ms_ = 0, loss_ema_ = NAN;
  int64_t window_n_ = 0;
};

}  // namespace

absl::StatusOr<TrainLoopEnd> RunTrainLoop(const TrainLoop& loop) { return Loop(loop).Run(); }

absl::StatusOr<EvalResult> EvaluateAll(Trainer& t, const Dataset& ds, int64_t bs, bool fixed) {
  EvalResult total;
  std::vector<int64_t> order = ds.Order(false, 0, 0);
  for (int64_t b = 0; b < ds.size(); b += bs) {
    if (fixed && b + bs > ds.size()) break;
    MIXTRAIN_ASSIGN_OR_RETURN(TensorMap batch, ds.Gather(order, b, std::min(ds.size(), b + bs)));
    MIXTRAIN_ASSIGN_OR_RETURN(EvalResult r, t.Evaluate(batch));
    total += r;
  }
  return total;
}

// The figures EvalResult::Metrics() gives for the loss (accuracy over every labelled position).
std::string EvalLine(const EvalResult& e) {
  std::string line;
  for (const auto& [name, v] : e.Metrics()) {
    if (name == "loss") absl::StrAppendFormat(&line, "test loss %.4f", v);
    if (name == "top1") absl::StrAppendFormat(&line, "  test accuracy %.2f%%", 100 * v);
    if (name == "top5") absl::StrAppendFormat(&line, "  top-5 %.2f%%", 100 * v);
    if (name == "perplexity") absl::StrAppendFormat(&line, "  perplexity %.4g", v);
    if (name == "mae") absl::StrAppendFormat(&line, "  MAE %.4g", v);
    if (name == "rmse") absl::StrAppendFormat(&line, "  RMSE %.4g", v);
  }
  absl::StrAppendFormat(&line, " (%d examples", e.examples);
  if (e.positions != e.examples && e.task != EvalResult::Task::kOther)
    absl::StrAppendFormat(&line, ", %d %s", e.positions,
                          e.task == EvalResult::Task::kRegression ? "values" : "positions");
  return line + ")";
}

}  // namespace mixtrain::cli
