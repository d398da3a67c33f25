#include "tools/step_flags.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mixtrain/status_macros.h"

namespace mixtrain::cli {
namespace {

}  // namespace

std::vector<FlagSpec> StepFlagSpecs() {
  std::vector<FlagSpec> specs = {{"config", "", "TrainConfig .textproto; flags override it"}};
  // The flags that set a TrainConfig field as it is, from the proto's field options.
#define MT_STEP_FLAG(name, def, help, kind, path, member, values) specs.push_back({name, def, help, kind == kBool});
#include "tools/step_flags_fields.inc"
#undef MT_STEP_FLAG
  // The flags that read their value their own way.
  const std::vector<FlagSpec> own = {
      {"dtype", "auto", "low type: fp16, bf16 or auto (bf16 where the CPU has native bf16, else fp32; see mixtrain info)"},
      {"policy", "", "PrecisionPolicy .textproto with list edits"},
      {"allow", "", "comma-separated ops moved to the allow (low) list"},
      {"deny", "", "comma-separated ops moved to the deny (fp32) list"},
      {"fp32-nodes", "", "regex of node names pinned to fp32"},
      {"loss-scale", "", "a static scale, 'dynamic' or 'off' (default: dynamic for fp16, off otherwise)"},
      {"recompute", "none", "activation recompute: none, auto (the forward's parts that save the most memory per FLOP are computed again in the backward) or all; same gradients"},
      {"seed", "0", "seed for shuffling and dropout"},
  };
  specs.insert(specs.end(), own.begin(), own.end());
  return specs;
}

std::vector<FlagSpec> WithStepFlags(std::vector<FlagSpec> own, const std::vector<std::string>& leave_out) {
  const size_t n = own.size();
  for (FlagSpec& f : StepFlagSpecs()) {
    const bool taken = std::any_of(own.begin(), own.begin() + n, [&](const FlagSpec& o) { return o.name == f.name; });
    if (!taken && std::find(leave_out.begin(), leave_out.end(), f.name) == leave_out.end()) own.push_back(std::move(f));
  }
  return own;
}

namespace {

// Sets `member` from flag `name` as its type says: a string as given, a bool flag, an enum by its
// proto name (`values`, in order), a number by the rule of its field `path`.
template <typename T>
absl::Status SetFromFlag(const Args& a, const char* name, const char* path, const char* values, TrainConfig& c,
                         T& member) {
  if constexpr (std::is_same_v<T, std::string>) {
    member = a.str(name);
  } else if constexpr (std::is_same_v<T, bool>) {
    member = a.flag(name);
  } else if constexpr (std::is_enum_v<T>) {
    const std::vector<std::string> names = absl::StrSplit(values, ',');
    int i = 0;
    for (const std::string& n : names) {
      if (absl::AsciiStrToUpper(a.str(name)) == n) {
        member = static_cast<T>(i);
        return absl::OkStatus();
      }
      ++i;
    }
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": unknown '", a.str(name), "' (",
                                                   absl::AsciiStrToLower(absl::StrJoin(names, ", ")), ")"));
  } else {  // a number: checked against its field's rule and set by path
    (void)member;
    MIXTRAIN_RETURN_IF_ERROR(c.SetNumber(path, a.number(name)));
  }
  return absl::OkStatus();
}

}  // namespace

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

absl::Status ApplyStepFlags(const Args& a, TrainConfig& c, bool dtype_is_callers) {
  if (a.has("config")) {
    MIXTRAIN_ASSIGN_OR_RETURN(std::string text, ReadInputFile("--config", a.str("config")));
    absl::StatusOr<TrainConfig> parsed = TrainConfig::FromTextProto(text);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--config=", a.str("config"), ": ", parsed.status().message()));
    c = *std::move(parsed);
  }
  // --policy replaces the config's precision; the flags below (--precision among them) edit it.
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
#define MT_STEP_FLAG(name, def, help, kind, path, member, values) \
  if (a.has(name)) MIXTRAIN_RETURN_IF_ERROR(SetFromFlag(a, name, path, values, c, c.member));
#include "tools/step_flags_fields.inc"
#undef MT_STEP_FLAG
  if (a.has("recompute")) {
    const std::string r = a.str("recompute");
    if (r != "none" && r != "auto" && r != "all")
      return absl::InvalidArgumentError(absl::StrCat("--recompute: unknown '", r, "' (none, auto or all)"));
    c.recompute = r;
  }
  if (a.has("seed")) c.data.seed = static_cast<uint64_t>(a.integer("seed"));
  if (a.has("dtype") && !dtype_is_callers) {
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
  if (c.deterministic && !c.data_parallel)
    return absl::InvalidArgumentError("--deterministic needs --data-parallel (one process is deterministic already)");
  return CheckContradictions(a, c);
}

}  // namespace mixtrain::cli
