// `mixtrain train [MODEL.onnx] [flags]`: trains a model with mixed precision. With no arguments,
// models/fashion_cnn.onnx on Fashion-MNIST in bf16 AMP on the CPU, reporting test accuracy.
// Built only on the public API (include/mixtrain/), like any embedding service.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"
#include "tools/precision_report.h"
#include "tools/step_profile.h"

namespace mixtrain {
namespace {

using Clock = std::chrono::steady_clock;

// The enum value named `name` (case-insensitive) in `names`, listed in the enum's order.
template <typename Enum>
bool ParseEnum(const std::string& name, std::initializer_list<const char*> names, Enum* out) {
  int i = 0;
  for (const char* n : names) {
    if (absl::AsciiStrToUpper(name) == n) {
      *out = static_cast<Enum>(i);
      return true;
    }
    ++i;
  }
  return false;
}

// Applies the command-line flags over `c` (defaults < --config < flags). Numbers were checked
// by Args::Parse against their NumericFlags() rows; a --config's fields by FromTextProto.
absl::Status ApplyFlags(const cli::Args& a, TrainConfig& c) {
  if (a.has("config")) {
    MIXTRAIN_ASSIGN_OR_RETURN(std::string text, cli::ReadInputFile("--config", a.str("config")));
    absl::StatusOr<TrainConfig> parsed = TrainConfig::FromTextProto(text);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--config=", a.str("config"), ": ", parsed.status().message()));
    c = *std::move(parsed);
  }
  if (!a.positional().empty()) c.model = a.positional()[0];
  if (a.positional().size() > 1)
    return absl::InvalidArgumentError("expects at most one MODEL.onnx (see --help)");
  if (a.has("loss")) c.loss = a.str("loss");
  if (a.has("output")) c.output = a.str("output");
  if (a.has("labels")) c.data.labels_key = a.str("labels");
  if (a.has("freeze")) c.freeze = a.str("freeze");
  if (a.has("trainable")) c.trainable = a.str("trainable");
  if (a.has("device")) c.device = a.str("device");
  if (a.has("data")) c.data.path = a.str("data");
  if (a.has("dataset")) c.data.dataset = a.str("dataset");
  // LoRA (docs/lora.md); --lora-rank/--lora-alpha/--lora-dropout are numeric flags (below).
  if (a.has("lora-targets")) c.lora_targets = a.str("lora-targets");
  if (a.has("lora-init")) c.lora_init = a.str("lora-init");
  for (const cli::NumericFlag& f : cli::NumericFlags()) {
    if (f.config_field.empty() || !f.words.empty() || !a.has(f.name)) continue;
    MIXTRAIN_RETURN_IF_ERROR(c.SetNumber(f.config_field, a.number(f.name)));
  }
  if (a.has("seed")) c.data.seed = static_cast<uint64_t>(a.integer("seed"));
  if (a.has("shuffle")) c.data.shuffle = a.flag("shuffle");
  TrainConfig::Optimizer* opt = &c.optimizer;
  if (a.has("optimizer")) {
    std::string k = a.str("optimizer");
    TrainConfig::Optimizer::Kind kind;
    if (!ParseEnum(k, {"ADAM", "ADAMW", "SGD", "ADAGRAD"}, &kind))
      return absl::InvalidArgumentError(absl::StrCat("--optimizer: unknown '", k, "' (adam, adamw, sgd, adagrad)"));
    opt->kind = kind;
  }
  if (a.has("nesterov")) opt->nesterov = a.flag("nesterov");
  TrainConfig::Schedule* sch = &c.schedule;
  if (a.has("schedule")) {
    TrainConfig::Schedule::Kind kind;
    if (!ParseEnum(a.str("schedule"), {"CONSTANT", "STEP", "COSINE"}, &kind))
      return absl::InvalidArgumentError(absl::StrCat("--schedule: unknown '", a.str("schedule"), "' (constant, step, cosine)"));
    sch->kind = kind;
  }
  TrainConfig::Precision* prec = &c.precision;
  if (a.has("policy")) {
    MIXTRAIN_ASSIGN_OR_RETURN(std::string text, cli::ReadInputFile("--policy", a.str("policy")));
    // A PrecisionPolicy textproto is the body of TrainConfig's `precision` field.
    absl::StatusOr<TrainConfig> parsed = TrainConfig::FromTextProto("precision {\n" + text + "\n}");
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--policy=", a.str("policy"), ": not a valid PrecisionPolicy textproto"));
    *prec = parsed->precision;
  }
  if (a.has("precision")) {
    TrainConfig::Precision::Preset p;
    if (!ParseEnum(a.str("precision"), {"AMP", "FP32", "HALF"}, &p))
      return absl::InvalidArgumentError(absl::StrCat("--precision: unknown '", a.str("precision"), "' (fp32, amp, half)"));
    prec->preset = p;
  }
  if (a.has("dtype")) {
    std::string d = a.str("dtype");
    if (d == "fp16") prec->low_dtype = TrainConfig::Precision::LowType::kFp16;
    else if (d == "bf16") prec->low_dtype = TrainConfig::Precision::LowType::kBf16;
    else if (d == "auto") prec->low_dtype = TrainConfig::Precision::LowType::kAuto;
    else return absl::InvalidArgumentError(absl::StrCat("--dtype: '", d, "' (fp16, bf16 or auto)"));
  }
  for (const std::string& op : a.list("allow")) prec->allow.push_back(op);
  for (const std::string& op : a.list("deny")) prec->deny.push_back(op);
  if (a.has("fp32-nodes")) prec->fp32_nodes.push_back(a.str("fp32-nodes"));
  TrainConfig::LossScaler* ls = &c.loss_scaler;
  if (a.has("loss-scale")) {
    const std::string v = a.str("loss-scale");
    if (v == "dynamic") {
      ls->mode = TrainConfig::LossScaler::Mode::kDynamic;
    } else if (v == "off") {
      ls->mode = TrainConfig::LossScaler::Mode::kOff;
    } else {
      ls->mode = TrainConfig::LossScaler::Mode::kStatic;
      MIXTRAIN_RETURN_IF_ERROR(c.SetNumber("loss_scaler.init_scale", a.number("loss-scale")));
    }
  }
  if (a.has("debug-precision")) MIXTRAIN_RETURN_IF_ERROR(c.SetNumber("debug_precision", a.number("debug-precision")));
  if (a.has("data-parallel")) c.data_parallel = a.flag("data-parallel");
  if (a.has("deterministic")) c.deterministic = a.flag("deterministic");
  if (c.deterministic && !c.data_parallel)
    return absl::InvalidArgumentError("--deterministic needs --data-parallel (one process is deterministic already)");
  if (a.has("debug-precision-out") && c.debug_precision == 0) c.debug_precision = 1;
  if (c.epochs < 1 && c.steps < 1) return absl::InvalidArgumentError("--epochs or --steps must be >= 1");
  return absl::OkStatus();
}

// Every file the run reads or writes, checked before any work: a typo in --save fails now, not
// after an epoch. Returns the output files by flag.
absl::StatusOr<std::map<std::string, std::string>> CheckPaths(const cli::Args& a, const TrainConfig& c) {
  MIXTRAIN_RETURN_IF_ERROR(cli::CheckInputPath("MODEL.onnx", c.model));
  if (!c.data.path.empty()) MIXTRAIN_RETURN_IF_ERROR(cli::CheckInputPath("--data", c.data.path));
  if (a.has("resume")) MIXTRAIN_RETURN_IF_ERROR(cli::CheckInputPath("--resume", a.str("resume")));
  std::map<std::string, std::string> outputs;  // flag -> path
  if (!c.lora_init.empty()) MIXTRAIN_RETURN_IF_ERROR(cli::CheckInputPath("--lora-init", c.lora_init));
  if (a.has("export-adapter") && c.lora_rank == 0)
    return absl::InvalidArgumentError("--export-adapter needs --lora-rank=R (no adapters to write)");
  for (const char* flag : {"save", "export", "log-json", "debug-precision-out", "export-adapter"}) {
    if (!a.has(flag)) continue;
    const std::string path = a.str(flag);
    MIXTRAIN_RETURN_IF_ERROR(cli::CheckOutputPath(absl::StrCat("--", flag), path));
    for (const auto& [other, other_path] : outputs)
      if (other_path == path)
        return absl::InvalidArgumentError(absl::StrCat("--", other, " and --", flag, " name the same file '", path, "'"));
    outputs[flag] = path;
  }
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

// Keeps the arrays a step reads (`wanted`) when all of them are there; a file may hold others (a
// reference loss, gradients), which are named in one note. With one missing, every array stays,
// so the data check's error lists them all.
TensorMap KeepWanted(TensorMap arrays, const std::vector<TensorInfo>& wanted, const std::string& source,
                     std::vector<std::string>& notes) {
  for (const TensorInfo& w : wanted)
    if (!arrays.contains(w.name)) return arrays;
  TensorMap kept;
  std::vector<std::string> ignored;
  for (auto& [name, t] : arrays) {
    const bool read = std::any_of(wanted.begin(), wanted.end(), [&](const TensorInfo& w) { return w.name == name; });
    if (read) kept.emplace(name, std::move(t));
    else ignored.push_back(name);
  }
  if (!ignored.empty()) {
    constexpr size_t kShown = 4;
    std::string shown = absl::StrJoin(ignored.begin(), ignored.begin() + std::min(ignored.size(), kShown), ", ");
    if (ignored.size() > kShown) absl::StrAppend(&shown, ", ...");
    notes.push_back(absl::StrCat(source, ": ", ignored.size(), " array", ignored.size() == 1 ? "" : "s",
                                 " the model does not read ignored (", shown, ")"));
  }
  return kept;
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
  TensorMap train, test;
  std::string source;
  if (!c.data.path.empty()) {
    MIXTRAIN_ASSIGN_OR_RETURN(auto arrays, ReadNpz(c.data.path));
    for (auto& [k, v] : arrays) {
      if (k.rfind("test/", 0) == 0) test.emplace(k.substr(5), v);
      else train.emplace(k, v);
    }
    source = c.data.path;
    train = KeepWanted(std::move(train), inputs, source, d.notes);
    if (!test.empty()) test = KeepWanted(std::move(test), inputs, source + " (test/ arrays)", d.notes);
  } else if (c.data.dataset == "fashion-mnist") {
    MIXTRAIN_ASSIGN_OR_RETURN(FashionMnist fm, LoadFashionMnist());
    MIXTRAIN_ASSIGN_OR_RETURN(HostTensor train_images, FitToInput(fm.train_images, rank));
    MIXTRAIN_ASSIGN_OR_RETURN(HostTensor test_images, FitToInput(fm.test_images, rank));
    train.emplace(input, std::move(train_images));
    train.emplace(labels, fm.train_labels);
    test.emplace(input, std::move(test_images));
    test.emplace(labels, fm.test_labels);
    source = "fashion-mnist";
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dataset: unknown '", c.data.dataset,
                                                   "' (fashion-mnist, or use --data=FILE.npz)"));
  }
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
  MIXTRAIN_RETURN_IF_ERROR(CheckTrainingData(train, source, check));
  MIXTRAIN_ASSIGN_OR_RETURN(d.train, Dataset::Create(train, source, rows));
  if (!test.empty()) {
    const std::string test_source = source + " (test/ arrays)";
    MIXTRAIN_RETURN_IF_ERROR(CheckTrainingData(test, test_source, check));
    MIXTRAIN_ASSIGN_OR_RETURN(d.test, Dataset::Create(test, test_source, rows));
    d.has_test = true;
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

// The test loss and accuracy over `ds` in batches of `bs`; a model with a fixed batch (`fixed`)
// takes batches of that size only, so a last partial batch is left out.
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

// "test loss 0.4123  test accuracy 85.20%  top-5 99.10%  perplexity 1.51 (10000 examples)": the
// figures EvalResult::Metrics() gives for the loss (accuracy over every labelled position).
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

// Data parallel: the ranks' communicator once created. A rank that fails ends the whole job
// through it (the others would wait for it in their next all-reduce).
std::shared_ptr<Communicator>& DataParallelWorld() {
  static std::shared_ptr<Communicator> world;
  return world;
}

absl::Status RunTrain(const cli::Args& a) {
  TrainConfig c;
  MIXTRAIN_RETURN_IF_ERROR(ApplyFlags(a, c));
  const int64_t log_every = a.integer("log-every");
  const int64_t limit_train = a.integer("limit-train");
  const int64_t limit_test = a.integer("limit-test");
  ElementType export_dtype = ElementType::kFloat32;
  if (a.has("export-dtype")) {
    MIXTRAIN_ASSIGN_OR_RETURN(export_dtype, ParseElementType(a.str("export-dtype")));
    if (export_dtype != ElementType::kFloat32 && export_dtype != ElementType::kFloat16 &&
        export_dtype != ElementType::kBFloat16)
      return absl::InvalidArgumentError("--export-dtype must be fp32, fp16 or bf16");
  }
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
    }
  }
  // --log-json goes to an unpredictable temp file renamed over the target when the run succeeds,
  // so a failed run leaves nothing behind (and a link planted at a guessable name is never used).
  std::unique_ptr<cli::AtomicOutputFile> json_log;
  if (outputs.contains("log-json")) {
    MIXTRAIN_ASSIGN_OR_RETURN(json_log, cli::AtomicOutputFile::Open("--log-json", outputs.at("log-json")));
  }
  std::FILE* json = json_log ? json_log->file() : nullptr;

  // Setup (model, data, checkpoint) prints nothing until it has all succeeded, so an error is
  // the only line a failed run prints.
  MIXTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(c.model, c));
  Trainer& t = *trainer;
  MIXTRAIN_ASSIGN_OR_RETURN(Data d, LoadData(c, t, limit_train, limit_test, a.flag("allow-nonfinite-inputs")));
  MIXTRAIN_ASSIGN_OR_RETURN(const int64_t bs, BatchSize(a, c, t, d.train.size(), ranks));
  const int64_t per_epoch = d.train.NumBatches(bs, /*drop_last=*/true);
  const std::vector<int64_t> input_dims = t.BatchInputs().at(0).shape;
  const bool fixed_batch = !input_dims.empty() && input_dims[0] > 0;
  const int64_t eval_bs = fixed_batch ? input_dims[0] : std::max<int64_t>(bs, 256);
  constexpr int64_t kMaxSteps = 1000000000000;  // steps' own bound (TrainConfig::NumberRuleOf("steps"))
  if (c.steps == 0 && c.epochs > kMaxSteps / per_epoch)
    return absl::InvalidArgumentError(absl::StrCat("--epochs=", c.epochs, ": ", c.epochs, " epochs of ", per_epoch,
                                                   " batches are more than ", kMaxSteps, " steps"));
  const int64_t total = c.steps > 0 ? c.steps : per_epoch * c.epochs;
  t.SetTotalSteps(total);
  int64_t epoch = 0, batch = 0;
  if (a.has("resume")) {
    MIXTRAIN_ASSIGN_OR_RETURN(TrainingPosition pos, t.LoadCheckpoint(a.str("resume")));
    epoch = pos.epoch;
    batch = pos.batch;
  }
  const ResolvedPrecision p = t.precision();
  const ResolvedDevice where = t.device();
  if (!where.note.empty()) std::fprintf(info, "mixtrain train: %s\n", where.note.c_str());
  for (const std::string& note : d.notes) std::fprintf(info, "mixtrain train: %s\n", note.c_str());
  if (!p.note.empty()) std::fprintf(info, "mixtrain train: %s\n", p.note.c_str());
  std::fprintf(info, "mixtrain train: %s on %s: precision %s (%s), loss scaling %s, %zu parameter tensors\n",
               c.model.c_str(), where.name.c_str(), p.preset.c_str(), ElementTypeName(p.low_type),
               p.loss_scaling.c_str(), t.ParameterNames().size());
  if (a.has("resume"))
    std::fprintf(info, "mixtrain train: resumed from %s at step %lld (epoch %lld, batch %lld)\n",
                 a.str("resume").c_str(), static_cast<long long>(t.steps_taken()),
                 static_cast<long long>(epoch), static_cast<long long>(batch));
  std::fprintf(info, "mixtrain train: %lld train examples, batch %lld, %lld steps\n",
               static_cast<long long>(d.train.size()), static_cast<long long>(bs),
               static_cast<long long>(total));
  if (c.data_parallel)
    std::fprintf(info, "mixtrain train: data parallel over %d ranks (%s): %lld examples per rank per step, %s\n",
                 ranks, DataParallelWorld()->Describe().c_str(), static_cast<long long>(bs / ranks),
                 c.deterministic ? "fixed-order (deterministic) reduction" : "MPI_Allreduce");
  const bool tty = isatty(fileno(stderr));
  // --profile: every step after the first (which builds the plans and primitives) is timed.
  const bool profile = a.flag("profile");
  const int64_t first_step = t.steps_taken();
  // Skipped updates of this run: the device's counter (read on log steps, which read the loss anyway).
  int64_t skipped = 0, diagnosed = 0;
  MIXTRAIN_ASSIGN_OR_RETURN(const int64_t skipped_before, t.skipped_steps());
  constexpr int64_t kShownDiagnoses = 5;
  double window_ms = 0, loss_ema = NAN;
  int64_t window_n = 0;
  auto t0 = Clock::now();
  while (t.steps_taken() < total) {
    std::vector<int64_t> order = d.train.Order(c.data.shuffle, c.data.seed, epoch);
    for (; batch < per_epoch && t.steps_taken() < total; ++batch) {
      int64_t begin = batch * bs, end = std::min(d.train.size(), begin + bs);
      // This rank's shard of the global batch [begin, end) (every batch is whole: drop_last).
      const int64_t shard = (end - begin) / ranks;
      MIXTRAIN_ASSIGN_OR_RETURN(TensorMap feeds,
                                d.train.Gather(order, begin + rank * shard, begin + (rank + 1) * shard));
      int64_t step = t.steps_taken() + 1;
      bool log = step % log_every == 0 || step == total || tty;
      auto s0 = Clock::now();
      MIXTRAIN_ASSIGN_OR_RETURN(StepResult r, t.Step(feeds, {.read_loss = log || json != nullptr}));
      if (profile && t.steps_taken() == first_step + 1) t.SetProfiling(true);
      const float loss = r.loss.value_or(NAN);
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
      window_ms += ms;
      ++window_n;
      if (r.nonfinite && ++diagnosed <= kShownDiagnoses) {
        if (tty) std::fprintf(info, "\n");
        std::fprintf(info, "mixtrain train: %s\n", cli::DescribeNonFinite(*r.nonfinite).c_str());
        if (diagnosed == kShownDiagnoses)
          std::fprintf(info, "mixtrain train: (further skipped steps are diagnosed in the summary)\n");
      }
      if (!std::isnan(loss)) loss_ema = std::isnan(loss_ema) ? loss : 0.9 * loss_ema + 0.1 * loss;
      if (json)  // NaN and infinities as null: JSON has no literal for them
        std::fprintf(json, "{\"step\": %lld, \"loss\": %s, \"loss_scale\": %s, \"skipped\": %s, \"lr\": %s, \"ms\": %.4f}\n",
                     static_cast<long long>(step), cli::JsonNumber(loss).c_str(), cli::JsonNumber(r.loss_scale).c_str(),
                     r.skipped ? "true" : "false", cli::JsonNumber(r.learning_rate).c_str(), ms);
      if (log) {
        MIXTRAIN_ASSIGN_OR_RETURN(const int64_t skipped_now, t.skipped_steps());
        skipped = skipped_now - skipped_before;
        double ex_s = window_n * static_cast<double>(end - begin) / (window_ms / 1000.0);
        std::string line = absl::StrFormat(
            "step %lld/%lld  epoch %lld  loss %.4f  %.0f ex/s  %.2f ms/step  scale %g  skipped %lld",
            static_cast<long long>(step), static_cast<long long>(total), static_cast<long long>(epoch + 1),
            loss_ema, ex_s, window_ms / window_n, r.loss_scale, static_cast<long long>(skipped));
        if (tty) {
          int width = 30, filled = static_cast<int>(width * step / total);
          std::fprintf(info, "\r[%s%s] %s", std::string(filled, '#').c_str(),
                       std::string(width - filled, '.').c_str(), line.c_str());
        } else {
          std::fprintf(info, "%s\n", line.c_str());
        }
        if (!tty || step % log_every == 0) window_ms = 0, window_n = 0;
      }
    }
    if (batch >= per_epoch) {
      if (tty) std::fprintf(info, "\n");
      if (d.has_test && rank == 0) {
        MIXTRAIN_ASSIGN_OR_RETURN(EvalResult e, EvaluateAll(t, d.test, eval_bs, fixed_batch));
        std::printf("epoch %lld: %s\n", static_cast<long long>(epoch + 1), EvalLine(e).c_str());
        std::fflush(stdout);
      }
      ++epoch;
      batch = 0;
      if (a.has("save")) MIXTRAIN_RETURN_IF_ERROR(t.SaveCheckpoint(a.str("save"), {epoch, batch}));
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (tty) std::fprintf(info, "\n");
  if (batch != 0 && d.has_test && rank == 0) {  // stopped mid-epoch (--steps): evaluate anyway
    MIXTRAIN_ASSIGN_OR_RETURN(EvalResult e, EvaluateAll(t, d.test, eval_bs, fixed_batch));
    std::printf("final: %s\n", EvalLine(e).c_str());
  }
  MIXTRAIN_ASSIGN_OR_RETURN(const int64_t skipped_after, t.skipped_steps());
  skipped = skipped_after - skipped_before;
  std::printf("trained %lld steps in %.1f s (%lld skipped)\n", static_cast<long long>(t.steps_taken()), secs,
              static_cast<long long>(skipped));
  if (profile) cli::PrintStepProfile(t.Profile(), t.steps_taken() - first_step - 1);
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
  if (const int64_t ran = t.steps_taken() - first_step; ran > 0 && skipped == ran)
    return absl::InvalidArgumentError(absl::StrCat(
        "all ", ran, " steps skipped their update (non-finite gradients): nothing was trained; check the data "
        "(--allow-nonfinite-inputs), --lr and --loss-scale"));
  if (a.has("save")) MIXTRAIN_RETURN_IF_ERROR(t.SaveCheckpoint(a.str("save"), {epoch, batch}));
  if (a.has("export") && rank == 0) {
    MIXTRAIN_RETURN_IF_ERROR(t.ExportInferenceModel(a.str("export"), export_dtype));
    std::printf("exported %s (%s)\n", a.str("export").c_str(), ElementTypeName(export_dtype));
  }
  if (a.has("export-adapter") && rank == 0) {
    MIXTRAIN_RETURN_IF_ERROR(t.ExportAdapters(a.str("export-adapter")));
    std::printf("adapters written to %s\n", a.str("export-adapter").c_str());
  }
  return json_log ? json_log->Commit() : absl::OkStatus();
}

MT_REGISTER_COMMAND(
    train,
    cli::Command{
        .name = "train",
        .usage = "mixtrain train [MODEL.onnx] [--data=FILE.npz | --dataset=fashion-mnist] [flags]",
        .summary = "train a model with mixed precision (default: fashion_cnn on Fashion-MNIST, bf16 AMP where the CPU has native bf16)",
        .flags =
            {
                {"config", "", "TrainConfig .textproto; flags override it"},
                {"data", "", ".npz with arrays named after graph inputs + labels; 'test/<key>' arrays are the test set"},
                {"dataset", "fashion-mnist", "built-in dataset when --data is not given"},
                {"loss", "cross_entropy", "cross_entropy, mse, l1, bce_with_logits or output:NAME"},
                {"output", "", "model output the loss reads (default: the first)"},
                {"class-axis", "1", "cross_entropy: the logits axis of the classes (-1 for N x T x V language-model logits)"},
                {"labels", "labels", "npz key of the labels"},
                {"optimizer", "adam", "adam, adamw, sgd or adagrad"},
                {"lr", "0.001", "learning rate"},
                {"weight-decay", "0", "weight decay (decoupled for adamw; L2 otherwise)"},
                {"momentum", "0", "SGD momentum"},
                {"nesterov", "", "SGD Nesterov momentum", true},
                {"beta1", "0.9", "Adam beta1"},
                {"beta2", "0.999", "Adam beta2"},
                {"clip-grad-norm", "0", "clip the global gradient norm (unscaled) to this; 0 = off"},
                {"schedule", "constant", "LR schedule: constant, step or cosine"},
                {"warmup-steps", "0", "linear LR warmup steps"},
                {"step-size", "1000", "step schedule: decay every N updates"},
                {"gamma", "0.1", "step schedule: decay factor"},
                {"precision", "amp", "fp32 (off), amp (allow/deny lists) or half (all low but deny)"},
                {"dtype", "auto", "low type: fp16, bf16 or auto (bf16 where the CPU has native bf16, else fp32; see mixtrain info)"},
                {"policy", "", "PrecisionPolicy .textproto with list edits"},
                {"allow", "", "comma-separated ops moved to the allow (low) list"},
                {"deny", "", "comma-separated ops moved to the deny (fp32) list"},
                {"fp32-nodes", "", "regex of node names pinned to fp32"},
                {"loss-scale", "", "a static scale, 'dynamic' or 'off' (default: dynamic for fp16, off otherwise)"},
                {"growth-interval", "2000", "dynamic scaling: clean steps before the scale doubles"},
                {"accumulate", "1", "gradient accumulation over N micro-batches"},
                {"epochs", "1", "epochs over the training data"},
                {"steps", "0", "train this many steps instead of --epochs"},
                {"batch-size", "64", "examples per step (default: the batch a model exported with a fixed one takes, else 64, or every example when there are fewer)"},
                {"shuffle", "true", "shuffle each epoch (--no-shuffle to keep the order)", true},
                {"seed", "0", "seed for shuffling and dropout"},
                {"freeze", "", "regex of initializers to keep frozen"},
                {"trainable", "", "regex of initializers to train (default: the framework's parameters that reach the loss; see mixtrain check)"},
                {"allow-nonfinite-inputs", "false", "train on input arrays holding NaN/Inf (refused by default): a step on such a batch gets non-finite gradients and skips its update, counted as skipped; labels must stay finite", true},
                {"limit-train", "0", "use only the first N training examples"},
                {"limit-test", "0", "use only the first N test examples"},
                {"log-every", "100", "print a progress line every N steps when not on a terminal"},
                {"log-json", "", "write one JSON object per step (step, loss, loss_scale, skipped, lr, ms); a NaN or infinite number is written as null; the file appears when the run succeeds"},
                {"debug-precision", "0", "precision debugger: measure every low-precision value (range, inf/NaN, overflow, flush to zero) every N steps (bare flag: every step), name the node behind each skipped step, and print a summary; the other steps do no extra work", false, "1"},
                {"debug-precision-out", "", "write the precision debugger's statistics here as JSON (for mixtrain dump --stats and mixtrain suggest-policy); implies --debug-precision"},
                {"profile", "false", "time every kernel of the step after the first and print where the step's time goes (forward, loss, backward, optimizer; by op type and node)", true},
                {"save", "", "checkpoint file written at each epoch end and at the end"},
                {"resume", "", "checkpoint to resume from"},
                {"export", "", "write the trained inference model (ONNX) here"},
                {"export-dtype", "fp32", "fp32, fp16 or bf16 weights/compute in the exported model"},
                // LoRA (docs/lora.md)
                {"lora-rank", "0", "LoRA: train rank-R adapters on the targeted 2-D weights instead of the model's weights (0 = off); --export folds them in"},
                {"lora-alpha", "", "LoRA: the adapters' output is scaled by alpha/rank (default: 2 * rank)"},
                {"lora-targets", "", "LoRA: regex of the weights (initializer or MatMul/Gemm node names) to adapt (default: the products of the model's repeated blocks; see mixtrain check --lora-rank)"},
                {"lora-dropout", "0", "LoRA: dropout on the adapters' input"},
                {"lora-init", "", "LoRA: an adapter file (--export-adapter) to start from"},
                {"export-adapter", "", "LoRA: write the trained adapters alone (ONNX initializers <W>.lora_A, <W>.lora_B) here"},
                {"device", "auto", "cpu, cuda, or auto (cuda where a GPU is usable)"},
                {"data-parallel", "false", "data-parallel training over the ranks of `mpirun -n K`: each rank steps on its 1/K of every global batch (--batch-size is global) and the gradients are averaged in the step; rank 0 prints, evaluates, saves and exports (docs/distributed.md)", true},
                {"deterministic", "false", "with --data-parallel: reduce the gradients in a fixed order (0 + rank 0 + rank 1 + ...), so a run is reproducible bit for bit and equals one process with --accumulate=K and --batch-size=B/K", true},
            },
        .run = [](const cli::Args& args) {
          absl::Status s = RunTrain(args);
          if (s.ok()) return 0;
          const int code = cli::Fail("train", s);
          if (const auto& world = DataParallelWorld(); world != nullptr && world->size() > 1) {
            std::fflush(nullptr);
            world->Abort(code);
          }
          return code;
        }});

}  // namespace
}  // namespace mixtrain
