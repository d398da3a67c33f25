// `mixtrain train [MODEL.onnx] [flags]`: trains a model with mixed precision. With no arguments,
// models/fashion_cnn.onnx on Fashion-MNIST in bf16 AMP on the CPU, reporting test accuracy. The
// loop itself (evaluation, checkpoints, signals, logs) is tools/train_loop.cc.
// Built only on the public API (include/mixtrain/), like any embedding service.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"
#include "tools/precision_report.h"
#include "tools/memory_report.h"
#include "tools/step_flags.h"
#include "tools/step_profile.h"
#include "tools/train_loop.h"
#include "tools/train_outputs.h"

namespace mixtrain {
namespace {

// The default job's model, found from any directory: beside the binary's build folder or the
// installed package's share/mixtrain/models (CMakeLists.txt puts it in both); the relative path
// when neither has it (a checkout's working directory).
std::string DefaultModel(const std::string& relative) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return relative;
  const std::filesystem::path dir = std::filesystem::path(std::string(exe, n)).parent_path();
  const std::string name = std::filesystem::path(relative).filename().string();
  for (const std::filesystem::path& p : {dir / "share/mixtrain/models" / name, dir / "../share/mixtrain/models" / name}) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return std::filesystem::weakly_canonical(p, ec).string();
  }
  return relative;
}

// The config the trainer keeps (and saves in checkpoints) with every path absolute, so that
// `train --resume=CKPT` reads and writes the same files from any working directory.
TrainConfig WithAbsolutePaths(TrainConfig c) {
  for (std::string* path : {&c.model, &c.data.path, &c.run.save, &c.run.save_best, &c.run.log_dir, &c.run.export_path}) {
    std::error_code ec;
    if (path->empty()) continue;
    const std::filesystem::path abs = std::filesystem::absolute(*path, ec);
    if (!ec) *path = abs.lexically_normal().string();
  }
  return c;
}

// The config of this run: defaults (or, with --resume, the checkpoint's run) < --config < flags.
absl::Status ApplyFlags(const cli::Args& a, TrainConfig& c) {
  if (a.has("resume")) {
    MIXTRAIN_RETURN_IF_ERROR(cli::CheckInputPath("--resume", a.str("resume")));
    MIXTRAIN_ASSIGN_OR_RETURN(CheckpointInfo info, ReadCheckpointInfo(a.str("resume")));
    c = info.config;
  }
  MIXTRAIN_RETURN_IF_ERROR(cli::ApplyStepFlags(a, c));
  if (!a.positional().empty()) c.model = a.positional()[0];
  if (a.positional().size() > 1)
    return absl::InvalidArgumentError("expects at most one MODEL.onnx (see --help)");
  if (c.model == TrainConfig().model) c.model = DefaultModel(c.model);
  if (a.has("data")) c.data.path = a.str("data");
  if (a.has("dataset")) c.data.dataset = a.str("dataset");
  if (a.has("shuffle")) c.data.shuffle = a.flag("shuffle");
  for (const cli::NumericFlag& f : cli::NumericFlags()) {  // the run's numbers: epochs, steps, save-every...
    if (f.config_field.empty() || !f.words.empty() || !a.has(f.name)) continue;
    MIXTRAIN_RETURN_IF_ERROR(c.SetNumber(f.config_field, a.number(f.name)));
  }
  TrainConfig::Run& run = c.run;
  for (auto [flag, field] : {std::pair<const char*, std::string*>{"save", &run.save}, {"save-best", &run.save_best},
                             {"log-dir", &run.log_dir}, {"export", &run.export_path}})
    if (a.has(flag)) *field = a.str(flag);
  if (a.has("export-dtype")) {
    const std::string d = a.str("export-dtype");
    if (d != "fp32" && d != "fp16" && d != "bf16")
      return absl::InvalidArgumentError(absl::StrCat("--export-dtype: '", d, "' (fp32, fp16 or bf16)"));
    run.export_dtype = d;
  }
  if (a.has("debug-precision-out") && c.debug_precision == 0) c.debug_precision = 1;
  if (c.epochs < 1 && c.steps < 1) return absl::InvalidArgumentError("--epochs or --steps must be >= 1");
  if (run.keep > 1 && run.save.empty()) return absl::InvalidArgumentError("--keep needs --save=CKPT (the checkpoints it keeps)");
  if (run.save_every > 0 && run.save.empty())
    return absl::InvalidArgumentError("--save-every needs --save=CKPT (where the checkpoints go)");
  return c.Validate();  // the names and lists too, before any file is touched
}

// Every file the run reads or writes, checked before any work: a typo in --save fails now, not
// after an epoch, and no output names an input. Returns the output files by flag.
absl::StatusOr<std::map<std::string, std::string>> CheckPaths(const cli::Args& a, const TrainConfig& c) {
  std::vector<cli::FileArg> inputs = {{"MODEL.onnx", c.model}};
  if (!c.data.path.empty()) inputs.push_back({"--data", c.data.path});
  // A folder of .npy files: each array is an input no output may replace.
  std::error_code ec;
  if (!c.data.path.empty() && std::filesystem::is_directory(c.data.path, ec)) {
    inputs.pop_back();
    for (const std::filesystem::path& dir : {std::filesystem::path(c.data.path), std::filesystem::path(c.data.path) / "test"})
      for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".npy") inputs.push_back({"--data", e.path().string()});
  }
  for (const char* flag : {"resume", "config", "policy"})
    if (a.has(flag)) inputs.push_back({absl::StrCat("--", flag), a.str(flag)});
  if (!c.lora_init.empty()) inputs.push_back({"--lora-init", c.lora_init});
  if (a.has("export-adapter") && c.lora_rank == 0)
    return absl::InvalidArgumentError("--export-adapter needs --lora-rank=R (no adapters to write)");
  std::vector<cli::FileArg> files;
  std::map<std::string, std::string> outputs;  // flag -> path
  const std::pair<const char*, std::string> named[] = {
      {"save", c.run.save}, {"save-best", c.run.save_best}, {"export", c.run.export_path},
      {"log-json", a.str("log-json")}, {"debug-precision-out", a.str("debug-precision-out")},
      {"export-adapter", a.str("export-adapter")}, {"show-step", a.str("show-step")}};
  for (const auto& [flag, path] : named) {
    if (path.empty()) continue;
    files.push_back({absl::StrCat("--", flag), path});
    outputs[flag] = path;
  }
  // --save may continue the --resume checkpoint: read in full first, replaced atomically.
  MIXTRAIN_RETURN_IF_ERROR(cli::CheckFiles(inputs, files, {{"--save", "--resume"}}));
  return outputs;
}

struct Data {
  Dataset train, test;
  bool has_test = false;
  std::vector<std::string> notes;  // printed once setup has succeeded
};

// Reshapes image arrays to the rank the model input wants (N x 784 for an MLP).
absl::StatusOr<HostTensor> FitToInput(const HostTensor& x, int64_t rank) {
  const std::vector<int64_t>& dims = x.shape();
  if (rank == 2 && dims.size() == 4) return x.Reshaped({dims[0], x.num_elements() / dims[0]});
  return x;
}

// The number of classes a cross_entropy model predicts: the class axis of the output the loss
// reads, as shape inference plans the step; 0 (labels unchecked before the step) when that dim
// depends on the batch.
int64_t NumClasses(const TrainConfig& c, const Trainer& t) {
  const TensorInfo out = t.LossOutput();
  const int64_t rank = static_cast<int64_t>(out.shape.size());
  const int64_t axis = c.class_axis < 0 ? c.class_axis + rank : c.class_axis;
  if (axis < 0 || axis >= rank) return 0;  // Trainer::Create accepted the axis for this output
  return std::max<int64_t>(out.shape[axis], 0);
}

// Loads the data and checks all of it against the model before the first step: arrays, element
// types, shapes, NaN/Inf (unless allowed), labels within the classes.
absl::StatusOr<Data> LoadData(const TrainConfig& c, const Trainer& t, int64_t limit_train,
                              int64_t limit_test, bool allow_nonfinite) {
  Data d;
  // The model's first input comes first (the labels follow).
  const std::vector<TensorInfo> inputs = t.BatchInputs();
  const std::string input = inputs.at(0).name;
  const int64_t rank = static_cast<int64_t>(inputs.at(0).shape.size());
  const std::string labels = c.data.labels_key;
  // A model that flattens its examples' logits (N x T tokens to N*T rows) reads k label rows
  // per example: a batch of examples takes k rows of labels each.
  const int64_t k = t.LabelRowsPerExample();
  std::map<std::string, int64_t> rows;
  if (k != 1) {
    rows[labels] = k;
    const TensorInfo out = t.LossOutput();
    d.notes.push_back(absl::StrCat("output '", out.name, "' holds ", k, " rows per example of input '", input,
                                   "': each example takes ", k, " consecutive rows of '", labels, "'"));
  }
  DataCheckOptions check{.inputs = inputs, .labels_key = labels, .label_rows_per_example = k,
                         .allow_nonfinite_inputs = allow_nonfinite};
  if (c.loss == "cross_entropy") check.num_classes = NumClasses(c, t);
  check.ignore_index = c.ignore_index;
  if (!c.data.path.empty()) {  // an .npz, or a folder of .npy files read through memory maps
    MIXTRAIN_ASSIGN_OR_RETURN(TrainingData files, OpenTrainingData(c.data.path, check));
    d.train = std::move(files.train);
    d.has_test = files.test.has_value();
    if (d.has_test) d.test = *std::move(files.test);
    d.notes.insert(d.notes.end(), files.notes.begin(), files.notes.end());
  } else if (c.data.dataset == "fashion-mnist") {
    MIXTRAIN_ASSIGN_OR_RETURN(FashionMnist fm, LoadFashionMnist());
    MIXTRAIN_ASSIGN_OR_RETURN(HostTensor train_images, FitToInput(fm.train_images, rank));
    MIXTRAIN_ASSIGN_OR_RETURN(HostTensor test_images, FitToInput(fm.test_images, rank));
    const TensorMap train = {{input, std::move(train_images)}, {labels, fm.train_labels}};
    const TensorMap test = {{input, std::move(test_images)}, {labels, fm.test_labels}};
    MIXTRAIN_RETURN_IF_ERROR(CheckTrainingData(train, "fashion-mnist", check));
    MIXTRAIN_ASSIGN_OR_RETURN(d.train, Dataset::Create(train, "fashion-mnist", rows));
    MIXTRAIN_RETURN_IF_ERROR(CheckTrainingData(test, "fashion-mnist (test/ arrays)", check));
    MIXTRAIN_ASSIGN_OR_RETURN(d.test, Dataset::Create(test, "fashion-mnist (test/ arrays)", rows));
    d.has_test = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dataset: unknown '", c.data.dataset,
                                                   "' (fashion-mnist, or use --data=FILE.npz or a folder of .npy files)"));
  }
  if (limit_train > 0) d.train = d.train.Head(limit_train);
  if (limit_test > 0 && d.has_test) d.test = d.test.Head(limit_test);
  return d;
}

// Examples per step: --batch-size (or the config's), else the batch a model exported with a fixed
// one takes, else 64 or every example when there are fewer. A model with a fixed batch takes only
// that (per rank).
absl::StatusOr<int64_t> BatchSize(const cli::Args& a, const TrainConfig& c, const Trainer& t, int64_t examples,
                                  int ranks) {
  const TensorInfo input = t.BatchInputs().at(0);
  const int64_t fixed = input.shape.empty() ? -1 : input.shape[0];
  const bool given = a.has("batch-size") || c.data.batch_size != TrainConfig().data.batch_size;
  int64_t bs = c.data.batch_size;
  if (!given && !c.data_parallel) bs = fixed > 0 ? fixed : std::min<int64_t>(bs, examples);
  if (fixed > 0 && bs / ranks != fixed)
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch-size=", bs, ": the model was exported with a fixed batch of ", fixed, " (input '", input.name,
        "' is [", absl::StrJoin(input.shape, ", "), "])",
        ranks > 1 ? absl::StrCat(", so --batch-size must be ", fixed * ranks, " over ", ranks, " ranks") : ""));
  if (bs > examples)
    return absl::InvalidArgumentError(absl::StrCat("--batch-size=", bs, ": must be <= the ", examples,
                                                   " training examples"));
  return bs;
}

// A checkpoint's position against this run's data and length. Each epoch and each batch of a
// run took a step, so neither counts past the step; the batch lies within this data's epoch; and
// steps remain to be trained (a finished run resumed would train nothing and re-save the same).
absl::Status CheckResumePosition(const std::string& path, const TrainingPosition& pos, int64_t step,
                                 int64_t per_epoch, int64_t total) {
  auto refuse = [&](auto&&... why) {
    return absl::InvalidArgumentError(absl::StrCat("--resume=", path, ": ", why...));
  };
  if (pos.epoch > step || pos.batch > step)
    return refuse("its position (epoch ", pos.epoch, ", batch ", pos.batch, ") is past its step ", step,
                  ": every epoch and batch takes a step");
  if (pos.batch >= per_epoch)
    return refuse("it stopped at batch ", pos.batch, " of its epoch; an epoch of this data has ", per_epoch,
                  " batches");
  if (step >= total)
    return refuse("it has trained ", step, " steps already and this run trains ", total,
                  " in all: nothing is left to train (raise --steps or --epochs)");
  return absl::OkStatus();
}

// With --accumulate=K the weights update on every Kth step: a run from step `from` to `total`
// that reaches none would train nothing (refused); micro-batches after the last update are
// dropped, which the returned note says.
absl::StatusOr<std::string> CheckUpdates(int64_t accumulate, int64_t from, int64_t total) {
  if (accumulate <= 1) return std::string();
  const int64_t updates = total / accumulate - from / accumulate;
  if (updates == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--accumulate=", accumulate, ": the weights update every ", accumulate, " steps, and steps ", from + 1, " to ",
        total, " reach no update, so nothing would be trained (raise --steps or lower --accumulate)"));
  if (const int64_t dropped = total % accumulate; dropped != 0)
    return absl::StrCat("--accumulate=", accumulate, ": the last ", dropped, " of ", total,
                        " steps reach no update; their gradients are dropped");
  return std::string();
}

// Data parallel: the ranks' communicator once created. A rank that fails ends the whole job
// through it (the others would wait for it in their next all-reduce).
std::shared_ptr<Communicator>& DataParallelWorld() {
  static std::shared_ptr<Communicator> world;
  return world;
}

// "trained 156 steps (390 in all) in 12.3 s (0 skipped)": this call's steps, and the run's when
// it resumed.
std::string TrainedLine(int64_t ran, int64_t steps, double secs, int64_t skipped) {
  return absl::StrFormat("trained %lld steps%s in %.1f s (%lld skipped)", static_cast<long long>(ran),
                         ran != steps ? absl::StrFormat(" (%lld in all)", static_cast<long long>(steps)) : "", secs,
                         static_cast<long long>(skipped));
}

absl::Status RunTrain(const cli::Args& a) {
  TrainConfig c;
  MIXTRAIN_RETURN_IF_ERROR(ApplyFlags(a, c));
  if (a.flag("print-config")) {  // what the flags made of the config, as a --config file
    std::fputs(c.ToTextProto().c_str(), stdout);
    return absl::OkStatus();
  }
  const TrainConfig::Run& run = c.run;
  MIXTRAIN_ASSIGN_OR_RETURN(const ElementType export_dtype, ParseElementType(run.export_dtype));
  MIXTRAIN_ASSIGN_OR_RETURN(auto outputs, CheckPaths(a, c));
  // Data parallel: only rank 0 prints, evaluates and writes files (the checkpoint included, by
  // the trainer); every rank steps, reads the data and checks the flags.
  int rank = 0, ranks = 1;
  std::FILE* info = stderr;  // progress and notes; errors always go to stderr
  if (c.data_parallel) {
    MIXTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> world, Communicator::MpiWorld());
    DataParallelWorld() = world;
    rank = world->rank();
    ranks = world->size();
    if (c.data.batch_size % ranks != 0)
      return absl::InvalidArgumentError(absl::StrCat("--batch-size=", c.data.batch_size, ": with --data-parallel ",
                                                     "it is the global batch and must be a multiple of the ", ranks,
                                                     " ranks"));
    if (rank != 0) {
      if (!std::freopen("/dev/null", "w", stdout) || !(info = std::fopen("/dev/null", "w")))
        return absl::InternalError("cannot open /dev/null");
      outputs.erase("log-json");
      outputs.erase("debug-precision-out");
      outputs.erase("show-step");
    }
  }

  // Setup (model, data, checkpoint) prints nothing until it has all succeeded, so an error is
  // the only line a failed run prints.
  MIXTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(c.model, WithAbsolutePaths(c)));
  Trainer& t = *trainer;
  MIXTRAIN_ASSIGN_OR_RETURN(Data d, LoadData(c, t, run.limit_train, run.limit_test, a.flag("allow-nonfinite-inputs")));
  if (!d.has_test)
    for (auto [flag, set] : {std::pair<const char*, bool>{"--eval-every", run.eval_every > 0},
                             {"--early-stop", run.early_stop > 0}, {"--save-best", !run.save_best.empty()}})
      if (set)
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs a test set: 'test/' arrays in --data (",
                                                       c.data.path, " has none)"));
  MIXTRAIN_ASSIGN_OR_RETURN(const int64_t bs, BatchSize(a, c, t, d.train.size(), ranks));
  const int64_t per_epoch = d.train.NumBatches(bs, /*drop_last=*/true);
  const std::vector<int64_t> input_dims = t.BatchInputs().at(0).shape;
  const bool fixed_batch = !input_dims.empty() && input_dims[0] > 0;
  constexpr int64_t kMaxSteps = 1000000000000;  // steps' own bound (TrainConfig::NumberRuleOf("steps"))
  if (c.steps == 0 && c.epochs > kMaxSteps / per_epoch)
    return absl::InvalidArgumentError(absl::StrCat("--epochs=", c.epochs, ": ", c.epochs, " epochs of ", per_epoch,
                                                   " batches are more than ", kMaxSteps, " steps"));
  const int64_t total = c.steps > 0 ? c.steps : per_epoch * c.epochs;
  t.SetTotalSteps(total);
  TrainingPosition start;
  if (a.has("resume")) {
    MIXTRAIN_ASSIGN_OR_RETURN(start, t.LoadCheckpoint(a.str("resume")));
    MIXTRAIN_RETURN_IF_ERROR(CheckResumePosition(a.str("resume"), start, t.steps_taken(), per_epoch, total));
  }
  MIXTRAIN_ASSIGN_OR_RETURN(const std::string accumulate_note, CheckUpdates(c.accumulate, t.steps_taken(), total));
  MIXTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<cli::RunLog> log,
                            cli::RunLog::Open(outputs.contains("log-json") ? outputs.at("log-json") : "",
                                              rank == 0 ? run.log_dir : ""));
  const ResolvedPrecision p = t.precision();
  const ResolvedDevice where = t.device();
  if (!accumulate_note.empty()) std::fprintf(info, "mixtrain train: %s\n", accumulate_note.c_str());
  // Why the CPU was chosen matters to who asked for a device (or wants every detail).
  if (!where.note.empty() && (a.has("device") || a.flag("verbose")))
    std::fprintf(info, "mixtrain train: %s\n", where.note.c_str());
  for (const std::string& note : d.notes) std::fprintf(info, "mixtrain train: %s\n", note.c_str());
  if (!p.note.empty()) std::fprintf(info, "mixtrain train: %s\n", p.note.c_str());
  std::fprintf(info, "mixtrain train: %s on %s: precision %s (%s), loss scaling %s, %zu parameter tensors\n",
               c.model.c_str(), where.name.c_str(), p.preset.c_str(), ElementTypeName(p.low_type),
               p.loss_scaling.c_str(), t.ParameterNames().size());
  // What this run executes, as `dump --passes=train` with the same flags prints it.
  if (outputs.contains("show-step")) {
    MIXTRAIN_ASSIGN_OR_RETURN(const std::string step, t.TransformedGraph(GraphFormat::kText));
    MIXTRAIN_RETURN_IF_ERROR(cli::AtomicOutputFile::Write("--show-step", outputs.at("show-step"), step));
  }
  if (a.has("resume"))
    std::fprintf(info, "mixtrain train: resumed from %s at step %lld (epoch %lld, batch %lld)\n",
                 a.str("resume").c_str(), static_cast<long long>(t.steps_taken()),
                 static_cast<long long>(start.epoch), static_cast<long long>(start.batch));
  std::fprintf(info, "mixtrain train: %lld train examples, batch %lld, %lld steps\n",
               static_cast<long long>(d.train.size()), static_cast<long long>(bs),
               static_cast<long long>(total));
  if (log->tensorboard()) std::fprintf(info, "mixtrain train: TensorBoard events to %s\n", log->event_file().c_str());
  if (c.data_parallel)
    std::fprintf(info, "mixtrain train: data parallel over %d ranks (%s): %lld examples per rank per step, %s\n",
                 ranks, DataParallelWorld()->Describe().c_str(), static_cast<long long>(bs / ranks),
                 c.deterministic ? "fixed-order (deterministic) reduction" : "MPI_Allreduce");

  cli::InstallStopHandlers();
  const int64_t first_step = t.steps_taken();
  cli::TrainLoop loop{.trainer = &t,
                      .train = &d.train,
                      .test = d.has_test ? &d.test : nullptr,
                      .batch_size = bs,
                      .eval_batch_size = fixed_batch ? input_dims[0] : std::max<int64_t>(bs, 256),
                      .fixed_batch = fixed_batch,
                      .per_epoch = per_epoch,
                      .total = total,
                      .rank = rank,
                      .ranks = ranks,
                      .world = DataParallelWorld(),
                      .start = start,
                      .run = run,
                      .shuffle = c.data.shuffle,
                      .seed = c.data.seed,
                      .profile = a.flag("profile"),
                      .info = info,
                      .log = log.get()};
  MIXTRAIN_ASSIGN_OR_RETURN(cli::TrainLoopEnd end, cli::RunTrainLoop(loop));
  const int64_t ran = t.steps_taken() - first_step;
  if (end.stop_signal != 0) {
    // Stopped by SIGTERM/SIGINT: the log so far is kept; the checkpoint says where to go on.
    std::printf("%s\n", TrainedLine(ran, t.steps_taken(), end.seconds, end.skipped).c_str());
    MIXTRAIN_RETURN_IF_ERROR(log->Commit());
    const char* sig = end.stop_signal == SIGTERM ? "SIGTERM" : end.stop_signal == SIGINT ? "SIGINT" : "signal";
    return absl::AbortedError(absl::StrCat(
        sig, ": stopped after step ", t.steps_taken(), " of ", total, "; checkpoint saved to ",
        end.saved_to, " (continue with: mixtrain train --resume=", end.saved_to, ")"));
  }
  const bool just_evaluated = end.early_stopped || (run.eval_every > 0 && t.steps_taken() % run.eval_every == 0);
  if (end.position.batch != 0 && d.has_test && rank == 0 && !just_evaluated) {  // stopped mid-epoch (--steps)
    MIXTRAIN_ASSIGN_OR_RETURN(EvalResult e, cli::EvaluateAll(t, d.test, loop.eval_batch_size, fixed_batch));
    std::printf("final: %s\n", cli::EvalLine(e).c_str());
    MIXTRAIN_RETURN_IF_ERROR(log->Eval(t.steps_taken(), end.position.epoch + 1, e));
  }
  std::printf("%s\n", TrainedLine(ran, t.steps_taken(), end.seconds, end.skipped).c_str());
  if (a.flag("profile")) {
    cli::PrintStepProfile(t.Profile(), ran - 1);
    // Where the memory went (issue 35), after the time.
    if (const std::optional<MemoryStatistics> m = t.StepMemoryStatistics()) cli::PrintMemoryReport(*m);
  }
  // The precision report is written even when every step skipped: that is when it is needed.
  if (c.debug_precision > 0) {
    MIXTRAIN_ASSIGN_OR_RETURN(PrecisionStatistics ps, t.PrecisionStats());
    cli::PrintPrecisionSummary(ps, stdout);
    if (outputs.contains("debug-precision-out")) {
      const std::string text = cli::PrecisionStatsToJson(
          ps, c.model, p.low_type == ElementType::kFloat16 ? "fp16" : p.low_type == ElementType::kBFloat16 ? "bf16" : "fp32");
      MIXTRAIN_RETURN_IF_ERROR(cli::AtomicOutputFile::Write("--debug-precision-out", outputs.at("debug-precision-out"), text));
      std::printf("precision statistics written to %s\n", outputs.at("debug-precision-out").c_str());
    }
  }
  if (ran > 0 && end.skipped == ran)
    return absl::InvalidArgumentError(absl::StrCat(
        "all ", ran, " steps skipped their update (non-finite gradients): nothing was trained; check the data "
        "(--allow-nonfinite-inputs), --lr and --loss-scale"));
  if (!run.save.empty() && (end.saved_to != run.save || end.saved_step != t.steps_taken()))
    MIXTRAIN_RETURN_IF_ERROR(cli::CheckpointKeeper(run.save, run.keep).Save(t, end.position));
  if (!run.export_path.empty() && rank == 0) {
    MIXTRAIN_RETURN_IF_ERROR(t.ExportInferenceModel(run.export_path, export_dtype));
    std::printf("exported %s (%s)\n", run.export_path.c_str(), ElementTypeName(export_dtype));
  }
  if (a.has("export-adapter") && rank == 0) {
    MIXTRAIN_RETURN_IF_ERROR(t.ExportAdapters(a.str("export-adapter")));
    std::printf("adapters written to %s\n", a.str("export-adapter").c_str());
  }
  return log->Commit();
}

// The step-shaping flags (shared with dump), then the run's own.
std::vector<cli::FlagSpec> TrainFlags() {
  std::vector<cli::FlagSpec> flags = cli::StepFlagSpecs();
  const std::vector<cli::FlagSpec> own = {
      {"data", "", ".npz with arrays named after graph inputs + labels ('test/<key>' arrays are the test set), or a folder of <key>.npy files (a test/ subfolder for the test set) read through memory maps; f64 inputs and i32/u8 labels are converted as read"},
      {"dataset", "fashion-mnist", "built-in dataset when --data is not given"},
      {"epochs", "1", "epochs over the training data"},
      {"steps", "0", "train this many steps instead of --epochs"},
      {"batch-size", "64", "examples per step (default: the batch a model exported with a fixed one takes, else 64, or every example when there are fewer)"},
      {"shuffle", "true", "shuffle each epoch (--no-shuffle to keep the order)", true},
      {"allow-nonfinite-inputs", "false", "train on input arrays holding NaN/Inf (refused by default): a step on such a batch gets non-finite gradients and skips its update, counted as skipped; labels must stay finite", true},
      {"limit-train", "0", "use only the first N training examples"},
      {"limit-test", "0", "use only the first N test examples"},
      {"save", "", "checkpoint file, replaced atomically at each epoch end, every --save-every steps, on SIGTERM/SIGINT and at the end"},
      {"save-every", "0", "also checkpoint every N steps (needs --save)"},
      {"keep", "1", "with K > 1, the last K checkpoints stay as <name>-step<N><ext> beside --save (which names the newest)"},
      {"resume", "", "continue the run a checkpoint came from: model, data and config come from it (flags may change the run's length, device, paths and the run options; anything else must match)"},
      {"eval-every", "0", "also evaluate on the test set every N steps (besides each epoch's end)"},
      {"early-stop", "0", "stop when the test loss has not improved for N evaluations (0: never)"},
      {"save-best", "", "checkpoint file of the lowest test loss, written when an evaluation improves it"},
      {"log-every", "100", "print a progress line every N steps when not on a terminal"},
      {"log-json", "", "write one JSON object per step (step, loss, loss_scale, skipped, lr, ms) and per evaluation (step, epoch, eval_loss, eval_top1, ..., eval_examples); NaN and infinities as null; the file appears when the run ends (or stops on a signal)"},
      {"log-dir", "", "write TensorBoard event files here (train/loss, train/learning_rate, train/loss_scale, train/skipped_steps, train/step_ms, train/examples_per_s, eval/*)"},
      {"debug-precision", "0", "precision debugger: measure every low-precision value (range, inf/NaN, overflow, flush to zero) every N steps (bare flag: every step), name the node behind each skipped step, and print a summary; the other steps do no extra work", false, "1"},
      {"show-step", "", "write the training step this run executes here, as text (what dump --passes=train prints with the same flags), before the first step"},
      {"debug-precision-out", "", "write the precision debugger's statistics here as JSON (for mixtrain dump --stats and mixtrain suggest-policy); implies --debug-precision"},
      {"profile", "false", "time every kernel of the step after the first and print where the step's time goes (forward, loss, backward, optimizer; by op type and node)", true},
      {"export", "", "write the trained inference model (ONNX) here"},
      {"export-dtype", "fp32", "fp32, fp16 or bf16 weights/compute in the exported model"},
      {"export-adapter", "", "LoRA: write the trained adapters alone (ONNX initializers <W>.lora_A, <W>.lora_B) here"},
      {"verbose", "false", "print every note (why auto chose the CPU, say)", true},
      {"print-config", "false", "print the TrainConfig this run would use (defaults < --resume < --config < flags) as a .textproto for --config, and exit without training", true},
  };
  flags.insert(flags.end(), own.begin(), own.end());
  return flags;
}

MT_REGISTER_COMMAND(
    train,
    cli::Command{
        .name = "train",
        .usage = "mixtrain train [MODEL.onnx] [--data=FILE.npz|DIR | --dataset=fashion-mnist] [flags]",
        .summary = "train a model with mixed precision (default: fashion_cnn on Fashion-MNIST, bf16 AMP where the CPU has native bf16)",
        .flags = TrainFlags(),
        .run = [](const cli::Args& args) {
          absl::Status s = RunTrain(args);
          if (s.ok()) return 0;
          int code = cli::Fail("train", s);
          if (cli::StopSignal() != 0) code = 128 + cli::StopSignal();  // the shell's code for a signal's end
          if (const auto& world = DataParallelWorld(); world != nullptr && world->size() > 1) {
            std::fflush(nullptr);
            world->Abort(code);
          }
          return code;
        }});

}  // namespace
}  // namespace mixtrain
