// The statistics the precision debugger gathers of one tensor (ai.mixtrain.PrecisionStats): one
// f32 row per watched value, measured against the range of the dtype the value has, or, for the
// input of a Cast to a low type, of the dtype it is cast to (then overflow and underflow are exact:
// they count the values the conversion turns into inf or 0).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "graph/dtype.h"
#include "graph/ops/precision_stats_row.h"

namespace mixtrain {

// Where a dtype's values overflow, flush to zero and become subnormal, for round-to-nearest.
struct StatsRange {
  float overflow_at;      // |x| >= this rounds to inf
  float underflow_below;  // 0 < |x| < this rounds to 0
  float normal_min;       // |x| < this (and not flushed) is subnormal
};

inline StatsRange StatsRangeOf(DType t) {
  switch (t) {
    case DType::kF16:  // max 65504, ulp there 32; smallest subnormal 2^-24, normal 2^-14
      return {65520.0f, std::ldexp(1.0f, -25), std::ldexp(1.0f, -14)};
    case DType::kBF16:  // max 0x7F7F, rounds up from 0x7F7F8000; subnormals from 2^-133
      return {3.3961775e38f, std::ldexp(1.0f, -134), std::ldexp(1.0f, -126)};
    default:  // f32 (and f64 measured as f32): no overflow or flush beyond what is there
      return {std::numeric_limits<float>::infinity(), 0.0f, std::numeric_limits<float>::min()};
  }
}

// Counts of one block of values; merged across threads, then written as the f32 row.
struct StatsAccumulator {
  int64_t elements = 0, nan = 0, inf = 0, overflow = 0, underflow = 0, subnormal = 0, zero = 0;
  float max_abs = 0;

  void Add(float v, const StatsRange& r) {
    float a = std::fabs(v);
    if (std::isnan(v)) {
      ++nan;
    } else if (std::isinf(v)) {
      ++inf;
    } else {
      max_abs = a > max_abs ? a : max_abs;
      overflow += a >= r.overflow_at;
      zero += a == 0.0f;
      underflow += a != 0.0f && a < r.underflow_below;
      subnormal += a >= r.underflow_below && a != 0.0f && a < r.normal_min;
    }
  }
  void Merge(const StatsAccumulator& o) {
    elements += o.elements;
    nan += o.nan;
    inf += o.inf;
    overflow += o.overflow;
    underflow += o.underflow;
    subnormal += o.subnormal;
    zero += o.zero;
    max_abs = o.max_abs > max_abs ? o.max_abs : max_abs;
  }
  static StatsAccumulator FromRow(const float* row) {
    StatsAccumulator a;
    a.elements = static_cast<int64_t>(row[kStatElements]);
    a.max_abs = row[kStatMaxAbs];
    a.nan = static_cast<int64_t>(row[kStatNan]);
    a.inf = static_cast<int64_t>(row[kStatInf]);
    a.overflow = static_cast<int64_t>(row[kStatOverflow]);
    a.underflow = static_cast<int64_t>(row[kStatUnderflow]);
    a.subnormal = static_cast<int64_t>(row[kStatSubnormal]);
    a.zero = static_cast<int64_t>(row[kStatZero]);
    return a;
  }
  // Nothing inf or NaN, and nothing that becomes inf in the range dtype (a Cast's input).
  bool finite() const { return nan == 0 && inf == 0 && overflow == 0; }
  // Counts are exact up to 2^24 elements per tensor (they travel as f32); beyond, fractions are.
  void Write(float* row) const {
    row[kStatElements] = static_cast<float>(elements);
    row[kStatMaxAbs] = max_abs;
    row[kStatNan] = static_cast<float>(nan);
    row[kStatInf] = static_cast<float>(inf);
    row[kStatOverflow] = static_cast<float>(overflow);
    row[kStatUnderflow] = static_cast<float>(underflow);
    row[kStatSubnormal] = static_cast<float>(subnormal);
    row[kStatZero] = static_cast<float>(zero);
  }
};

}  // namespace mixtrain
