// `mixtrain train [MODEL.onnx] [flags]`: trains a model with mixed precision. With no arguments,
// models/fashion_cnn.onnx on Fashion-MNIST in bf16 AMP on the CPU, reporting test accuracy.
// Built only on the public API (include/mixtrain/), like any embedding service.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"
#include "tools/step_profile.h"

namespace mixtrain {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status ReadText(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return absl::OkStatus();
}

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

// Applies the command-line flags over `c` (defaults < --config < flags).
absl::Status ApplyFlags(const cli::Args& a, TrainConfig& c) {
  if (a.has("config")) {
    std::string text;
    MIXTRAIN_RETURN_IF_ERROR(ReadText(a.str("config"), &text));
    absl::StatusOr<TrainConfig> parsed = TrainConfig::FromTextProto(text);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--config: '", a.str("config"),
                                                     "' is not a valid TrainConfig textproto"));
    c = *std::move(parsed);
  }
  if (!a.positional().empty()) c.model = a.positional()[0];
  if (a.positional().size() > 1)
    return absl::InvalidArgumentError("expects at most one MODEL.onnx (see --help)");
  if (a.has("loss")) c.loss = a.str("loss");
  if (a.has("output")) c.output = a.str("output");
  if (a.has("class-axis")) {
    MIXTRAIN_ASSIGN_OR_RETURN(int64_t axis, a.integer("class-axis"));
    c.class_axis = static_cast<int32_t>(axis);
  }
  if (a.has("labels")) c.data.labels_key = a.str("labels");
  if (a.has("freeze")) c.freeze = a.str("freeze");
  if (a.has("trainable")) c.trainable = a.str("trainable");
  if (a.has("device")) c.device = a.str("device");
  if (a.has("data")) c.data.path = a.str("data");
  if (a.has("dataset")) c.data.dataset = a.str("dataset");
  auto num = [&](const char* name, auto set) -> absl::Status {
    if (!a.has(name)) return absl::OkStatus();
    MIXTRAIN_ASSIGN_OR_RETURN(double v, a.number(name));
    set(v);
    return absl::OkStatus();
  };
  TrainConfig::Optimizer* opt = &c.optimizer;
  if (a.has("optimizer")) {
    std::string k = a.str("optimizer");
    TrainConfig::Optimizer::Kind kind;
    if (!ParseEnum(k, {"ADAM", "ADAMW", "SGD", "ADAGRAD"}, &kind))
      return absl::InvalidArgumentError(absl::StrCat("--optimizer: unknown '", k, "' (adam, adamw, sgd, adagrad)"));
    opt->kind = kind;
  }
  MIXTRAIN_RETURN_IF_ERROR(num("lr", [&](double v) { opt->lr = static_cast<float>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("weight-decay", [&](double v) { opt->weight_decay = static_cast<float>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("momentum", [&](double v) { opt->momentum = static_cast<float>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("beta1", [&](double v) { opt->beta1 = static_cast<float>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("beta2", [&](double v) { opt->beta2 = static_cast<float>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("clip-grad-norm", [&](double v) { opt->clip_grad_norm = static_cast<float>(v); }));
  if (a.has("nesterov")) opt->nesterov = a.flag("nesterov");
  TrainConfig::Schedule* sch = &c.schedule;
  if (a.has("schedule")) {
    TrainConfig::Schedule::Kind kind;
    if (!ParseEnum(a.str("schedule"), {"CONSTANT", "STEP", "COSINE"}, &kind))
      return absl::InvalidArgumentError(absl::StrCat("--schedule: unknown '", a.str("schedule"), "' (constant, step, cosine)"));
    sch->kind = kind;
  }
  MIXTRAIN_RETURN_IF_ERROR(num("warmup-steps", [&](double v) { sch->warmup_steps = static_cast<int>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("step-size", [&](double v) { sch->step_size = static_cast<int>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("gamma", [&](double v) { sch->gamma = static_cast<float>(v); }));
  TrainConfig::Precision* prec = &c.precision;
  if (a.has("policy")) {
    std::string text;
    MIXTRAIN_RETURN_IF_ERROR(ReadText(a.str("policy"), &text));
    // A PrecisionPolicy textproto is the body of TrainConfig's `precision` field.
    absl::StatusOr<TrainConfig> parsed = TrainConfig::FromTextProto("precision {\n" + text + "\n}");
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--policy: '", a.str("policy"), "' is not a valid PrecisionPolicy textproto"));
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
    std::string v = a.str("loss-scale");
    if (v == "dynamic") {
      ls->mode = TrainConfig::LossScaler::Mode::kDynamic;
    } else if (v == "off") {
      ls->mode = TrainConfig::LossScaler::Mode::kOff;
    } else {
      MIXTRAIN_ASSIGN_OR_RETURN(double s, a.number("loss-scale"));
      if (!(s > 0)) return absl::InvalidArgumentError("--loss-scale must be > 0, 'dynamic' or 'off'");
      ls->mode = TrainConfig::LossScaler::Mode::kStatic;
      ls->init_scale = static_cast<float>(s);
    }
  }
  MIXTRAIN_RETURN_IF_ERROR(num("growth-interval", [&](double v) { ls->growth_interval = static_cast<int>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("epochs", [&](double v) { c.epochs = static_cast<int>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("steps", [&](double v) { c.steps = static_cast<int64_t>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("batch-size", [&](double v) { c.data.batch_size = static_cast<int>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("seed", [&](double v) { c.data.seed = static_cast<uint64_t>(v); }));
  MIXTRAIN_RETURN_IF_ERROR(num("accumulate", [&](double v) { c.accumulate = static_cast<int>(v); }));
  if (a.has("shuffle")) c.data.shuffle = a.flag("shuffle");
  if (c.data.batch_size < 1) return absl::InvalidArgumentError("--batch-size must be >= 1");
  if (c.epochs < 1 && c.steps < 1) return absl::InvalidArgumentError("--epochs or --steps must be >= 1");
  return absl::OkStatus();
}

struct Data {
  Dataset train, test;
  bool has_test = false;
};

// Reshapes image arrays to the rank the model input wants (N x 784 for an MLP).
absl::StatusOr<HostTensor> FitToInput(const HostTensor& x, int64_t rank) {
  const std::vector<int64_t>& dims = x.shape();
  if (rank == 2 && dims.size() == 4) return x.Reshaped({dims[0], x.num_elements() / dims[0]});
  return x;
}

absl::StatusOr<Data> LoadData(const TrainConfig& c, const Trainer& t, int64_t limit_train,
                              int64_t limit_test) {
  Data d;
  // The model's first input comes first (the labels follow).
  const TensorInfo in = t.BatchInputs().at(0);
  const std::string input = in.name;
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  const std::string labels = c.data.labels_key;
  if (!c.data.path.empty()) {
    MIXTRAIN_ASSIGN_OR_RETURN(auto arrays, ReadNpz(c.data.path));
    TensorMap train, test;
    for (auto& [k, v] : arrays) {
      if (k.rfind("test/", 0) == 0) test.emplace(k.substr(5), v);
      else train.emplace(k, v);
    }
    MIXTRAIN_ASSIGN_OR_RETURN(d.train, Dataset::Create(train, c.data.path));
    if (!test.empty()) {
      MIXTRAIN_ASSIGN_OR_RETURN(d.test, Dataset::Create(test, c.data.path + " (test/)"));
      d.has_test = true;
    }
  } else if (c.data.dataset == "fashion-mnist") {
    MIXTRAIN_ASSIGN_OR_RETURN(FashionMnist fm, LoadFashionMnist());
    TensorMap tr, te;
    MIXTRAIN_ASSIGN_OR_RETURN(HostTensor train_images, FitToInput(fm.train_images, rank));
    MIXTRAIN_ASSIGN_OR_RETURN(HostTensor test_images, FitToInput(fm.test_images, rank));
    tr.emplace(input, std::move(train_images));
    tr.emplace(labels, fm.train_labels);
    te.emplace(input, std::move(test_images));
    te.emplace(labels, fm.test_labels);
    MIXTRAIN_ASSIGN_OR_RETURN(d.train, Dataset::Create(tr, "fashion-mnist train"));
    MIXTRAIN_ASSIGN_OR_RETURN(d.test, Dataset::Create(te, "fashion-mnist test"));
    d.has_test = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dataset: unknown '", c.data.dataset,
                                                   "' (fashion-mnist, or use --data=FILE.npz)"));
  }
  if (limit_train > 0) d.train = d.train.Head(limit_train);
  if (limit_test > 0 && d.has_test) d.test = d.test.Head(limit_test);
  return d;
}

absl::StatusOr<EvalResult> EvaluateAll(Trainer& t, const Dataset& ds, int64_t bs) {
  EvalResult total;
  std::vector<int64_t> order = ds.Order(false, 0, 0);
  for (int64_t b = 0; b < ds.size(); b += bs) {
    MIXTRAIN_ASSIGN_OR_RETURN(TensorMap batch, ds.Gather(order, b, std::min(ds.size(), b + bs)));
    MIXTRAIN_ASSIGN_OR_RETURN(EvalResult r, t.Evaluate(batch));
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.examples += r.examples;
  }
  return total;
}

// --log-json's file: written to "<path>.tmp" and renamed over <path> only when the run succeeds,
// so a failed run leaves nothing behind.
class JsonLog {
 public:
  absl::Status Open(const std::string& path) {
    if (path.empty()) return absl::OkStatus();
    path_ = path;
    tmp_ = path + ".tmp";
    f_ = std::fopen(tmp_.c_str(), "w");
    if (!f_) return absl::InvalidArgumentError(absl::StrCat("--log-json: cannot write '", path, "'"));
    return absl::OkStatus();
  }
  std::FILE* file() const { return f_; }
  absl::Status Commit() {
    if (!f_) return absl::OkStatus();
    bool ok = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      std::remove(tmp_.c_str());
      return absl::InternalError(absl::StrCat("--log-json: cannot write '", path_, "'"));
    }
    return absl::OkStatus();
  }
  ~JsonLog() {
    if (!f_) return;
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }

 private:
  std::FILE* f_ = nullptr;
  std::string path_, tmp_;
};

absl::Status RunTrain(const cli::Args& a) {
  TrainConfig c;
  MIXTRAIN_RETURN_IF_ERROR(ApplyFlags(a, c));
  MIXTRAIN_ASSIGN_OR_RETURN(int64_t log_every, a.integer("log-every"));
  MIXTRAIN_ASSIGN_OR_RETURN(int64_t limit_train, a.integer("limit-train"));
  MIXTRAIN_ASSIGN_OR_RETURN(int64_t limit_test, a.integer("limit-test"));
  if (log_every < 1) return absl::InvalidArgumentError("--log-every must be >= 1");
  ElementType export_dtype = ElementType::kFloat32;
  if (a.has("export-dtype")) {
    MIXTRAIN_ASSIGN_OR_RETURN(export_dtype, ParseElementType(a.str("export-dtype")));
    if (export_dtype != ElementType::kFloat32 && export_dtype != ElementType::kFloat16 &&
        export_dtype != ElementType::kBFloat16)
      return absl::InvalidArgumentError("--export-dtype must be fp32, fp16 or bf16");
  }
  JsonLog json_log;
  MIXTRAIN_RETURN_IF_ERROR(json_log.Open(a.str("log-json")));
  std::FILE* json = json_log.file();

  // Setup (model, data, checkpoint) prints nothing until it has all succeeded, so an error is
  // the only line a failed run prints.
  MIXTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(c.model, c));
  Trainer& t = *trainer;
  MIXTRAIN_ASSIGN_OR_RETURN(Data d, LoadData(c, t, limit_train, limit_test));
  int64_t bs = c.data.batch_size;
  int64_t per_epoch = d.train.NumBatches(bs, /*drop_last=*/d.train.size() >= bs);
  int64_t total = c.steps > 0 ? c.steps : per_epoch * c.epochs;
  t.SetTotalSteps(total);
  int64_t epoch = 0, batch = 0;
  if (a.has("resume")) {
    MIXTRAIN_ASSIGN_OR_RETURN(TrainingPosition pos, t.LoadCheckpoint(a.str("resume")));
    epoch = pos.epoch;
    batch = pos.batch;
  }
  const ResolvedPrecision p = t.precision();
  if (!p.note.empty()) std::fprintf(stderr, "mixtrain train: %s\n", p.note.c_str());
  std::fprintf(stderr, "mixtrain train: %s: precision %s (%s), loss scaling %s, %zu parameter tensors\n",
               c.model.c_str(), p.preset.c_str(), ElementTypeName(p.low_type), p.loss_scaling.c_str(),
               t.ParameterNames().size());
  if (a.has("resume"))
    std::fprintf(stderr, "mixtrain train: resumed from %s at step %lld (epoch %lld, batch %lld)\n",
                 a.str("resume").c_str(), static_cast<long long>(t.steps_taken()),
                 static_cast<long long>(epoch), static_cast<long long>(batch));
  std::fprintf(stderr, "mixtrain train: %lld train examples, batch %lld, %lld steps\n",
               static_cast<long long>(d.train.size()), static_cast<long long>(bs),
               static_cast<long long>(total));
  const bool tty = isatty(fileno(stderr));
  // --profile: every step after the first (which builds the plans and primitives) is timed.
  const bool profile = a.flag("profile");
  const int64_t first_step = t.steps_taken();
  int64_t skipped = 0;
  double window_ms = 0, loss_ema = NAN;
  int64_t window_n = 0;
  auto t0 = Clock::now();
  while (t.steps_taken() < total) {
    std::vector<int64_t> order = d.train.Order(c.data.shuffle, c.data.seed, epoch);
    for (; batch < per_epoch && t.steps_taken() < total; ++batch) {
      int64_t begin = batch * bs, end = std::min(d.train.size(), begin + bs);
      MIXTRAIN_ASSIGN_OR_RETURN(TensorMap feeds, d.train.Gather(order, begin, end));
      int64_t step = t.steps_taken() + 1;
      bool log = step % log_every == 0 || step == total || tty;
      auto s0 = Clock::now();
      MIXTRAIN_ASSIGN_OR_RETURN(StepResult r, t.Step(feeds, {.read_loss = log || json != nullptr}));
      if (profile && t.steps_taken() == first_step + 1) t.SetProfiling(true);
      const float loss = r.loss.value_or(NAN);
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
      window_ms += ms;
      ++window_n;
      skipped += r.skipped;
      if (!std::isnan(loss)) loss_ema = std::isnan(loss_ema) ? loss : 0.9 * loss_ema + 0.1 * loss;
      if (json)
        std::fprintf(json, "{\"step\": %lld, \"loss\": %.8g, \"loss_scale\": %.8g, \"skipped\": %s, \"lr\": %.8g, \"ms\": %.4f}\n",
                     static_cast<long long>(step), loss, r.loss_scale, r.skipped ? "true" : "false", r.learning_rate, ms);
      if (log) {
        double ex_s = window_n * static_cast<double>(end - begin) / (window_ms / 1000.0);
        std::string line = absl::StrFormat(
            "step %lld/%lld  epoch %lld  loss %.4f  %.0f ex/s  %.2f ms/step  scale %g  skipped %lld",
            static_cast<long long>(step), static_cast<long long>(total), static_cast<long long>(epoch + 1),
            loss_ema, ex_s, window_ms / window_n, r.loss_scale, static_cast<long long>(skipped));
        if (tty) {
          int width = 30, filled = static_cast<int>(width * step / total);
          std::fprintf(stderr, "\r[%s%s] %s", std::string(filled, '#').c_str(),
                       std::string(width - filled, '.').c_str(), line.c_str());
        } else {
          std::fprintf(stderr, "%s\n", line.c_str());
        }
        if (!tty || step % log_every == 0) window_ms = 0, window_n = 0;
      }
    }
    if (batch >= per_epoch) {
      if (tty) std::fprintf(stderr, "\n");
      if (d.has_test) {
        MIXTRAIN_ASSIGN_OR_RETURN(EvalResult e, EvaluateAll(t, d.test, std::max<int64_t>(bs, 256)));
        std::printf("epoch %lld: test loss %.4f  test accuracy %.2f%% (%lld examples)\n",
                    static_cast<long long>(epoch + 1), e.loss_sum / e.examples,
                    100.0 * e.correct / e.examples, static_cast<long long>(e.examples));
        std::fflush(stdout);
      }
      ++epoch;
      batch = 0;
      if (a.has("save")) MIXTRAIN_RETURN_IF_ERROR(t.SaveCheckpoint(a.str("save"), {epoch, batch}));
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (tty) std::fprintf(stderr, "\n");
  if (batch != 0 && d.has_test) {  // stopped mid-epoch (--steps): evaluate anyway
    MIXTRAIN_ASSIGN_OR_RETURN(EvalResult e, EvaluateAll(t, d.test, std::max<int64_t>(bs, 256)));
    std::printf("final: test loss %.4f  test accuracy %.2f%% (%lld examples)\n", e.loss_sum / e.examples,
                100.0 * e.correct / e.examples, static_cast<long long>(e.examples));
  }
  std::printf("trained %lld steps in %.1f s (%lld skipped)\n", static_cast<long long>(t.steps_taken()), secs,
              static_cast<long long>(skipped));
  if (profile) cli::PrintStepProfile(t.Profile(), t.steps_taken() - first_step - 1);
  if (a.has("save")) MIXTRAIN_RETURN_IF_ERROR(t.SaveCheckpoint(a.str("save"), {epoch, batch}));
  if (a.has("export")) {
    MIXTRAIN_RETURN_IF_ERROR(t.ExportInferenceModel(a.str("export"), export_dtype));
    std::printf("exported %s (%s)\n", a.str("export").c_str(), ElementTypeName(export_dtype));
  }
  return json_log.Commit();
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
                {"batch-size", "64", "examples per step"},
                {"shuffle", "true", "shuffle each epoch (--no-shuffle to keep the order)", true},
                {"seed", "0", "seed for shuffling and dropout"},
                {"freeze", "", "regex of initializers to keep frozen"},
                {"trainable", "", "regex of initializers to train (default: the framework's parameters that reach the loss; see mixtrain check)"},
                {"limit-train", "0", "use only the first N training examples"},
                {"limit-test", "0", "use only the first N test examples"},
                {"log-every", "100", "print a progress line every N steps when not on a terminal"},
                {"log-json", "", "write one JSON object per step (step, loss, loss_scale, skipped, lr, ms)"},
                {"profile", "false", "time every kernel of the step after the first and print where the step's time goes (forward, loss, backward, optimizer; by op type and node)", true},
                {"save", "", "checkpoint file written at each epoch end and at the end"},
                {"resume", "", "checkpoint to resume from"},
                {"export", "", "write the trained inference model (ONNX) here"},
                {"export-dtype", "fp32", "fp32, fp16 or bf16 weights/compute in the exported model"},
                {"device", "auto", "cpu or auto"},
            },
        .run = [](const cli::Args& args) {
          absl::Status s = RunTrain(args);
          return s.ok() ? 0 : cli::Fail("train", s);
        }});

}  // namespace
}  // namespace mixtrain
