// AVX-512 2x2/2 max pool and its gradient (see pool2x2.h), 16 outputs per step. The whole file
// is compiled for AVX-512 (avx512_begin.h); callers check Avx512Enabled() first.
#include "kernels/cpu/pool2x2.h"

#include <algorithm>  // before the target pragma: the library's std code stays baseline

#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/pool2x2_loops.h"

namespace mixtrain::cpu::avx512 {
namespace {

// A step of up to 16 outputs: `out` masks them, `pair` (bf16) their 2n inputs of a row, `lo` and
// `hi` (fp32) the same 2n inputs as two vectors of 16.
struct Masks {
  __mmask16 out, lo, hi;
  __mmask32 pair;
};

Masks StepMasks(int64_t n) {
  const int64_t k = std::min<int64_t>(n, 16);
  Masks m;
  m.out = static_cast<__mmask16>((1u << k) - 1);
  m.pair = static_cast<__mmask32>(k == 16 ? ~0u : (1u << (2 * k)) - 1);
  m.lo = static_cast<__mmask16>(m.pair);
  m.hi = static_cast<__mmask16>(m.pair >> 16);
  return m;
}

constexpr int kEven[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
constexpr int kOdd[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
constexpr int kZipLo[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
constexpr int kZipHi[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// Storage policies. Both hold 16 values per vector as fp32: bf16 widened, which is exact and
// undone exactly by keeping the top 16 bits, so selecting widened values selects stored bits.
struct F32 {
  using T = float;
  __m512i even, odd, zip_lo, zip_hi;
  F32()
      : even(_mm512_loadu_si512(kEven)), odd(_mm512_loadu_si512(kOdd)),
        zip_lo(_mm512_loadu_si512(kZipLo)), zip_hi(_mm512_loadu_si512(kZipHi)) {}

  // The even and odd elements of the 2n inputs at p (lanes past them read 0).
  void Split(const float* p, const Masks& m, __m512& ev, __m512& od) const {
    const __m512 lo = _mm512_maskz_loadu_ps(m.lo, p), hi = _mm512_maskz_loadu_ps(m.hi, p + 16);
    ev = _mm512_permutex2var_ps(lo, even, hi);
    od = _mm512_permutex2var_ps(lo, odd, hi);
  }
  // Interleaves ev and od back into the 2n elements at p.
  void Zip(float* p, const Masks& m, __m512 ev, __m512 od) const {
    _mm512_mask_storeu_ps(p, m.lo, _mm512_permutex2var_ps(ev, zip_lo, od));
    _mm512_mask_storeu_ps(p + 16, m.hi, _mm512_permutex2var_ps(ev, zip_hi, od));
  }
  static __m512 Load(const float* p, const Masks& m) { return _mm512_maskz_loadu_ps(m.out, p); }
  static void Store(float* p, const Masks& m, __m512 v) { _mm512_mask_storeu_ps(p, m.out, v); }
};

// A 32-bit lane of 2n packed bf16 inputs holds an even element in its low half and an odd one
// in its high half: shifts and masks split and join them, no permutes.
struct BF16 {
  using T = uint16_t;
  __m512i high;
  BF16() : high(_mm512_set1_epi32(static_cast<int>(0xffff0000u))) {}

  void Split(const uint16_t* p, const Masks& m, __m512& ev, __m512& od) const {
    const __m512i v = _mm512_maskz_loadu_epi16(m.pair, p);
    ev = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    od = _mm512_castsi512_ps(_mm512_and_si512(v, high));
  }
  void Zip(uint16_t* p, const Masks& m, __m512 ev, __m512 od) const {
    const __m512i v = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(od), high),
                                      _mm512_srli_epi32(_mm512_castps_si512(ev), 16));
    _mm512_mask_storeu_epi16(p, m.pair, v);
  }
  static __m512 Load(const uint16_t* p, const Masks& m) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m.out, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static void Store(uint16_t* p, const Masks& m, __m512 v) {
    _mm256_mask_storeu_epi16(p, m.out,
                             _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
  }
};

// The ISA policy of pool2x2_loops.h.
struct Avx512 {
  static constexpr int64_t kStep = 16;
  static Masks MakeStep(int64_t left) { return StepMasks(left); }

  // One step's four window elements, and which of b, c, d took over as the running first
  // maximum.
  template <typename S>
  struct Windows {
    __m512 a, b, c, d;
    __mmask16 tb, tc, td;
    __m512 max;  // the first maximum, as stored (a NaN only when a is)

    Windows(const S& s, const typename S::T* x0, const typename S::T* x1, const Masks& m) {
      s.Split(x0, m, a, b);
      s.Split(x1, m, c, d);
      tb = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
      max = _mm512_mask_blend_ps(tb, a, b);
      tc = _mm512_cmp_ps_mask(c, max, _CMP_GT_OQ);
      max = _mm512_mask_blend_ps(tc, max, c);
      td = _mm512_cmp_ps_mask(d, max, _CMP_GT_OQ);
      max = _mm512_mask_blend_ps(td, max, d);
    }
  };

  struct Routes {
    __m512 even0, odd0, even1, odd1;  // rows 2r and 2r + 1
  };
  template <typename W>
  static Routes Route(const W& win, __m512 g, bool relu) {
    if (relu) g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(win.max, _mm512_setzero_ps(), _CMP_GT_OQ), g);
    const __mmask16 not_d = ~win.td, not_cd = not_d & ~win.tc;
    return {_mm512_maskz_mov_ps(not_cd & ~win.tb, g), _mm512_maskz_mov_ps(not_cd & win.tb, g),
            _mm512_maskz_mov_ps(not_d & win.tc, g), _mm512_maskz_mov_ps(win.td, g)};
  }
};

}  // namespace

MT_POOL2X2_DEFINE(Avx512)

}  // namespace mixtrain::cpu::avx512

#if defined(__clang__)
#pragma clang attribute pop
#endif
