// Vector conversions between the low-precision storage types and fp32, for the places that
// widen or narrow whole rows: oneDNN staging (dnnl_common.h), the Cast kernel, and the blocked
// fp16 loops of the elementwise kernels. They run on every CPU of the build's x86-64-v3
// baseline: fp16 with F16C (vcvtph2ps / vcvtps2ph, round to nearest even, exact on subnormals),
// bf16 with integer shifts and round-to-nearest-even in AVX2 registers. Results are bit-identical
// to kernels/common/half.h's scalar functions, NaN payloads included; tests/kernels/convert_test.cc
// checks every 16-bit pattern and the fp32 rounding boundaries.
//
// Tails shorter than a vector go through an 8-lane stack buffer, so every element is converted
// by the same instructions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define MT_CONVERT_VECTOR 1
#else
#include "kernels/common/half.h"  // a generic build (-DMIXTRAIN_ARCH=): the scalar functions
#endif

namespace mixtrain::cpu {

#if MT_CONVERT_VECTOR

namespace convert_detail {

inline __m256i BFloat16RoundBits(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);  // 8 x u32, each < 2^16
}

// vcvtph2ps, with inf/NaN lanes rebuilt from their bits: F16C quiets signalling NaNs, half.h
// keeps the payload as it is.
inline __m256 WidenHalf(__m128i h) {
  const __m256 f = _mm256_cvtph_ps(h);
  const __m256i w = _mm256_cvtepu16_epi32(h);
  const __m256i exp = _mm256_and_si256(w, _mm256_set1_epi32(0x7c00));
  const __m256i special = _mm256_cmpeq_epi32(exp, _mm256_set1_epi32(0x7c00));
  const __m256i bits = _mm256_or_si256(
      _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
                      _mm256_set1_epi32(0x7f800000)),
      _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3ff)), 13));
  return _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(special));
}

inline __m128i PackLow16(__m256i v) {  // 8 x u32 (< 2^16) -> 8 x u16
  const __m256i p = _mm256_packus_epi32(v, v);  // per 128-bit lane: a0..a3 a0..a3 | b0..b3 b0..b3
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

}  // namespace convert_detail

inline void HalfToFloatRow(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, convert_detail::WidenHalf(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  if (i < n) {
    uint16_t h[8] = {};
    float f[8];
    std::memcpy(h, in + i, (n - i) * sizeof(uint16_t));
    _mm256_storeu_ps(f, convert_detail::WidenHalf(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))));
    std::memcpy(out + i, f, (n - i) * sizeof(float));
  }
}

inline void FloatToHalfRow(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  if (i < n) {
    float f[8] = {};
    uint16_t h[8];
    std::memcpy(f, in + i, (n - i) * sizeof(float));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h),
                     _mm256_cvtps_ph(_mm256_loadu_ps(f), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(out + i, h, (n - i) * sizeof(uint16_t));
  }
}

inline void BFloat16ToFloatRow(const uint16_t* in, float* out, int64_t n) {
  auto widen = [](const uint16_t* src, float* dst) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_slli_epi32(w, 16));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) widen(in + i, out + i);
  if (i < n) {
    uint16_t h[8] = {};
    float f[8];
    std::memcpy(h, in + i, (n - i) * sizeof(uint16_t));
    widen(h, f);
    std::memcpy(out + i, f, (n - i) * sizeof(float));
  }
}

inline void FloatToBFloat16Row(const float* in, uint16_t* out, int64_t n) {
  using namespace convert_detail;
  auto narrow = [](const float* src, uint16_t* dst) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), PackLow16(BFloat16RoundBits(_mm256_loadu_ps(src))));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) narrow(in + i, out + i);
  if (i < n) {
    float f[8] = {};
    uint16_t h[8];
    std::memcpy(f, in + i, (n - i) * sizeof(float));
    narrow(f, h);
    std::memcpy(out + i, h, (n - i) * sizeof(uint16_t));
  }
}

#else
inline void HalfToFloatRow(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}
inline void FloatToHalfRow(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}
inline void BFloat16ToFloatRow(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
}
inline void FloatToBFloat16Row(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBFloat16(in[i]);
}
#endif  // MT_CONVERT_VECTOR

// The same over whole tensors, split over the cores for large n.
void HalfToFloatN(const uint16_t* in, float* out, int64_t n);
void FloatToHalfN(const float* in, uint16_t* out, int64_t n);
void BFloat16ToFloatN(const uint16_t* in, float* out, int64_t n);
void FloatToBFloat16N(const float* in, uint16_t* out, int64_t n);

}  // namespace mixtrain::cpu
