// AVX-512 short-row kernels (see rows_avx512.h). The whole file is compiled for AVX-512
// (avx512_begin.h); callers check Avx512Enabled() first.
#include "kernels/cpu/rows_avx512.h"

#include <cmath>

#include "kernels/cpu/avx512_begin.h"

namespace mixtrain::cpu::avx512 {
namespace {

// --- loads and stores: fp32, or bf16 with exact round-to-nearest-even ------------------------

// Masked loads and stores run at half the rate of plain ones on some CPUs (AMD Zen 4: a bf16
// cast of a 38M-element weight took 10.6 ms masked, 5.3 plain), so a full vector (every lane
// in the row, all but a row's last) takes the plain instruction.
constexpr __mmask16 kFull = 0xffff;

__mmask16 TailMask(int64_t n, int64_t k) {
  const int64_t left = n - 16 * k;
  return left >= 16 ? kFull : __mmask16((1u << left) - 1);
}

// Lanes past the row read as 0 (bf16: the zero-masked load is already +0.0f, no blend).
__m512 LoadZero(const float* p, __mmask16 m) { return m == kFull ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p); }
__m512 LoadZero(const uint16_t* p, __mmask16 m) {
  const __m256i h = m == kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Lanes past the row read as `pad`.
__m512 Load(const float* p, __mmask16 m, __m512 pad) {
  return m == kFull ? _mm512_loadu_ps(p) : _mm512_mask_loadu_ps(pad, m, p);
}
__m512 Load(const uint16_t* p, __mmask16 m, __m512 pad) {
  return _mm512_mask_blend_ps(m, pad, LoadZero(p, m));
}

void Store(float* p, __mmask16 m, __m512 v) {
  if (m == kFull)
    _mm512_storeu_ps(p, v);
  else
    _mm512_mask_storeu_ps(p, m, v);
}
// FloatToBFloat16 of half.h, 16 lanes: NaN keeps its top bits and is made quiet; everything else
// (subnormals too) rounds to nearest even by adding 0x7fff plus the kept lowest bit.
void Store(uint16_t* p, __mmask16 m, __m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  const __m256i h = _mm512_cvtepi32_epi16(r);
  if (m == kFull)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  else
    _mm256_mask_storeu_epi16(p, m, h);
}

// --- math --------------------------------------------------------------------------------------

// fm::Exp (kernels/common/fastmath.h) on 16 lanes, same reduction and polynomial: below the
// smallest normal result 0, above 88.72 inf, NaN kept.
__m512 Exp(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.72283935546875f), lo = _mm512_set1_ps(-87.33654022216797f);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512 y = _mm512_scalef_ps(p, n);
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

constexpr int kMaxVec = kMaxNormRow / 16;

// Softmax of G rows held in v[g][0..K) (lanes past n are -inf), stored to y + g * n. A row is a
// chain of dependent steps (max, horizontal max, exp, horizontal sum, divide): G independent
// rows interleaved keep the FMA pipes busy where one row would wait on each step's latency.
template <typename T, int K, int G>
inline void SoftmaxGroup(__m512 (&v)[G][K], int64_t n, bool log, T* y) {
  __m512 mv[G], sum[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    __m512 mx = v[g][0];
#pragma GCC unroll 4
    for (int i = 1; i < K; ++i) mx = _mm512_max_ps(mx, v[g][i]);
    // A NaN anywhere makes the row NaN (max ignores it; the sum then carries it).
    mv[g] = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    sum[g] = _mm512_setzero_ps();
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
    for (int i = 0; i < K; ++i) {
      const __m512 e = _mm512_maskz_mov_ps(TailMask(n, i), Exp(_mm512_sub_ps(v[g][i], mv[g])));
      sum[g] = _mm512_add_ps(sum[g], e);
      v[g][i] = log ? _mm512_sub_ps(v[g][i], mv[g]) : e;
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    const float s = _mm512_reduce_add_ps(sum[g]);
    if (log) {
      const __m512 ls = _mm512_set1_ps(std::log(s));
#pragma GCC unroll 4
      for (int i = 0; i < K; ++i)
        Store(y + g * n + 16 * i, TailMask(n, i), _mm512_sub_ps(v[g][i], ls));
    } else {
      const __m512 inv = _mm512_set1_ps(1.0f / s);
#pragma GCC unroll 4
      for (int i = 0; i < K; ++i)
        Store(y + g * n + 16 * i, TailMask(n, i), _mm512_mul_ps(v[g][i], inv));
    }
  }
}

constexpr int kGroup = 4;

// Rows [0, rows): groups of kGroup, then single rows. load(v, r) fills row r's K vectors.
template <typename T, int K, typename LoadRow>
inline void SoftmaxRowsK(int64_t rows, int64_t n, bool log, T* y, const LoadRow& load) {
  int64_t r = 0;
  for (; r + kGroup <= rows; r += kGroup) {
    __m512 v[kGroup][K];
#pragma GCC unroll 4
    for (int g = 0; g < kGroup; ++g) load(v[g], r + g);
    SoftmaxGroup<T, K, kGroup>(v, n, log, y + r * n);
  }
  for (; r < rows; ++r) {
    __m512 v[1][K];
    load(v[0], r);
    SoftmaxGroup<T, K, 1>(v, n, log, y + r * n);
  }
}

// Picks K = ceil(n / 16) at compile time; make_load<K>() returns the row loader.
template <typename T, typename MakeLoad>
inline void SoftmaxRowsDispatch(int64_t rows, int64_t n, bool log, T* y, const MakeLoad& make) {
  switch ((n + 15) / 16) {
    case 1: return SoftmaxRowsK<T, 1>(rows, n, log, y, make.template operator()<1>());
    case 2: return SoftmaxRowsK<T, 2>(rows, n, log, y, make.template operator()<2>());
    case 3: return SoftmaxRowsK<T, 3>(rows, n, log, y, make.template operator()<3>());
    default: return SoftmaxRowsK<T, 4>(rows, n, log, y, make.template operator()<4>());
  }
}

template <typename T>
void SoftmaxRowsT(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  const __m512 pad = _mm512_set1_ps(-INFINITY);
  SoftmaxRowsDispatch(rows, n, log, y, [&]<int K>() {
    return [=](__m512(&v)[K], int64_t r) {
#pragma GCC unroll 4
      for (int i = 0; i < K; ++i) v[i] = Load(x + r * n + 16 * i, TailMask(n, i), pad);
    };
  });
}

template <typename T>
void MaskedSoftmaxRowsT(const T* x, T* y, int64_t rows, int64_t n, const uint8_t* const* mask,
                        int64_t mask_inner, float scale, float fill) {
  const __m512 pad = _mm512_set1_ps(-INFINITY), sv = _mm512_set1_ps(scale);
  const __m512 fv = _mm512_set1_ps(fill);
  SoftmaxRowsDispatch(rows, n, false, y, [&]<int K>() {
    return [=](__m512(&v)[K], int64_t r) {
      const uint8_t* mr = mask[r];
      const __mmask16 all = mask_inner == 0 && mr[0] == 0 ? 0 : 0xffff;
#pragma GCC unroll 4
      for (int i = 0; i < K; ++i) {
        const __mmask16 t = TailMask(n, i);
        __mmask16 keep = all;
        if (mask_inner != 0) {
          const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(t, mr + 16 * i));
          keep = _mm512_test_epi32_mask(b, b);
        }
        const __m512 xs = _mm512_mul_ps(Load(x + r * n + 16 * i, t, pad), sv);
        v[i] = _mm512_mask_blend_ps(keep & t, _mm512_mask_mov_ps(pad, t, fv), xs);
      }
    };
  });
}

// dx = scale * y * (dy - sum(dy * y)) per row (SoftmaxGrad in softmax.cc, same order of
// operations), 0 where the row's mask is 0; a row's dy and y stay in registers between the
// dot product and the store. mask null: no mask.
template <typename T>
void SoftmaxGradRowsT(const T* dy, const T* y, T* dx, int64_t rows, int64_t n, float scale,
                      const uint8_t* const* mask, int64_t mask_inner) {
  const int k = static_cast<int>((n + 15) / 16);
  const __m512 sv = _mm512_set1_ps(scale);
  __m512 g[kMaxSoftmaxRow / 16], o[kMaxSoftmaxRow / 16];
  for (int64_t r = 0; r < rows; ++r) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < k; ++i) {
      const __mmask16 t = TailMask(n, i);
      g[i] = LoadZero(dy + r * n + 16 * i, t);
      o[i] = LoadZero(y + r * n + 16 * i, t);
      acc = _mm512_fmadd_ps(g[i], o[i], acc);
    }
    const __m512 dot = _mm512_set1_ps(_mm512_reduce_add_ps(acc));
    const uint8_t* mr = mask != nullptr ? mask[r] : nullptr;
    const __mmask16 all = mr != nullptr && mask_inner == 0 && mr[0] == 0 ? 0 : 0xffff;
    for (int i = 0; i < k; ++i) {
      const __mmask16 t = TailMask(n, i);
      __mmask16 keep = all;
      if (mr != nullptr && mask_inner != 0) {
        const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(t, mr + 16 * i));
        keep = _mm512_test_epi32_mask(b, b);
      }
      const __m512 v = _mm512_mul_ps(_mm512_mul_ps(sv, o[i]), _mm512_sub_ps(g[i], dot));
      Store(dx + r * n + 16 * i, t, _mm512_maskz_mov_ps(keep, v));
    }
  }
}

template <typename T>
void LayerNormRowsT(const T* x, T* y, int64_t rows, int64_t n, const float* scale,
                    const float* bias, float eps, float* mean, float* inv) {
  const int k = static_cast<int>((n + 15) / 16);
  const __m512 zero = _mm512_setzero_ps();
  __m512 sc[kMaxVec], bi[kMaxVec], v[kMaxVec];
  for (int i = 0; i < k; ++i) {
    sc[i] = _mm512_maskz_loadu_ps(TailMask(n, i), scale + 16 * i);
    bi[i] = bias ? _mm512_maskz_loadu_ps(TailMask(n, i), bias + 16 * i) : zero;
  }
  const float rn = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    __m512 s = zero;
    for (int i = 0; i < k; ++i) {
      v[i] = LoadZero(x + r * n + 16 * i, TailMask(n, i));
      s = _mm512_add_ps(s, v[i]);
    }
    const float m = _mm512_reduce_add_ps(s) * rn;
    const __m512 mv = _mm512_set1_ps(m);
    __m512 q = zero;
    for (int i = 0; i < k; ++i) {
      v[i] = _mm512_maskz_sub_ps(TailMask(n, i), v[i], mv);  // two-pass: no cancellation
      q = _mm512_fmadd_ps(v[i], v[i], q);
    }
    const float var = _mm512_reduce_add_ps(q) * rn;
    const float iv = 1.0f / std::sqrt(var + eps);
    const __m512 ivv = _mm512_set1_ps(iv);
    for (int i = 0; i < k; ++i)
      Store(y + r * n + 16 * i, TailMask(n, i),
            _mm512_fmadd_ps(_mm512_mul_ps(v[i], ivv), sc[i], bi[i]));
    mean[r] = m;
    inv[r] = iv;
  }
}

}  // namespace

void FloatToBFloat16Row(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i, 0);
    Store(y + i, m, LoadZero(x + i, m));
  }
}

void SoftmaxRows(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  SoftmaxRowsT(x, y, rows, n, log);
}
void SoftmaxRows(const uint16_t* x, uint16_t* y, int64_t rows, int64_t n, bool log) {
  SoftmaxRowsT(x, y, rows, n, log);
}
void MaskedSoftmaxRows(const float* x, float* y, int64_t rows, int64_t n,
                       const uint8_t* const* mask, int64_t mask_inner, float scale, float fill) {
  MaskedSoftmaxRowsT(x, y, rows, n, mask, mask_inner, scale, fill);
}
void MaskedSoftmaxRows(const uint16_t* x, uint16_t* y, int64_t rows, int64_t n,
                       const uint8_t* const* mask, int64_t mask_inner, float scale, float fill) {
  MaskedSoftmaxRowsT(x, y, rows, n, mask, mask_inner, scale, fill);
}
void SoftmaxGradRows(const float* dy, const float* y, float* dx, int64_t rows, int64_t n,
                     float scale, const uint8_t* const* mask, int64_t mask_inner) {
  SoftmaxGradRowsT(dy, y, dx, rows, n, scale, mask, mask_inner);
}
void SoftmaxGradRows(const uint16_t* dy, const uint16_t* y, uint16_t* dx, int64_t rows, int64_t n,
                     float scale, const uint8_t* const* mask, int64_t mask_inner) {
  SoftmaxGradRowsT(dy, y, dx, rows, n, scale, mask, mask_inner);
}
void LayerNormRows(const float* x, float* y, int64_t rows, int64_t n, const float* scale,
                   const float* bias, float eps, float* mean, float* inv) {
  LayerNormRowsT(x, y, rows, n, scale, bias, eps, mean, inv);
}
void LayerNormRows(const uint16_t* x, uint16_t* y, int64_t rows, int64_t n, const float* scale,
                   const float* bias, float eps, float* mean, float* inv) {
  LayerNormRowsT(x, y, rows, n, scale, bias, eps, mean, inv);
}

}  // namespace mixtrain::cpu::avx512

#if defined(__clang__)
#pragma clang attribute pop
#endif
