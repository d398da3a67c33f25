// TrainConfig <-> pb::TrainConfig, field by field, and the text format. The public struct keeps
// protobuf out of the installed headers; tests/library/train_config_test.cc sets every field of
// the message (walking its descriptor) and checks the round trip, so a field added to the proto
// and not here fails that test. Also the rules of the numeric fields (one row each), which
// Validate, FromTextProto and the `mixtrain train` flags check.
#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/convert.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "graph/verifier.h"
#include "kernels/registry.h"

namespace mixtrain {
namespace api {
namespace {

using TC = TrainConfig;
// The public enums list the proto's values in the same order.
static_assert(int{pb::PrecisionPolicy::HALF} == static_cast<int>(TC::Precision::Preset::kHalf));
static_assert(int{pb::PrecisionPolicy::FP32} == static_cast<int>(TC::Precision::Preset::kFp32));
static_assert(int{pb::PrecisionPolicy::BF16} == static_cast<int>(TC::Precision::LowType::kBf16));
static_assert(int{pb::LossScalerConfig::DYNAMIC} == static_cast<int>(TC::LossScaler::Mode::kDynamic));
static_assert(int{pb::LossScalerConfig::STATIC} == static_cast<int>(TC::LossScaler::Mode::kStatic));
static_assert(int{pb::OptimizerConfig::ADAGRAD} == static_cast<int>(TC::Optimizer::Kind::kAdagrad));
static_assert(int{pb::OptimizerConfig::SGD} == static_cast<int>(TC::Optimizer::Kind::kSgd));
static_assert(int{pb::ScheduleConfig::COSINE} == static_cast<int>(TC::Schedule::Kind::kCosine));
static_assert(int{pb::ScheduleConfig::STEP} == static_cast<int>(TC::Schedule::Kind::kStep));

// Sets a proto field only when the value differs from the message's default, so ToTextProto
// prints what the user changed and has_*() stays meaningful.
#define MT_SET(msg, field, value)                                              \
  do {                                                                         \
    auto v_ = (value);                                                         \
    if (v_ != decltype(v_)(msg.field())) msg.set_##field(decltype(msg.field())(v_)); \
  } while (0)
#define MT_SET_ENUM(msg, field, value, Enum)                                   \
  do {                                                                         \
    auto v_ = static_cast<Enum>(static_cast<int>(value));                     \
    if (v_ != msg.field()) msg.set_##field(v_);                                \
  } while (0)

void AddAll(const std::vector<std::string>& from, google::protobuf::RepeatedPtrField<std::string>* to) {
  for (const std::string& s : from) *to->Add() = s;
}
std::vector<std::string> All(const google::protobuf::RepeatedPtrField<std::string>& from) {
  return {from.begin(), from.end()};
}

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (!first.empty()) return;
    first = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  std::string first;
};

}  // namespace

pb::TrainConfig ToProto(const TrainConfig& c) {
  pb::TrainConfig p;
  MT_SET(p, model, c.model);
  MT_SET(p, loss, c.loss);
  MT_SET(p, output, c.output);
  MT_SET(p, class_axis, c.class_axis);
  MT_SET(p, freeze, c.freeze);
  MT_SET(p, trainable, c.trainable);
  MT_SET(p, epochs, c.epochs);
  MT_SET(p, steps, c.steps);
  MT_SET(p, accumulate, c.accumulate);
  MT_SET(p, device, c.device);
  MT_SET(p, debug_precision, c.debug_precision);
  MT_SET(p, data_parallel, c.data_parallel);
  MT_SET(p, deterministic, c.deterministic);
  MT_SET(p, recompute, c.recompute);
  if (c.ignore_index) p.set_ignore_index(*c.ignore_index);
  MT_SET(p, lora_rank, c.lora_rank);
  if (c.lora_alpha) p.set_lora_alpha(*c.lora_alpha);  // unset means 2 * rank
  MT_SET(p, lora_targets, c.lora_targets);
  MT_SET(p, lora_dropout, c.lora_dropout);
  MT_SET(p, lora_init, c.lora_init);

  pb::OptimizerConfig o;
  MT_SET_ENUM(o, kind, c.optimizer.kind, pb::OptimizerConfig::Kind);
  MT_SET(o, lr, c.optimizer.lr);
  MT_SET(o, beta1, c.optimizer.beta1);
  MT_SET(o, beta2, c.optimizer.beta2);
  if (c.optimizer.epsilon) o.set_epsilon(*c.optimizer.epsilon);  // presence matters (Adagrad, AdamW)
  if (c.optimizer.weight_decay) o.set_weight_decay(*c.optimizer.weight_decay);
  MT_SET(o, momentum, c.optimizer.momentum);
  MT_SET(o, nesterov, c.optimizer.nesterov);
  MT_SET(o, clip_grad_norm, c.optimizer.clip_grad_norm);
  if (o.ByteSizeLong() > 0) *p.mutable_optimizer() = o;

  pb::ScheduleConfig s;
  MT_SET_ENUM(s, kind, c.schedule.kind, pb::ScheduleConfig::Kind);
  MT_SET(s, warmup_steps, c.schedule.warmup_steps);
  MT_SET(s, step_size, c.schedule.step_size);
  MT_SET(s, gamma, c.schedule.gamma);
  MT_SET(s, min_lr, c.schedule.min_lr);
  if (s.ByteSizeLong() > 0) *p.mutable_schedule() = s;

  pb::PrecisionPolicy pp;
  MT_SET_ENUM(pp, preset, c.precision.preset, pb::PrecisionPolicy::Preset);
  MT_SET_ENUM(pp, low_dtype, c.precision.low_dtype, pb::PrecisionPolicy::LowType);
  AddAll(c.precision.allow, pp.mutable_allow());
  AddAll(c.precision.deny, pp.mutable_deny());
  AddAll(c.precision.infer, pp.mutable_infer());
  AddAll(c.precision.clear, pp.mutable_clear());
  AddAll(c.precision.fp32_nodes, pp.mutable_fp32_nodes());
  if (pp.ByteSizeLong() > 0) *p.mutable_precision() = pp;

  pb::LossScalerConfig ls;
  MT_SET_ENUM(ls, mode, c.loss_scaler.mode, pb::LossScalerConfig::Mode);
  MT_SET(ls, init_scale, c.loss_scaler.init_scale);
  MT_SET(ls, growth_factor, c.loss_scaler.growth_factor);
  MT_SET(ls, backoff_factor, c.loss_scaler.backoff_factor);
  MT_SET(ls, growth_interval, c.loss_scaler.growth_interval);
  MT_SET(ls, max_scale, c.loss_scaler.max_scale);
  if (ls.ByteSizeLong() > 0) *p.mutable_loss_scaler() = ls;

  pb::DataConfig d;
  MT_SET(d, path, c.data.path);
  MT_SET(d, dataset, c.data.dataset);
  MT_SET(d, labels_key, c.data.labels_key);
  MT_SET(d, batch_size, c.data.batch_size);
  MT_SET(d, shuffle, c.data.shuffle);
  MT_SET(d, seed, c.data.seed);
  if (d.ByteSizeLong() > 0) *p.mutable_data() = d;

  pb::RunConfig r;
  MT_SET(r, save, c.run.save);
  MT_SET(r, save_every, c.run.save_every);
  MT_SET(r, keep, c.run.keep);
  MT_SET(r, eval_every, c.run.eval_every);
  MT_SET(r, early_stop, c.run.early_stop);
  MT_SET(r, save_best, c.run.save_best);
  MT_SET(r, limit_train, c.run.limit_train);
  MT_SET(r, limit_test, c.run.limit_test);
  MT_SET(r, log_every, c.run.log_every);
  MT_SET(r, log_dir, c.run.log_dir);
  MT_SET(r, export_path, c.run.export_path);
  MT_SET(r, export_dtype, c.run.export_dtype);
  if (r.ByteSizeLong() > 0) *p.mutable_run() = r;
  return p;
}
#undef MT_SET
#undef MT_SET_ENUM

TrainConfig FromProto(const pb::TrainConfig& p) {
  TrainConfig c;
  c.model = p.model();
  c.loss = p.loss();
  c.output = p.output();
  c.class_axis = p.class_axis();
  c.freeze = p.freeze();
  c.trainable = p.trainable();
  c.epochs = p.epochs();
  c.steps = p.steps();
  c.accumulate = p.accumulate();
  c.device = p.device();
  c.debug_precision = p.debug_precision();
  c.data_parallel = p.data_parallel();
  c.deterministic = p.deterministic();
  c.recompute = p.recompute();
  if (p.has_ignore_index()) c.ignore_index = p.ignore_index();
  c.lora_rank = p.lora_rank();
  if (p.has_lora_alpha()) c.lora_alpha = p.lora_alpha();
  c.lora_targets = p.lora_targets();
  c.lora_dropout = p.lora_dropout();
  c.lora_init = p.lora_init();
  const pb::OptimizerConfig& o = p.optimizer();
  c.optimizer = {static_cast<TC::Optimizer::Kind>(o.kind()), o.lr(), o.beta1(), o.beta2(),
                 o.has_epsilon() ? std::optional<float>(o.epsilon()) : std::nullopt,
                 o.has_weight_decay() ? std::optional<float>(o.weight_decay()) : std::nullopt,
                 o.momentum(), o.nesterov(), o.clip_grad_norm()};
  const pb::ScheduleConfig& s = p.schedule();
  c.schedule = {static_cast<TC::Schedule::Kind>(s.kind()), s.warmup_steps(), s.step_size(), s.gamma(),
                s.min_lr()};
  const pb::PrecisionPolicy& pp = p.precision();
  c.precision = {static_cast<TC::Precision::Preset>(pp.preset()),
                 static_cast<TC::Precision::LowType>(pp.low_dtype()),
                 All(pp.allow()), All(pp.deny()), All(pp.infer()), All(pp.clear()), All(pp.fp32_nodes())};
  const pb::LossScalerConfig& ls = p.loss_scaler();
  c.loss_scaler = {static_cast<TC::LossScaler::Mode>(ls.mode()), ls.init_scale(), ls.growth_factor(),
                   ls.backoff_factor(), ls.growth_interval(), ls.max_scale()};
  const pb::DataConfig& d = p.data();
  c.data = {d.path(), d.dataset(), d.labels_key(), d.batch_size(), d.shuffle(), d.seed()};
  const pb::RunConfig& r = p.run();
  c.run = {r.save(),        r.save_every(),  r.keep(),     r.eval_every(), r.early_stop(),  r.save_best(),
           r.limit_train(), r.limit_test(), r.log_every(), r.log_dir(),    r.export_path(), r.export_dtype()};
  return c;
}

// One row per numeric field: its text-format path, the values it takes, and how to read and set
// it. Integers are bounded by their field's type; step counts by 10^12 (a sane bound far below
// int64's, so products such as epochs x batches cannot overflow).
struct NumericField {
  const char* path;
  NumberRule rule;
  std::optional<double> (*get)(const TrainConfig&);  // nullopt: an optional field left unset
  void (*set)(TrainConfig&, double);
};

constexpr double kInt32Max = INT32_MAX;
constexpr double kMaxSteps = 1e12;
constexpr NumberRule kPositive = NumberRule::Float(0, NumberRule::kUnbounded, /*min_open=*/true);
constexpr NumberRule kNonNegative = NumberRule::Float(0);
constexpr NumberRule kUnitOpenAbove = NumberRule::Float(0, 1, false, /*max_open=*/true);  // [0, 1)

#define MT_FIELD(field, rule)                                                          \
  NumericField {                                                                       \
    #field, rule, [](const TrainConfig& c) -> std::optional<double> { return c.field; }, \
        [](TrainConfig& c, double v) { c.field = static_cast<decltype(c.field)>(v); }  \
  }

constexpr NumericField kNumericFields[] = {
    MT_FIELD(optimizer.lr, kPositive),
    MT_FIELD(optimizer.beta1, kUnitOpenAbove),
    MT_FIELD(optimizer.beta2, kUnitOpenAbove),
    MT_FIELD(optimizer.epsilon, kPositive),
    MT_FIELD(optimizer.weight_decay, kNonNegative),
    MT_FIELD(optimizer.momentum, kUnitOpenAbove),
    MT_FIELD(optimizer.clip_grad_norm, kNonNegative),  // 0 = off
    MT_FIELD(schedule.warmup_steps, NumberRule::Integer(0, kInt32Max)),
    MT_FIELD(schedule.step_size, NumberRule::Integer(1, kInt32Max)),
    MT_FIELD(schedule.gamma, kPositive),
    MT_FIELD(schedule.min_lr, kNonNegative),
    MT_FIELD(loss_scaler.init_scale, kPositive),
    MT_FIELD(loss_scaler.growth_factor, NumberRule::Float(1, NumberRule::kUnbounded, /*min_open=*/true)),
    MT_FIELD(loss_scaler.backoff_factor, NumberRule::Float(0, 1, true, true)),
    MT_FIELD(loss_scaler.growth_interval, NumberRule::Integer(1, kInt32Max)),
    MT_FIELD(loss_scaler.max_scale, kPositive),
    MT_FIELD(data.batch_size, NumberRule::Integer(1, kInt32Max)),
    MT_FIELD(class_axis, NumberRule::Integer(-64, 63)),  // ONNX ranks stop at 64
    MT_FIELD(epochs, NumberRule::Integer(0, kInt32Max)),
    MT_FIELD(steps, NumberRule::Integer(0, kMaxSteps)),
    MT_FIELD(accumulate, NumberRule::Integer(1, kInt32Max)),
    MT_FIELD(debug_precision, NumberRule::Integer(0, kInt32Max)),
    MT_FIELD(ignore_index, NumberRule::Integer(-9007199254740991.0, 9007199254740991.0)),  // exact in a double
    MT_FIELD(run.save_every, NumberRule::Integer(0, kMaxSteps)),
    MT_FIELD(run.keep, NumberRule::Integer(1, 1000000)),
    MT_FIELD(run.eval_every, NumberRule::Integer(0, kMaxSteps)),
    MT_FIELD(run.early_stop, NumberRule::Integer(0, kInt32Max)),
    MT_FIELD(run.limit_train, NumberRule::Integer(0, kMaxSteps)),
    MT_FIELD(run.limit_test, NumberRule::Integer(0, kMaxSteps)),
    MT_FIELD(run.log_every, NumberRule::Integer(1, kMaxSteps)),
    MT_FIELD(lora_rank, NumberRule::Integer(0, kInt32Max)),  // 0 = off
    MT_FIELD(lora_alpha, kPositive),
    MT_FIELD(lora_dropout, kUnitOpenAbove),
};
#undef MT_FIELD

const NumericField* FindField(std::string_view path) {
  for (const NumericField& f : kNumericFields)
    if (path == f.path) return &f;
  return nullptr;
}

std::string FormatBound(double v, bool integer) {
  return integer ? absl::StrCat(static_cast<int64_t>(v)) : absl::StrCat(v);
}

// The text of every token, with its line and column as protobuf's parser counts them.
struct Token {
  std::string text;
  int line, column;
};
std::vector<Token> Tokenize(const std::string& text) {
  google::protobuf::io::ArrayInputStream in(text.data(), static_cast<int>(text.size()));
  CollectErrors ignored;  // the text parsed already
  google::protobuf::io::Tokenizer t(&in, &ignored);
  t.set_comment_style(google::protobuf::io::Tokenizer::SH_COMMENT_STYLE);
  t.set_allow_f_after_float(true);
  t.set_require_space_after_number(false);
  t.set_allow_multiline_strings(true);
  std::vector<Token> out;
  while (t.Next()) out.push_back({t.current().text, t.current().line, t.current().column});
  return out;
}

// A float field's literal as written ("1e-50", "-inf"), which the parser has already rounded to a
// float (1e-50 to 0): checked against the field's rule as written, so a config file refuses what
// the flag refuses. `tree` holds the parsed locations; "" when the field is not in the text.
std::string FloatLiteral(const google::protobuf::Message& m, std::string_view path,
                         const google::protobuf::TextFormat::ParseInfoTree& tree, const std::vector<Token>& tokens) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::TextFormat::ParseInfoTree* at = &tree;
  const std::vector<absl::string_view> parts = absl::StrSplit(absl::string_view(path.data(), path.size()), '.');
  for (size_t i = 0; i + 1 < parts.size() && at != nullptr; ++i) {
    const google::protobuf::FieldDescriptor* f = d->FindFieldByName(std::string(parts[i]));
    if (f == nullptr || f->message_type() == nullptr || f->is_repeated()) return "";
    at = at->GetTreeForNested(f, -1);  // -1: a singular field
    d = f->message_type();
  }
  const google::protobuf::FieldDescriptor* f = d->FindFieldByName(std::string(parts.back()));
  if (at == nullptr || f == nullptr || f->is_repeated()) return "";
  const google::protobuf::TextFormat::ParseLocation start = at->GetLocation(f, -1);
  if (start.line < 0) return "";
  size_t i = 0;
  while (i < tokens.size() && (tokens[i].line != start.line || tokens[i].column != start.column)) ++i;
  // name ':' ['-'] value
  if (++i < tokens.size() && tokens[i].text == ":") ++i;
  std::string literal;
  if (i < tokens.size() && tokens[i].text == "-") literal = tokens[i++].text;
  if (i >= tokens.size()) return "";
  std::string value = tokens[i].text;
  const bool hex = value.size() > 1 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
  if (!hex && value.size() > 1 && (value.back() == 'f' || value.back() == 'F') &&
      (std::isdigit(static_cast<unsigned char>(value[value.size() - 2])) || value[value.size() - 2] == '.'))
    value.pop_back();  // "1.5f"
  return literal + value;
}

// The op types a precision list may name: every ONNX op and every op a kernel runs (mixtrain's
// own, such as the fused ones the precision pass sees), sorted.
const std::vector<std::string>& PolicyOpTypes() {
  static const auto* names = [] {
    std::set<std::string> set(OnnxOpTypes().begin(), OnnxOpTypes().end());
    for (const KernelDef& k : KernelRegistry::Global().defs()) set.insert(k.op_type);
    return new std::vector<std::string>(set.begin(), set.end());
  }();
  return *names;
}

absl::Status CheckOpList(const char* field, const std::vector<std::string>& ops) {
  for (const std::string& op : ops) {
    if (op.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " holds an empty op type"));
    const std::vector<std::string>& known = PolicyOpTypes();
    if (!std::binary_search(known.begin(), known.end(), op))
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", op, "' is not an op type mixtrain knows (the nearest is '",
                                                     NearestName(op, known), "')"));
  }
  return absl::OkStatus();
}

}  // namespace api

inline namespace v1 {

absl::StatusOr<TrainConfig> TrainConfig::FromTextProto(const std::string& text) {
  return api::Guarded("TrainConfig::FromTextProto", [&]() -> absl::StatusOr<TrainConfig> {
    pb::TrainConfig p;
    google::protobuf::TextFormat::Parser parser;
    api::CollectErrors errors;
    parser.RecordErrorsTo(&errors);
    google::protobuf::TextFormat::ParseInfoTree locations;
    parser.WriteLocationsTo(&locations);
    if (!parser.ParseFromString(text, &p))
      return absl::InvalidArgumentError(absl::StrCat("not a valid TrainConfig textproto: ", errors.first));
    const std::vector<api::Token> tokens = api::Tokenize(text);
    for (const api::NumericField& f : api::kNumericFields) {
      if (f.rule.kind != NumberRule::Kind::kFloat32) continue;
      const std::string literal = api::FloatLiteral(p, f.path, locations, tokens);
      if (!literal.empty()) MT_RETURN_IF_ERROR(ParseNumber(f.path, literal, f.rule).status());
    }
    TrainConfig c = api::FromProto(p);
    MT_RETURN_IF_ERROR(c.Validate());
    return c;
  });
}

std::string TrainConfig::ToTextProto() const {
  std::string out;
  google::protobuf::TextFormat::PrintToString(api::ToProto(*this), &out);
  return out;
}

std::string NumberRule::Describe() const {
  const bool integer = kind == Kind::kInteger;
  std::string out = integer ? "an integer" : "a finite number";
  const bool has_min = min != -kUnbounded, has_max = max != kUnbounded;
  if (has_min && has_max) {
    absl::StrAppend(&out, " in ", min_open ? "(" : "[", api::FormatBound(min, integer), ", ",
                    api::FormatBound(max, integer), max_open ? ")" : "]");
  } else if (has_min) {
    absl::StrAppend(&out, min_open ? " > " : " >= ", api::FormatBound(min, integer));
  } else if (has_max) {
    absl::StrAppend(&out, max_open ? " < " : " <= ", api::FormatBound(max, integer));
  }
  return out;
}

bool NumberRule::Accepts(double value) const {
  if (!std::isfinite(value)) return false;
  if (kind == Kind::kInteger && value != std::trunc(value)) return false;
  if (kind == Kind::kFloat32) {
    // Past FLT_MAX a float is inf; a nonzero value below its smallest subnormal becomes 0.
    if (std::fabs(value) > FLT_MAX) return false;
    if (value != 0 && static_cast<float>(value) == 0) return false;
    value = static_cast<float>(value);
  }
  if (min_open ? !(value > min) : !(value >= min)) return false;
  return max_open ? value < max : value <= max;
}

absl::StatusOr<double> ParseNumber(std::string_view name, std::string_view text, const NumberRule& rule) {
  double v = 0;
  const bool parsed = absl::SimpleAtod(absl::string_view(text.data(), text.size()), &v);
  if (parsed && rule.Accepts(v))
    return rule.kind == NumberRule::Kind::kFloat32 ? static_cast<float>(v) : v;
  std::string why = absl::StrCat(std::string(name), "=", std::string(text), ": must be ", rule.Describe());
  if (parsed && std::isfinite(v) && rule.kind == NumberRule::Kind::kFloat32 && std::fabs(v) > FLT_MAX)
    absl::StrAppend(&why, " (a float32: at most ", FLT_MAX, " in magnitude)");
  if (parsed && v != 0 && rule.kind == NumberRule::Kind::kFloat32 && static_cast<float>(v) == 0)
    absl::StrAppend(&why, " (a float32 holds no nonzero value below ", std::numeric_limits<float>::denorm_min(),
                    " in magnitude: this one would become 0)");
  return absl::InvalidArgumentError(why);
}

absl::Status TrainConfig::Validate() const {
  for (const api::NumericField& f : api::kNumericFields) {
    const std::optional<double> v = f.get(*this);
    if (v && !f.rule.Accepts(*v))
      return absl::InvalidArgumentError(absl::StrCat(f.path, "=", *v, ": must be ", f.rule.Describe()));
  }
  // Enums set from C++ may hold any integer; the text format admits only their values.
  // The public enums list the proto's values in order (the static_asserts above).
  struct EnumField {
    const char* path;
    int value, count;
  };
  const EnumField enums[] = {
      {"precision.preset", static_cast<int>(precision.preset), pb::PrecisionPolicy::Preset_ARRAYSIZE},
      {"precision.low_dtype", static_cast<int>(precision.low_dtype), pb::PrecisionPolicy::LowType_ARRAYSIZE},
      {"loss_scaler.mode", static_cast<int>(loss_scaler.mode), pb::LossScalerConfig::Mode_ARRAYSIZE},
      {"optimizer.kind", static_cast<int>(optimizer.kind), pb::OptimizerConfig::Kind_ARRAYSIZE},
      {"schedule.kind", static_cast<int>(schedule.kind), pb::ScheduleConfig::Kind_ARRAYSIZE},
  };
  for (const EnumField& e : enums)
    if (e.value < 0 || e.value >= e.count)
      return absl::InvalidArgumentError(
          absl::StrCat(e.path, "=", e.value, ": not one of the enum's ", e.count, " values"));
  if (device != "cpu" && device != "cuda" && device != "auto")
    return absl::InvalidArgumentError(absl::StrCat("device='", device, "': must be cpu, cuda or auto"));
  // Names: the labels become a graph input, which needs one; the lists name op types.
  if (data.labels_key.empty()) return absl::InvalidArgumentError("data.labels_key is empty: it names the labels array");
  if (loss == "output:") return absl::InvalidArgumentError("loss='output:' names no model value (output:NAME)");
  MT_RETURN_IF_ERROR(api::CheckOpList("precision.allow", precision.allow));
  MT_RETURN_IF_ERROR(api::CheckOpList("precision.deny", precision.deny));
  MT_RETURN_IF_ERROR(api::CheckOpList("precision.infer", precision.infer));
  MT_RETURN_IF_ERROR(api::CheckOpList("precision.clear", precision.clear));
  if (run.export_dtype != "fp32" && run.export_dtype != "fp16" && run.export_dtype != "bf16")
    return absl::InvalidArgumentError(
        absl::StrCat("run.export_dtype='", run.export_dtype, "': must be fp32, fp16 or bf16"));
  return absl::OkStatus();
}

const NumberRule* TrainConfig::NumberRuleOf(std::string_view field) {
  const api::NumericField* f = api::FindField(field);
  return f == nullptr ? nullptr : &f->rule;
}

absl::Status TrainConfig::SetNumber(std::string_view field, double value) {
  const api::NumericField* f = api::FindField(field);
  if (f == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(field), "' is not a numeric TrainConfig field"));
  if (!f->rule.Accepts(value))
    return absl::InvalidArgumentError(absl::StrCat(f->path, "=", value, ": must be ", f->rule.Describe()));
  f->set(*this, value);
  return absl::OkStatus();
}

}  // namespace v1
}  // namespace mixtrain
