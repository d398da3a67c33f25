// TrainConfig <-> pb::TrainConfig and the text format. The public struct keeps protobuf out of the
// installed headers; its fields, and the rows here naming each field by its text-format path
// (api/train_config_fields.inc: the conversions, and the rule of each number, which Validate,
// FromTextProto and the `mixtrain train` flags check), are generated from the proto by
// proto/gen_train_config.cc. tests/library/train_config_test.cc sets every field of the message
// (walking its descriptor) and checks the round trip.
#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
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

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (!first.empty()) return;
    first = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  std::string first;
};

// --- the fields by their text-format paths (api/train_config_fields.inc), through reflection ---

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The field `path` names ("optimizer.lr") and the messages on the way to it.
std::vector<const FieldDescriptor*> FieldPath(std::string_view path) {
  std::vector<const FieldDescriptor*> out;
  const google::protobuf::Descriptor* d = pb::TrainConfig::descriptor();
  for (absl::string_view part : absl::StrSplit(absl::string_view(path.data(), path.size()), '.')) {
    const FieldDescriptor* f = d == nullptr ? nullptr : d->FindFieldByName(std::string(part));
    MT_CHECK(f != nullptr) << "TrainConfig has no field " << std::string(path);
    out.push_back(f);
    d = f->message_type();
  }
  return out;
}

template <typename T> struct IsOptional : std::false_type {};
template <typename T> struct IsOptional<std::optional<T>> : std::true_type {};

// Whether `v` is the field's default (unset optionals and empty lists are).
template <typename T>
bool IsDefault(const FieldDescriptor* f, const T& v) {
  if constexpr (IsOptional<T>::value) {
    return !v.has_value();
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return v.empty();
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<int>(v) == f->default_value_enum()->number();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v == f->default_value_string();
  } else if constexpr (std::is_same_v<T, bool>) {
    return v == f->default_value_bool();
  } else if constexpr (std::is_same_v<T, float>) {
    return v == f->default_value_float();
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return v == f->default_value_int32();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return v == f->default_value_int64();
  } else {
    static_assert(std::is_same_v<T, uint64_t>);
    return v == f->default_value_uint64();
  }
}

template <typename T>
void SetValue(Message* m, const FieldDescriptor* f, const T& v) {
  const google::protobuf::Reflection* r = m->GetReflection();
  if constexpr (IsOptional<T>::value) {
    SetValue(m, f, *v);
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    for (const std::string& s : v) r->AddString(m, f, s);
  } else if constexpr (std::is_enum_v<T>) {
    r->SetEnumValue(m, f, static_cast<int>(v));
  } else if constexpr (std::is_same_v<T, std::string>) {
    r->SetString(m, f, v);
  } else if constexpr (std::is_same_v<T, bool>) {
    r->SetBool(m, f, v);
  } else if constexpr (std::is_same_v<T, float>) {
    r->SetFloat(m, f, v);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    r->SetInt32(m, f, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    r->SetInt64(m, f, v);
  } else {
    r->SetUInt64(m, f, v);
  }
}

// Sets the proto's field only where the value differs from the message's default, so
// ToTextProto prints what the user changed and has_*() stays meaningful.
template <typename T>
void Put(pb::TrainConfig& p, std::string_view path, const T& v) {
  const std::vector<const FieldDescriptor*> fs = FieldPath(path);
  if (IsDefault(fs.back(), v)) return;
  Message* m = &p;
  for (size_t i = 0; i + 1 < fs.size(); ++i) m = m->GetReflection()->MutableMessage(m, fs[i]);
  SetValue(m, fs.back(), v);
}

template <typename T>
void GetValue(const Message& m, const FieldDescriptor* f, T& out) {
  const google::protobuf::Reflection* r = m.GetReflection();
  if constexpr (IsOptional<T>::value) {
    out.reset();
    if (!r->HasField(m, f)) return;
    typename T::value_type v;
    GetValue(m, f, v);
    out = v;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    out.clear();
    for (int i = 0; i < r->FieldSize(m, f); ++i) out.push_back(r->GetRepeatedString(m, f, i));
  } else if constexpr (std::is_enum_v<T>) {
    out = static_cast<T>(r->GetEnumValue(m, f));
  } else if constexpr (std::is_same_v<T, std::string>) {
    out = r->GetString(m, f);
  } else if constexpr (std::is_same_v<T, bool>) {
    out = r->GetBool(m, f);
  } else if constexpr (std::is_same_v<T, float>) {
    out = r->GetFloat(m, f);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    out = r->GetInt32(m, f);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    out = r->GetInt64(m, f);
  } else {
    out = r->GetUInt64(m, f);
  }
}

template <typename T>
void Take(const pb::TrainConfig& p, std::string_view path, T& out) {
  const std::vector<const FieldDescriptor*> fs = FieldPath(path);
  const Message* m = &p;  // an unset message reads as its defaults
  for (size_t i = 0; i + 1 < fs.size(); ++i) m = &m->GetReflection()->GetMessage(*m, fs[i]);
  GetValue(*m, fs.back(), out);
}

}  // namespace

pb::TrainConfig ToProto(const TrainConfig& c) {
  pb::TrainConfig p;
#define MT_CONFIG_FIELD(path, member) Put(p, path, c.member);
#define MT_NUMBER_RULE(path, member, rule)
#include "api/train_config_fields.inc"
#undef MT_CONFIG_FIELD
#undef MT_NUMBER_RULE
  return p;
}

TrainConfig FromProto(const pb::TrainConfig& p) {
  TrainConfig c;
#define MT_CONFIG_FIELD(path, member) Take(p, path, c.member);
#define MT_NUMBER_RULE(path, member, rule)
#include "api/train_config_fields.inc"
#undef MT_CONFIG_FIELD
#undef MT_NUMBER_RULE
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


#define MT_CONFIG_FIELD(path, member)
#define MT_NUMBER_RULE(path, member, rule)                                              \
  NumericField{path, rule, [](const TrainConfig& c) -> std::optional<double> { return c.member; }, \
               [](TrainConfig& c, double v) { c.member = static_cast<decltype(c.member)>(v); }},

constexpr NumericField kNumericFields[] = {
#include "api/train_config_fields.inc"
};
#undef MT_CONFIG_FIELD
#undef MT_NUMBER_RULE


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
