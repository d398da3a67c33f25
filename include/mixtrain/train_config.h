// mixtrain public API: TrainConfig, how a Trainer trains. A plain struct that mirrors the
// TrainConfig message of proto/mixtrain.proto field by field (same names, same defaults, the
// proto's comments; optional where the library tells an unset field from one set to its
// default): its fields are generated from the proto (train_config_fields.h), so embedders need
// neither protobuf nor ONNX headers; FromTextProto/ToTextProto read and write the same
// .textproto files as `mixtrain train --config`.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mixtrain/train_config_fields.h"

namespace mixtrain {
inline namespace v1 {

// The values a numeric setting accepts: a TrainConfig field, or a command-line flag of `mixtrain`
// (which takes the field's rule where the flag sets one). Always finite; an integer rule refuses
// fractions, a float32 rule values a float cannot hold (1e39 would become inf, 1e-50 zero).
struct NumberRule {
  enum class Kind { kInteger, kFloat32 };
  static constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  Kind kind = Kind::kFloat32;
  double min = -kUnbounded, max = kUnbounded;  // integer bounds are exact (|bound| < 2^53)
  bool min_open = false, max_open = false;     // true: the bound itself is refused ("> 0")

  static constexpr NumberRule Integer(double min, double max) { return {Kind::kInteger, min, max}; }
  static constexpr NumberRule Float(double min, double max = kUnbounded, bool min_open = false,
                                    bool max_open = false) {
    return {Kind::kFloat32, min, max, min_open, max_open};
  }
  // "a finite number > 0", "a finite number in [0, 1)", "an integer in [1, 2147483647]".
  std::string Describe() const;
  // Whether `value` passes (for kFloat32, as rounded to a float).
  bool Accepts(double value) const;
};

// Parses `text` (decimal or exponent form; 1e3 is an integer) and checks it against `rule`. The
// error reads "<name>=<text>: must be <rule>" (name: a flag "--lr" or a field "optimizer.lr").
// kFloat32 values come back rounded to float.
absl::StatusOr<double> ParseNumber(std::string_view name, std::string_view text, const NumberRule& rule);

// The fields (train_config_fields.h) are generated from proto/mixtrain.proto's TrainConfig, which
// documents each; this adds what reads, writes and checks them.
struct TrainConfig : TrainConfigFields {
  // Parses a text-format TrainConfig (a `--config` file's contents); unset fields keep defaults.
  // Syntax errors name the line and field; the parsed values are then checked by Validate().
  static absl::StatusOr<TrainConfig> FromTextProto(const std::string& text);
  // The config as text format (fields equal to their default are left out).
  std::string ToTextProto() const;

  // Checks every numeric field against its rule (NumberRuleOf) and every enum against its
  // values; the error names the field by its text-format path: "optimizer.lr=-1: must be a
  // finite number > 0". data.seed takes any value.
  absl::Status Validate() const;
  // The rule of a numeric field by its text-format path ("optimizer.lr", "steps"); nullptr for a
  // path that is not a numeric field.
  static const NumberRule* NumberRuleOf(std::string_view field);
  // Sets a numeric field by its text-format path when `value` passes its rule (an optional field
  // becomes set); the error names the field.
  absl::Status SetNumber(std::string_view field, double value);
};

}  // namespace v1
}  // namespace mixtrain
