// Element types of the IR and their ONNX codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace mixtrain {

enum class DType : uint8_t {
  kUndefined = 0,
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kI32,
  kI64,
  kU8,
  kBool,
  kString,  // only in graphs we import; nothing executes it
};

// Bytes per element; 0 for kUndefined and kString.
size_t DTypeSize(DType t);
// "f32", "f16", "bf16", "f64", "i8", "i32", "i64", "u8", "bool", "string", "undefined".
const char* DTypeName(DType t);
bool IsFloat(DType t);  // f32, f16, bf16, f64
bool IsLowFloat(DType t);  // f16, bf16
// ONNX TensorProto.DataType code (FLOAT=1, ...). kUndefined maps to 0.
int32_t ToOnnxType(DType t);
// Fails for ONNX types the IR has no DType for (e.g. complex64, float8).
absl::StatusOr<DType> FromOnnxType(int32_t onnx_type);
// Accepts the names of DTypeName plus "fp32", "fp16", "bf16", "float", "float16", "bfloat16", "int64"...
absl::StatusOr<DType> ParseDType(std::string_view name);

}  // namespace mixtrain
