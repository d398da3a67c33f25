#include "passes/precision_policy.h"

#include "absl/strings/str_cat.h"

namespace mixtrain {
namespace {

using C = PrecisionClass;

// The default table. One row per op; where fp16 and bf16 differ, the bf16 column says so.
struct Row {
  const char* op;
  C fp16;
  C bf16;
};
constexpr Row kTable[] = {
    // allow: GEMM-like ops, where the low type pays (tensor cores, AMX / AVX512-BF16).
    {"Conv", C::kAllow, C::kAllow},
    {"ConvTranspose", C::kAllow, C::kAllow},
    {"MatMul", C::kAllow, C::kAllow},
    {"Gemm", C::kAllow, C::kAllow},
    {"Einsum", C::kAllow, C::kAllow},
    {"RNN", C::kAllow, C::kAllow},
    {"LSTM", C::kAllow, C::kAllow},
    {"GRU", C::kAllow, C::kAllow},
    // deny: fp16's range (max 65504, min normal 6e-5) is unsafe for these. PyTorch forces them to
    // fp32 on CUDA; its CPU/bf16 list does not force Softmax, LayerNorm, Exp, Log, sums.
    {"Exp", C::kDeny, C::kInfer},
    {"Log", C::kDeny, C::kInfer},
    {"Pow", C::kDeny, C::kInfer},
    {"Reciprocal", C::kDeny, C::kInfer},
    {"Softplus", C::kDeny, C::kInfer},
    {"Softmax", C::kDeny, C::kInfer},
    {"LogSoftmax", C::kDeny, C::kInfer},
    {"MaskedSoftmax", C::kDeny, C::kInfer},  // fuse_softmax's Softmax(Where(mask, scale * X))
    {"ReduceSum", C::kDeny, C::kInfer},
    {"ReduceMean", C::kDeny, C::kInfer},
    {"ReduceSumSquare", C::kDeny, C::kDeny},
    {"ReduceL2", C::kDeny, C::kDeny},
    {"ReduceLogSumExp", C::kDeny, C::kDeny},
    {"CumSum", C::kDeny, C::kDeny},
    {"LayerNormalization", C::kDeny, C::kInfer},
    {"GroupNormalization", C::kDeny, C::kDeny},
    {"InstanceNormalization", C::kDeny, C::kDeny},
    {"SoftmaxCrossEntropyLoss", C::kDeny, C::kDeny},
    {"NegativeLogLikelihoodLoss", C::kDeny, C::kDeny},
    // infer: numerically fine in the low type when their inputs are.
    {"Add", C::kInfer, C::kInfer},
    {"Sub", C::kInfer, C::kInfer},
    {"Mul", C::kInfer, C::kInfer},
    {"Div", C::kInfer, C::kInfer},
    {"Sum", C::kInfer, C::kInfer},
    {"Sigmoid", C::kInfer, C::kInfer},
    {"Tanh", C::kInfer, C::kInfer},
    {"Erf", C::kInfer, C::kInfer},
    {"Gelu", C::kInfer, C::kInfer},
    {"Sqrt", C::kInfer, C::kInfer},
    {"LeakyRelu", C::kInfer, C::kInfer},
    {"Elu", C::kInfer, C::kInfer},
    {"Selu", C::kInfer, C::kInfer},
    {"BatchNormalization", C::kInfer, C::kInfer},
    {"AveragePool", C::kInfer, C::kInfer},
    {"GlobalAveragePool", C::kInfer, C::kInfer},
    {"Clip", C::kInfer, C::kInfer},
    // clear: data movement and order-preserving ops; exact in any type.
    {"Relu", C::kClear, C::kClear},
    {"MaxPool", C::kClear, C::kClear},
    {"GlobalMaxPool", C::kClear, C::kClear},
    {"ReduceMax", C::kClear, C::kClear},
    {"ReduceMin", C::kClear, C::kClear},
    {"Abs", C::kClear, C::kClear},
    {"Neg", C::kClear, C::kClear},
    {"Max", C::kClear, C::kClear},
    {"Min", C::kClear, C::kClear},
    {"Reshape", C::kClear, C::kClear},
    {"Flatten", C::kClear, C::kClear},
    {"Transpose", C::kClear, C::kClear},
    {"Concat", C::kClear, C::kClear},
    {"Split", C::kClear, C::kClear},
    {"Slice", C::kClear, C::kClear},
    {"Gather", C::kClear, C::kClear},
    {"Squeeze", C::kClear, C::kClear},
    {"Unsqueeze", C::kClear, C::kClear},
    {"Expand", C::kClear, C::kClear},
    {"Tile", C::kClear, C::kClear},
    {"Pad", C::kClear, C::kClear},
    {"Identity", C::kClear, C::kClear},
    {"Dropout", C::kClear, C::kClear},
    {"Where", C::kClear, C::kClear},
    {"Equal", C::kClear, C::kClear},
    {"Less", C::kClear, C::kClear},
    {"Greater", C::kClear, C::kClear},
    {"ArgMax", C::kClear, C::kClear},
    // fixed: the pass leaves these alone (their types are set by the model or are not float).
    {"Cast", C::kFixed, C::kFixed},
    {"Constant", C::kFixed, C::kFixed},
    {"ConstantOfShape", C::kFixed, C::kFixed},
    {"Shape", C::kFixed, C::kFixed},
    {"Size", C::kFixed, C::kFixed},
    {"Range", C::kFixed, C::kFixed},
    {"Not", C::kFixed, C::kFixed},
    {"And", C::kFixed, C::kFixed},
};

}  // namespace

const char* PrecisionClassName(PrecisionClass c) {
  switch (c) {
    case C::kAllow: return "allow";
    case C::kDeny: return "deny";
    case C::kInfer: return "infer";
    case C::kClear: return "clear";
    case C::kFixed: return "fixed";
  }
  return "?";
}

PrecisionPolicy PrecisionPolicy::Default(PrecisionPreset preset, DType low) {
  MT_CHECK(IsLowFloat(low)) << "low type must be f16 or bf16";
  PrecisionPolicy p;
  p.preset_ = preset;
  p.low_ = low;
  for (const Row& r : kTable) p.classes_[r.op] = low == DType::kBF16 ? r.bf16 : r.fp16;
  return p;
}

absl::Status PrecisionPolicy::AddFp32NodeRegex(const std::string& pattern) {
  try {
    fp32_nodes_.emplace_back(pattern);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad node regex '", pattern, "': ", e.what()));
  }
  return absl::OkStatus();
}

PrecisionClass PrecisionPolicy::ClassOf(const std::string& op_type) const {
  auto it = classes_.find(op_type);
  return it == classes_.end() ? C::kDeny : it->second;
}

bool PrecisionPolicy::PinnedFp32(const Node& n) const {
  for (const std::regex& re : fp32_nodes_)
    if (std::regex_search(n.name(), re)) return true;
  return false;
}

const char* PrecisionPresetName(PrecisionPreset p) {
  switch (p) {
    case PrecisionPreset::kFp32: return "fp32";
    case PrecisionPreset::kAmp: return "amp";
    case PrecisionPreset::kHalf: return "half";
  }
  return "?";
}

absl::StatusOr<PrecisionPreset> ParsePrecisionPreset(const std::string& s) {
  if (s == "fp32") return PrecisionPreset::kFp32;
  if (s == "amp") return PrecisionPreset::kAmp;
  if (s == "half") return PrecisionPreset::kHalf;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", s, "' (expected fp32, amp or half)"));
}

}  // namespace mixtrain
