// One element of a float buffer whose type is known only at run time (f32, bf16 or f16): read as
// float, or written from float rounding to nearest even. For scalar loops over small tensors
// (weights, pooled maps); hot loops dispatch on the type once instead.
#pragma once

#include <cstdint>

#include "graph/dtype.h"
#include "graph/half.h"

namespace mixtrain::cpu {

inline float LoadAsFloat(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kBF16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    default:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
  }
}

inline void StoreFromFloat(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(p)[i] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16(v);
      break;
    default:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(v);
  }
}

}  // namespace mixtrain::cpu
