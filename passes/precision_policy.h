// Which precision each op runs in: the four classes of TensorFlow's auto-mixed-precision
// (allow / deny / infer / clear; facts in shared/POLICY.md) as one table, plus the user's edits.
// The precision pass asks this policy; it knows no op names itself (XLA's FloatSupport idea).
#pragma once

#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mixtrain {

enum class PrecisionClass {
  kAllow,  // runs in the low type (GEMM-like: where tensor cores / AMX pay)
  kDeny,   // runs in fp32, and pulls downstream infer/clear nodes to fp32
  kInfer,  // follows its inputs; low between allow nodes, fp32 after a deny node
  kClear,  // pure data movement: always follows its inputs
  kFixed,  // not a float computation the pass may change (Shape, Cast, Constant, int ops)
};
const char* PrecisionClassName(PrecisionClass c);

enum class PrecisionPreset { kFp32, kAmp, kHalf };

class PrecisionPolicy {
 public:
  // The built-in lists for `low` (kF16 or kBF16): bf16 has fp32's exponent range, so, as in
  // PyTorch's CPU autocast, Softmax/LayerNorm/Exp/Log/reductions need not be forced to fp32.
  static PrecisionPolicy Default(PrecisionPreset preset, DType low);

  // Edits: move op types to a class; pin nodes whose name matches a regex to fp32.
  void SetClass(const std::string& op_type, PrecisionClass c) { classes_[op_type] = c; }
  absl::Status AddFp32NodeRegex(const std::string& pattern);  // error names a bad regex

  PrecisionPreset preset() const { return preset_; }
  DType low() const { return low_; }
  // The class of an op type; ops on no list are kDeny-like but do not spread (see pass).
  PrecisionClass ClassOf(const std::string& op_type) const;
  bool Listed(const std::string& op_type) const { return classes_.contains(op_type); }
  bool PinnedFp32(const Node& n) const;

 private:
  PrecisionPreset preset_ = PrecisionPreset::kAmp;
  DType low_ = DType::kF16;
  std::map<std::string, PrecisionClass> classes_;
  std::vector<std::regex> fp32_nodes_;
};

// Parses "fp32" | "amp" | "half".
absl::StatusOr<PrecisionPreset> ParsePrecisionPreset(const std::string& s);
// "fp32", "amp" or "half": the inverse of ParsePrecisionPreset.
const char* PrecisionPresetName(PrecisionPreset p);

}  // namespace mixtrain
