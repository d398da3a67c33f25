#include "graph/dtype.h"

#include "absl/strings/str_cat.h"

namespace mixtrain {
namespace {

// ONNX TensorProto.DataType values (onnx.proto).
enum OnnxType : int32_t {
  kOnnxUndefined = 0, kOnnxFloat = 1, kOnnxUint8 = 2, kOnnxInt8 = 3, kOnnxUint16 = 4,
  kOnnxInt16 = 5, kOnnxInt32 = 6, kOnnxInt64 = 7, kOnnxString = 8, kOnnxBool = 9,
  kOnnxFloat16 = 10, kOnnxDouble = 11, kOnnxUint32 = 12, kOnnxUint64 = 13, kOnnxBfloat16 = 16,
};

}  // namespace

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF64: case DType::kI64: return 8;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
    case DType::kUndefined: case DType::kString: return 0;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI8: return "i8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
    case DType::kString: return "string";
    case DType::kUndefined: return "undefined";
  }
  return "undefined";
}

bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64;
}
bool IsLowFloat(DType t) { return t == DType::kF16 || t == DType::kBF16; }

int32_t ToOnnxType(DType t) {
  switch (t) {
    case DType::kF32: return kOnnxFloat;
    case DType::kF16: return kOnnxFloat16;
    case DType::kBF16: return kOnnxBfloat16;
    case DType::kF64: return kOnnxDouble;
    case DType::kI8: return kOnnxInt8;
    case DType::kI32: return kOnnxInt32;
    case DType::kI64: return kOnnxInt64;
    case DType::kU8: return kOnnxUint8;
    case DType::kBool: return kOnnxBool;
    case DType::kString: return kOnnxString;
    case DType::kUndefined: return kOnnxUndefined;
  }
  return kOnnxUndefined;
}

absl::StatusOr<DType> FromOnnxType(int32_t onnx_type) {
  switch (onnx_type) {
    case kOnnxUndefined: return DType::kUndefined;
    case kOnnxFloat: return DType::kF32;
    case kOnnxFloat16: return DType::kF16;
    case kOnnxBfloat16: return DType::kBF16;
    case kOnnxDouble: return DType::kF64;
    case kOnnxInt8: return DType::kI8;
    case kOnnxInt32: return DType::kI32;
    case kOnnxInt64: return DType::kI64;
    case kOnnxUint8: return DType::kU8;
    case kOnnxBool: return DType::kBool;
    case kOnnxString: return DType::kString;
    default:
      return absl::UnimplementedError(
          absl::StrCat("ONNX element type ", onnx_type, " is not supported"));
  }
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  struct Alias { std::string_view name; DType type; };
  static constexpr Alias kAliases[] = {
      {"f32", DType::kF32},   {"fp32", DType::kF32},      {"float", DType::kF32},
      {"float32", DType::kF32}, {"f16", DType::kF16},     {"fp16", DType::kF16},
      {"float16", DType::kF16}, {"half", DType::kF16},    {"bf16", DType::kBF16},
      {"bfloat16", DType::kBF16}, {"f64", DType::kF64},   {"fp64", DType::kF64},
      {"double", DType::kF64}, {"float64", DType::kF64},  {"i8", DType::kI8},
      {"int8", DType::kI8},   {"i32", DType::kI32},       {"int32", DType::kI32},
      {"i64", DType::kI64},   {"int64", DType::kI64},     {"u8", DType::kU8},
      {"uint8", DType::kU8},  {"bool", DType::kBool},
  };
  for (const Alias& a : kAliases)
    if (a.name == name) return a.type;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", std::string(name), "'"));
}

}  // namespace mixtrain
