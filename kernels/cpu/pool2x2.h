// Hand-vectorized loops of the 2x2/2 max pool and its gradient over one plain [H, W] plane: the
// pools of the training graph (NCHW; MaxPoolDisjoint2D in dnnl_pool.cc, MaxPoolGradDisjoint in
// grad_pool.cc), for AVX-512 (pool2x2_avx512.cc, 16 outputs per step) and AVX2
// (pool2x2_avx2.cc, 8). The `omp simd` loops they replace vectorized only over whole vectors of
// outputs, and a CNN's pooled rows are short (fashion_cnn's 14 and 7, CIFAR's 16 and 8): the
// scalar remainder, with a branch per window, was most of the time (bf16 MaxPoolGrad 2.4 ms of
// fashion_cnn's 9.4 ms step on AVX-512; fp32 MaxPoolGrad 16 ms of CIFAR's 83 ms under AVX2).
// Here the row's end is masked, with no scalar loop.
//
// Same results as those loops, bit for bit: each window's first maximum in scan order (a, b on
// row 2r; c, d on row 2r + 1), a NaN winning only as a window's first element; values and
// gradients are selected as stored bits, never rounded. Storage is fp32 or bf16 (uint16_t
// bits; widening bf16 to fp32 is exact and keeping the top 16 bits undoes it, so selecting
// widened values selects stored bits). Call the avx512 ones only when Avx512Enabled().
#pragma once

#include <cstdint>

namespace mixtrain::cpu {

#define MT_POOL2X2_DECLARE                                                                       \
  /* y[r][q] = max of x[2r..2r+1][2q..2q+1] for r < oh, q < ow; x is [>= 2 oh, w], w >= 2 ow. */ \
  void MaxPool2x2(const float* x, float* y, int64_t w, int64_t oh, int64_t ow);                  \
  void MaxPool2x2(const uint16_t* x, uint16_t* y, int64_t w, int64_t oh, int64_t ow);            \
  /* dx ([h, w], every element written): each window's dy at its first maximum, 0 elsewhere   \
     and outside the windows; with relu only where that maximum is > 0 (MaxPoolGrad relu=1). */ \
  void MaxPoolGrad2x2(const float* x, const float* dy, float* dx, int64_t h, int64_t w,        \
                      int64_t oh, int64_t ow, bool relu);                                        \
  void MaxPoolGrad2x2(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t h,          \
                      int64_t w, int64_t oh, int64_t ow, bool relu);

namespace avx512 {
MT_POOL2X2_DECLARE
}  // namespace avx512
namespace avx2 {
MT_POOL2X2_DECLARE
}  // namespace avx2

#undef MT_POOL2X2_DECLARE

}  // namespace mixtrain::cpu
