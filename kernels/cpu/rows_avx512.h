// Hand-vectorized AVX-512 row kernels for the short rows of transformers: softmax over
// attention rows (32 or 64 scores, optionally masked and scaled: MaskedSoftmax) and its
// gradient, and layer normalization over hidden sizes up to 128. A row lives in a few zmm registers from load to
// store; the generic loops (softmax.cc, norm.cc) spend most of their time in the prologues,
// epilogues and horizontal reductions of `omp simd` loops that are only 2-4 vectors long.
// Storage is fp32 or bf16 (uint16_t bits, rounded to nearest even exactly like
// graph/half.h, NaN and subnormals included). Call only when Avx512Enabled().
#pragma once

#include <cstdint>

namespace mixtrain::cpu::avx512 {

inline constexpr int64_t kMaxSoftmaxRow = 64;

// y[i] = FloatToBFloat16(x[i]) (half.h), bit for bit: the store every bf16 kernel here uses.
void FloatToBFloat16Row(const float* x, uint16_t* y, int64_t n);
// SoftmaxGrad of rows [0, rows) of length n <= kMaxSoftmaxRow: dx = scale * y * (dy - sum(dy * y)),
// 0 where the mask is 0 (mask, mask_inner as MaskedSoftmaxRows; mask null: none).
void SoftmaxGradRows(const float* dy, const float* y, float* dx, int64_t rows, int64_t n,
                     float scale, const uint8_t* const* mask, int64_t mask_inner);
void SoftmaxGradRows(const uint16_t* dy, const uint16_t* y, uint16_t* dx, int64_t rows, int64_t n,
                     float scale, const uint8_t* const* mask, int64_t mask_inner);

inline constexpr int64_t kMaxNormRow = 128;

// Softmax (or log-softmax when `log`) of each of rows [0, rows) of length n <= kMaxSoftmaxRow.
void SoftmaxRows(const float* x, float* y, int64_t rows, int64_t n, bool log);
void SoftmaxRows(const uint16_t* x, uint16_t* y, int64_t rows, int64_t n, bool log);

// Rows [0, rows) of length n <= kMaxSoftmaxRow of softmax(mask ? x * scale : fill): mask[r]
// points at row r's n mask bytes (0/1), or at one byte for the whole row when mask_inner is 0.
void MaskedSoftmaxRows(const float* x, float* y, int64_t rows, int64_t n,
                       const uint8_t* const* mask, int64_t mask_inner, float scale, float fill);
void MaskedSoftmaxRows(const uint16_t* x, uint16_t* y, int64_t rows, int64_t n,
                       const uint8_t* const* mask, int64_t mask_inner, float scale, float fill);

// LayerNormalization of rows [0, rows) of length n <= kMaxNormRow: y = (x - mean) * inv * scale
// (+ bias when not null) with inv = 1 / sqrt(var + eps); mean[r] and inv[r] are written.
void LayerNormRows(const float* x, float* y, int64_t rows, int64_t n, const float* scale,
                   const float* bias, float eps, float* mean, float* inv);
void LayerNormRows(const uint16_t* x, uint16_t* y, int64_t rows, int64_t n, const float* scale,
                   const float* bias, float eps, float* mean, float* inv);

}  // namespace mixtrain::cpu::avx512
