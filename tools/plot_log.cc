#include "tools/plot_log.h"

#include <cmath>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"

namespace mixtrain::cli {
namespace {

// A value of a flat JSON object: what a log line's members hold.
struct Value {
  enum class Kind { kNumber, kString, kBool, kNull };
  Kind kind = Kind::kNull;
  double number = 0;
  bool boolean = false;
};

using Members = std::vector<std::pair<std::string, Value>>;

// One line as a flat JSON object (RFC 8259 grammar, no nested objects or arrays). Errors say
// what was expected and at which column (1-based, in bytes).
class LineParser {
 public:
  explicit LineParser(std::string_view line) : s_(line) {}

  absl::StatusOr<Members> Object() {
    Members members;
    SkipSpace();
    if (!Eat('{')) return Expected("'{' (each line is one JSON object)");
    SkipSpace();
    if (!Eat('}')) {
      while (true) {
        SkipSpace();
        MIXTRAIN_ASSIGN_OR_RETURN(std::string key, String());
        SkipSpace();
        if (!Eat(':')) return Expected("':'");
        SkipSpace();
        MIXTRAIN_ASSIGN_OR_RETURN(Value v, ParseValue());
        members.emplace_back(std::move(key), v);
        SkipSpace();
        if (Eat('}')) break;
        if (!Eat(',')) return Expected("',' or '}'");
      }
    }
    SkipSpace();
    if (i_ != s_.size()) return Expected("the end of the line after the object");
    return members;
  }

 private:
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool Digit() const { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  absl::Status Expected(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("expected ", std::string(what), " at column ", i_ + 1));
  }

  absl::StatusOr<Value> ParseValue() {
    Value v;
    if (s_.substr(i_, 4) == "null") {
      i_ += 4;
    } else if (s_.substr(i_, 4) == "true" || s_.substr(i_, 5) == "false") {
      v.kind = Value::Kind::kBool;
      v.boolean = s_[i_] == 't';
      i_ += v.boolean ? 4 : 5;
    } else if (i_ < s_.size() && s_[i_] == '"') {
      MIXTRAIN_RETURN_IF_ERROR(String().status());
      v.kind = Value::Kind::kString;
    } else if (i_ < s_.size() && (s_[i_] == '-' || Digit())) {
      v.kind = Value::Kind::kNumber;
      MIXTRAIN_ASSIGN_OR_RETURN(v.number, Number());
    } else {
      return Expected("a number, string, true, false or null (log lines are flat objects)");
    }
    return v;
  }

  absl::StatusOr<double> Number() {
    const size_t start = i_;
    Eat('-');
    if (!Eat('0')) {
      if (!Digit()) return Expected("a digit");
      while (Digit()) ++i_;
    }
    if (Eat('.')) {
      if (!Digit()) return Expected("a digit after '.'");
      while (Digit()) ++i_;
    }
    if (Eat('e') || Eat('E')) {
      if (!Eat('+')) Eat('-');
      if (!Digit()) return Expected("an exponent");
      while (Digit()) ++i_;
    }
    double x;
    const std::string_view text = s_.substr(start, i_ - start);
    if (!absl::SimpleAtod(absl::string_view(text.data(), text.size()), &x) || !std::isfinite(x))
      return absl::InvalidArgumentError(
          absl::StrCat("number ", std::string(text), " at column ", start + 1, " is out of range"));
    return x;
  }

  // A string's contents; \uXXXX escapes become UTF-8 (a key spelled with them still matches).
  absl::StatusOr<std::string> String() {
    if (!Eat('"')) return Expected("'\"' (a key)");
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      const unsigned char c = s_[i_++];
      if (c < 0x20) return --i_, Expected("no control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
      if (const size_t k = kFrom.find(e); k != std::string_view::npos) {
        out += kTo[k];
      } else if (e == 'u') {
        uint32_t cp = 0;
        for (int n = 0; n < 4; ++n, ++i_) {
          const char h = i_ < s_.size() ? s_[i_] : '\0';
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return Expected("four hex digits after \\u");
          cp = cp * 16 + d;
        }
        if (cp < 0x80) {
          out += static_cast<char>(cp);
        } else if (cp < 0x800) {
          out += static_cast<char>(0xC0 | cp >> 6), out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
          out += static_cast<char>(0xE0 | cp >> 12), out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
          out += static_cast<char>(0x80 | (cp & 0x3F));
        }
      } else {
        return --i_, Expected("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
    if (!Eat('"')) return Expected("'\"' closing the string");
    return out;
  }

  std::string_view s_;
  size_t i_ = 0;
};

// The six keys train writes, and what each may hold.
enum class Want { kStep, kNumberOrNull, kBool };
struct Key {
  const char* name;
  Want want;
};
constexpr Key kKeys[] = {{"step", Want::kStep},     {"loss", Want::kNumberOrNull}, {"loss_scale", Want::kNumberOrNull},
                         {"skipped", Want::kBool}, {"lr", Want::kNumberOrNull},   {"ms", Want::kNumberOrNull}};
constexpr int kNumKeys = sizeof(kKeys) / sizeof(kKeys[0]);

const char* KindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNumber: return "a number";
    case Value::Kind::kString: return "a string";
    case Value::Kind::kBool: return "a boolean";
    case Value::Kind::kNull: return "null";
  }
  return "?";
}

// A parsed line's members as a step: every key present once, each with its kind.
absl::StatusOr<LogStep> ToStep(const Members& members) {
  std::optional<Value> found[kNumKeys];
  for (const auto& [key, v] : members) {
    int k = 0;
    while (k < kNumKeys && key != kKeys[k].name) ++k;
    if (k == kNumKeys) continue;  // a key of a later version
    if (found[k]) return absl::InvalidArgumentError(absl::StrCat("key \"", key, "\" appears twice"));
    const bool ok = kKeys[k].want == Want::kBool ? v.kind == Value::Kind::kBool
                    : kKeys[k].want == Want::kStep
                        ? v.kind == Value::Kind::kNumber && v.number >= 0 && v.number <= 9007199254740992.0 &&
                              v.number == std::floor(v.number)
                        : v.kind == Value::Kind::kNumber || v.kind == Value::Kind::kNull;
    if (!ok) {
      const char* want = kKeys[k].want == Want::kBool ? "true or false"
                         : kKeys[k].want == Want::kStep ? "an integer >= 0"
                                                        : "a number or null";
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", key, "\" must be ", want, ", not ",
          v.kind == Value::Kind::kNumber ? absl::StrCat(v.number) : KindName(v.kind)));
    }
    found[k] = v;
  }
  for (int k = 0; k < kNumKeys; ++k)
    if (!found[k]) return absl::InvalidArgumentError(absl::StrCat("no key \"", kKeys[k].name, "\""));
  auto number = [&](int k) { return found[k]->kind == Value::Kind::kNull ? NAN : found[k]->number; };
  return LogStep{.step = static_cast<int64_t>(found[0]->number), .loss = number(1), .loss_scale = number(2),
                 .lr = number(4), .ms = number(5), .skipped = found[3]->boolean};
}

}  // namespace

absl::StatusOr<TrainLog> ParseTrainLog(const std::string& path, const std::string& text) {
  TrainLog log;
  log.path = path;
  log.name = path.substr(path.rfind('/') + 1);  // npos + 1 == 0: the whole path
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty log (no steps)"));
  size_t begin = 0;
  for (int64_t line = 1; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view s(text.data() + begin, end - begin);
    begin = end + 1;
    auto fail = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", what));
    };
    if (s.find_first_not_of(" \t\r") == std::string_view::npos) return fail("empty line (expected one JSON object)");
    absl::StatusOr<Members> members = LineParser(s).Object();
    if (!members.ok()) return fail(std::string(members.status().message()));
    absl::StatusOr<LogStep> step = ToStep(*members);
    if (!step.ok()) return fail(std::string(step.status().message()));
    if (!log.steps.empty() && step->step <= log.steps.back().step)
      return fail(absl::StrCat("step ", step->step, " follows step ", log.steps.back().step, ": steps must increase"));
    log.steps.push_back(*step);
  }
  return log;
}

absl::StatusOr<TrainLog> ReadTrainLog(const std::string& path) {
  MIXTRAIN_ASSIGN_OR_RETURN(std::string text, ReadInputFile("LOG.jsonl", path));
  return ParseTrainLog(path, text);
}

}  // namespace mixtrain::cli
