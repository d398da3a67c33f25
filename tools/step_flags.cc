#include "tools/step_flags.h"

#include <initializer_list>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "mixtrain/status_macros.h"

namespace mixtrain::cli {
namespace {

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

// Flags whose value is a plain TrainConfig number are set through their NumericFlags() row.
bool IsStepFlag(const std::string& name) {
  for (const FlagSpec& s : StepFlagSpecs())
    if (s.name == name) return true;
  return false;
}

}  // namespace

std::vector<FlagSpec> StepFlagSpecs() {
  return {
      {"config", "", "TrainConfig .textproto; flags override it"},
      {"loss", "cross_entropy", "cross_entropy, mse, l1, bce_with_logits or output:NAME"},
      {"output", "", "model output the loss reads (default: the first)"},
      {"class-axis", "1", "cross_entropy: the logits axis of the classes (-1 for N x T x V language-model logits)"},
      {"ignore-index", "", "cross_entropy: labels equal to this count in neither the loss nor the evaluation (transformers pads with -100)"},
      {"labels", "labels", "the batch entry (npz key) holding the labels"},
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
      {"freeze", "", "regex of initializers to keep frozen"},
      {"trainable", "", "regex of initializers to train (default: the framework's parameters that reach the loss; see mixtrain check)"},
      {"lora-rank", "0", "LoRA: train rank-R adapters on the targeted 2-D weights instead of the model's weights (0 = off); --export folds them in"},
      {"lora-alpha", "", "LoRA: the adapters' output is scaled by alpha/rank (default: 2 * rank)"},
      {"lora-targets", "", "LoRA: regex of the weights (initializer or MatMul/Gemm node names) to adapt (default: the products of the model's repeated blocks; see mixtrain check --lora-rank)"},
      {"lora-dropout", "0", "LoRA: dropout on the adapters' input"},
      {"lora-init", "", "LoRA: an adapter file (--export-adapter) to start from"},
      {"recompute", "none", "activation recompute: none, auto (the forward's parts that save the most memory per FLOP are computed again in the backward) or all; same gradients"},
      {"device", "auto", "cpu, cuda, or auto (cuda where a GPU is usable and has every kernel the step needs, else the CPU)"},
      {"seed", "0", "seed for shuffling and dropout"},
      {"data-parallel", "false", "data-parallel training over the ranks of `mpirun -n K`: each rank steps on its 1/K of every global batch (--batch-size is global) and the gradients are averaged in the step; rank 0 prints, evaluates, saves and exports (docs/distributed.md)", true},
      {"deterministic", "false", "with --data-parallel: reduce the gradients in a fixed order (0 + rank 0 + rank 1 + ...), so a run is reproducible bit for bit and equals one process with --accumulate=K and --batch-size=B/K", true},
  };
}

// Settings that cannot all hold: each names where it came from (the flag, or the --config field).
absl::Status CheckContradictions(const Args& a, const TrainConfig& c) {
  using P = TrainConfig::Precision;
  using L = TrainConfig::LossScaler;
  if (c.precision.preset != P::Preset::kFp32) return absl::OkStatus();
  const std::string fp32 = a.has("precision") ? "--precision=fp32" : "precision.preset=FP32 (--config)";
  if (c.precision.low_dtype != P::LowType::kAuto) {
    const std::string low = a.has("dtype") ? absl::StrCat("--dtype=", a.str("dtype")) : "precision.low_dtype (--config)";
    return absl::InvalidArgumentError(absl::StrCat(low, " contradicts ", fp32, ": with fp32 no op runs in a low type; "
                                                   "drop one of them"));
  }
  if (c.loss_scaler.mode == L::Mode::kStatic || c.loss_scaler.mode == L::Mode::kDynamic) {
    const std::string scale = a.has("loss-scale") ? absl::StrCat("--loss-scale=", a.str("loss-scale"))
                                                  : "loss_scaler.mode (--config)";
    return absl::InvalidArgumentError(absl::StrCat(scale, " contradicts ", fp32, ": loss scaling keeps low-precision "
                                                   "gradients from underflowing, and fp32 has none; drop one of them"));
  }
  return absl::OkStatus();
}

absl::Status ApplyStepFlags(const Args& a, TrainConfig& c) {
  if (a.has("config")) {
    MIXTRAIN_ASSIGN_OR_RETURN(std::string text, ReadInputFile("--config", a.str("config")));
    absl::StatusOr<TrainConfig> parsed = TrainConfig::FromTextProto(text);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--config=", a.str("config"), ": ", parsed.status().message()));
    c = *std::move(parsed);
  }
  if (a.has("loss")) c.loss = a.str("loss");
  if (a.has("output")) c.output = a.str("output");
  if (a.has("labels")) c.data.labels_key = a.str("labels");
  if (a.has("freeze")) c.freeze = a.str("freeze");
  if (a.has("trainable")) c.trainable = a.str("trainable");
  // LoRA (docs/lora.md); --lora-rank/--lora-alpha/--lora-dropout are numeric flags (below).
  if (a.has("lora-targets")) c.lora_targets = a.str("lora-targets");
  if (a.has("lora-init")) c.lora_init = a.str("lora-init");
  if (a.has("recompute")) {
    const std::string r = a.str("recompute");
    if (r != "none" && r != "auto" && r != "all")
      return absl::InvalidArgumentError(absl::StrCat("--recompute: unknown '", r, "' (none, auto or all)"));
    c.recompute = r;
  }
  for (const NumericFlag& f : NumericFlags()) {
    if (f.config_field.empty() || !f.words.empty() || !a.has(f.name) || !IsStepFlag(f.name)) continue;
    MIXTRAIN_RETURN_IF_ERROR(c.SetNumber(f.config_field, a.number(f.name)));
  }
  if (a.has("device")) c.device = a.str("device");
  if (a.has("seed")) c.data.seed = static_cast<uint64_t>(a.integer("seed"));
  TrainConfig::Optimizer* opt = &c.optimizer;
  if (a.has("optimizer")) {
    std::string k = a.str("optimizer");
    TrainConfig::Optimizer::Kind kind;
    if (!ParseEnum(k, {"ADAM", "ADAMW", "SGD", "ADAGRAD"}, &kind))
      return absl::InvalidArgumentError(absl::StrCat("--optimizer: unknown '", k, "' (adam, adamw, sgd, adagrad)"));
    opt->kind = kind;
  }
  if (a.has("nesterov")) opt->nesterov = a.flag("nesterov");
  if (a.has("schedule")) {
    TrainConfig::Schedule::Kind kind;
    if (!ParseEnum(a.str("schedule"), {"CONSTANT", "STEP", "COSINE"}, &kind))
      return absl::InvalidArgumentError(absl::StrCat("--schedule: unknown '", a.str("schedule"), "' (constant, step, cosine)"));
    c.schedule.kind = kind;
  }
  TrainConfig::Precision* prec = &c.precision;
  if (a.has("policy")) {
    MIXTRAIN_ASSIGN_OR_RETURN(std::string text, ReadInputFile("--policy", a.str("policy")));
    // A PrecisionPolicy textproto is the body of TrainConfig's `precision` field.
    absl::StatusOr<TrainConfig> parsed = TrainConfig::FromTextProto("precision {\n" + text + "\n}");
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--policy=", a.str("policy"), ": not a valid PrecisionPolicy: ",
                                                     parsed.status().message()));
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
  if (a.has("data-parallel")) c.data_parallel = a.flag("data-parallel");
  if (a.has("deterministic")) c.deterministic = a.flag("deterministic");
  if (c.deterministic && !c.data_parallel)
    return absl::InvalidArgumentError("--deterministic needs --data-parallel (one process is deterministic already)");
  return CheckContradictions(a, c);
}

}  // namespace mixtrain::cli
