// Vector conversions between the low-precision storage types and fp32, for the places that
// widen or narrow whole rows: oneDNN staging (dnnl_common.h), the Cast kernel, and the blocked
// fp16 loops of the elementwise kernels. They run on every CPU of the build's x86-64-v3
// baseline: fp16 with F16C (vcvtph2ps / vcvtps2ph, round to nearest even, exact on subnormals),
// bf16 with integer shifts and round-to-nearest-even in AVX2 registers. Results are bit-identical
// to graph/half.h's scalar functions, NaN payloads included; tests/kernels/convert_test.cc
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
#include "graph/half.h"  // a generic build (-DMIXTRAIN_ARCH=): the scalar functions
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


// Applies `convert8` (8 elements from `in` to `out`) along a row; the tail goes through
// zero-padded stack buffers, so it is converted by the same instructions as the body.
template <typename From, typename To, typename Convert8>
[[gnu::always_inline]] inline void ConvertRow(const From* in, To* out, int64_t n, Convert8 convert8) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) convert8(in + i, out + i);
  if (i < n) {
    From src[8] = {};
    To dst[8];
    std::memcpy(src, in + i, (n - i) * sizeof(From));
    convert8(src, dst);
    std::memcpy(out + i, dst, (n - i) * sizeof(To));
  }
}

inline const __m128i* Ptr128(const uint16_t* p) { return reinterpret_cast<const __m128i*>(p); }
inline __m128i* Ptr128(uint16_t* p) { return reinterpret_cast<__m128i*>(p); }

}  // namespace convert_detail

inline void HalfToFloatRow(const uint16_t* in, float* out, int64_t n) {
  using namespace convert_detail;
  ConvertRow(in, out, n, [](const uint16_t* s, float* d) {
    _mm256_storeu_ps(d, WidenHalf(_mm_loadu_si128(Ptr128(s))));
  });
}

inline void FloatToHalfRow(const float* in, uint16_t* out, int64_t n) {
  using namespace convert_detail;
  ConvertRow(in, out, n, [](const float* s, uint16_t* d) {
    _mm_storeu_si128(Ptr128(d), _mm256_cvtps_ph(_mm256_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT));
  });
}

inline void BFloat16ToFloatRow(const uint16_t* in, float* out, int64_t n) {
  using namespace convert_detail;
  ConvertRow(in, out, n, [](const uint16_t* s, float* d) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(Ptr128(s)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_slli_epi32(w, 16));
  });
}

inline void FloatToBFloat16Row(const float* in, uint16_t* out, int64_t n) {
  using namespace convert_detail;
  ConvertRow(in, out, n, [](const float* s, uint16_t* d) {
    _mm_storeu_si128(Ptr128(d), PackLow16(BFloat16RoundBits(_mm256_loadu_ps(s))));
  });
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
