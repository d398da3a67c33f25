// Helpers shared by the CPU reduction, softmax, normalization and loss kernels: dtype dispatch to
// the storage adapters of kernels/common/reduce.h, the [outer, axis, inner] view of a tensor
// around one axis, and reading small parameter tensors (scale, bias, weights) as float.
#pragma once

#include <algorithm>

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/reduce.h"
#include "kernels/registry.h"

namespace mixtrain::cpu {

// Calls fn(Io{}) for the storage adapter of a float dtype (fp32, fp16, bf16).
template <typename Fn>
absl::Status DispatchFloat(const KernelContext& ctx, DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(red::F32Io{}); return absl::OkStatus();
    case DType::kF16: fn(red::F16Io{}); return absl::OkStatus();
    case DType::kBF16: fn(red::BF16Io{}); return absl::OkStatus();
    default: return ctx.Error(absl::StrCat("unsupported dtype ", DTypeName(t)));
  }
}

// As DispatchFloat, plus f64, i32 and i64.
template <typename Fn>
absl::Status DispatchNumeric(const KernelContext& ctx, DType t, Fn&& fn) {
  switch (t) {
    case DType::kF64: fn(red::F64Io{}); return absl::OkStatus();
    case DType::kI32: fn(red::I32Io{}); return absl::OkStatus();
    case DType::kI64: fn(red::I64Io{}); return absl::OkStatus();
    default: return DispatchFloat(ctx, t, fn);
  }
}

// A tensor seen as [outer, n, inner] around `axis` (already normalized).
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisView ViewAroundAxis(const std::vector<int64_t>& dims, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (i < axis) v.outer *= dims[i];
    else if (i == axis) v.n = dims[i];
    else v.inner *= dims[i];
  }
  return v;
}

// A float, bf16, fp16 or f64 tensor's elements as float (parameters: scale, bias, stats, weights),
// into `out` (resized; no allocation when its capacity suffices).
inline void ToFloats(const TensorView& t, std::vector<float>& out) {
  const int64_t n = t.numel();
  out.resize(static_cast<size_t>(n));
  switch (t.dtype) {
    case DType::kF32: std::copy_n(t.as<float>(), n, out.data()); break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(t.as<uint16_t>()[i]);
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(t.as<uint16_t>()[i]);
      break;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(t.as<double>()[i]);
      break;
    default: MT_CHECK(false) << "ToFloats: not a float dtype: " << DTypeName(t.dtype);
  }
}
inline std::vector<float> ToFloatVector(const TensorView& t) {
  std::vector<float> out;
  ToFloats(t, out);
  return out;
}

// Writes element i of a float tensor of any float dtype (round-to-nearest-even for low types).
inline void StoreFloatAt(TensorView& t, int64_t i, float v) {
  switch (t.dtype) {
    case DType::kF32: t.as<float>()[i] = v; break;
    case DType::kF16: t.as<uint16_t>()[i] = FloatToHalf(v); break;
    case DType::kBF16: t.as<uint16_t>()[i] = FloatToBFloat16(v); break;
    case DType::kF64: t.as<double>()[i] = v; break;
    default: MT_CHECK(false) << "StoreFloatAt: not a float dtype: " << DTypeName(t.dtype);
  }
}

// Whether every tensor's dtype is one ToFloatVector/StoreFloatAt handle (user-facing check).
inline bool AllFloat(std::initializer_list<const TensorView*> ts) {
  for (const TensorView* t : ts)
    if (t != nullptr && !IsFloat(t->dtype)) return false;
  return true;
}

// An int32/int64 tensor's elements as int64 (axes, labels).
inline int64_t IntAt(const TensorView& t, int64_t i) {
  return t.dtype == DType::kI32 ? t.as<int32_t>()[i] : t.as<int64_t>()[i];
}

}  // namespace mixtrain::cpu
