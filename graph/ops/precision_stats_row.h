// The row ai.mixtrain.PrecisionStats writes per watched value (the precision debugger's op): its
// fields, in order. Part of the op's definition, so the shape rule, the passes that add the op and
// the kernels that fill it (kernels/common/precision_stats.h) agree on it.
#pragma once

namespace mixtrain {

enum PrecisionStatsField : int {
  kStatElements = 0,
  kStatMaxAbs,     // largest finite |x|
  kStatNan,
  kStatInf,
  kStatOverflow,   // finite, but rounds to inf in the range dtype
  kStatUnderflow,  // non-zero, but rounds to 0 in the range dtype (flushed)
  kStatSubnormal,  // lands among the range dtype's subnormals (precision lost)
  kStatZero,       // exactly zero
  kNumStatFields,
};

}  // namespace mixtrain
