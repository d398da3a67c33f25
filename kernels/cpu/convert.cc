#include "kernels/cpu/convert.h"

#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {

// Conversions move 6 bytes per element and do one or two instructions of work on it: worth a
// second thread only on large tensors.
static constexpr int64_t kConvertGrain = 1 << 16;

void HalfToFloatN(const uint16_t* in, float* out, int64_t n) {
  ParallelFor(n, kConvertGrain, [&](int64_t b, int64_t e) { HalfToFloatRow(in + b, out + b, e - b); });
}
void FloatToHalfN(const float* in, uint16_t* out, int64_t n) {
  ParallelFor(n, kConvertGrain, [&](int64_t b, int64_t e) { FloatToHalfRow(in + b, out + b, e - b); });
}
void BFloat16ToFloatN(const uint16_t* in, float* out, int64_t n) {
  ParallelFor(n, kConvertGrain,
              [&](int64_t b, int64_t e) { BFloat16ToFloatRow(in + b, out + b, e - b); });
}
void FloatToBFloat16N(const float* in, uint16_t* out, int64_t n) {
  ParallelFor(n, kConvertGrain,
              [&](int64_t b, int64_t e) { FloatToBFloat16Row(in + b, out + b, e - b); });
}

}  // namespace mixtrain::cpu
