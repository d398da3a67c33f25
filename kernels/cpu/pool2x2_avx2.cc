// AVX2 2x2/2 max pool and its gradient (see pool2x2.h): 8 outputs per step, the row's end by
// maskload/maskstore (bf16 dY and Y, 16-bit lanes AVX2 cannot mask, through a small buffer).
// The build's baseline ISA is AVX2, so this file needs no target pragma.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/pool2x2.h"
#include "kernels/cpu/pool2x2_loops.h"

namespace mixtrain::cpu::avx2 {
namespace {

// A step of n <= 8 outputs: `out` masks n 32-bit lanes, `lo` and `hi` the 2n inputs of a row
// as two vectors of 8.
struct Step {
  int64_t n;
  bool full;
  __m256i out, lo, hi;
};

__m256i LaneMask(int64_t k) {  // the first k of 8 lanes
  static const int32_t kOnes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kOnes + 8 - k));
}

Step MakeStep(int64_t left) {
  Step s;
  s.n = std::min<int64_t>(left, 8);
  s.full = s.n == 8;
  s.out = LaneMask(s.n);
  s.lo = LaneMask(std::min<int64_t>(2 * s.n, 8));
  s.hi = LaneMask(std::max<int64_t>(2 * s.n - 8, 0));
  return s;
}

struct F32 {
  using T = float;
  // The even and odd elements of the 2n inputs at p (lanes past them read 0).
  static void Split(const float* p, const Step& s, __m256& ev, __m256& od) {
    const __m256 lo = s.full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, s.lo);
    const __m256 hi = s.full ? _mm256_loadu_ps(p + 8) : _mm256_maskload_ps(p + 8, s.hi);
    // Per 128-bit half [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the 64-bit pairs in order.
    ev = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0)));
    od = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  // Interleaves ev and od back into the 2n elements at p.
  static void Zip(float* p, const Step& s, __m256 ev, __m256 od) {
    const __m256 a = _mm256_unpacklo_ps(ev, od), b = _mm256_unpackhi_ps(ev, od);
    const __m256 lo = _mm256_permute2f128_ps(a, b, 0x20), hi = _mm256_permute2f128_ps(a, b, 0x31);
    if (s.full) {
      _mm256_storeu_ps(p, lo);
      _mm256_storeu_ps(p + 8, hi);
    } else {
      _mm256_maskstore_ps(p, s.lo, lo);
      _mm256_maskstore_ps(p + 8, s.hi, hi);
    }
  }
  static __m256 Load(const float* p, const Step& s) {
    return s.full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, s.out);
  }
  static void Store(float* p, const Step& s, __m256 v) {
    if (s.full) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, s.out, v);
  }
};

// A 32-bit lane of 2n packed bf16 inputs holds an even element in its low half and an odd one
// in its high half: shifts and masks split and join them, and the n lanes mask as 32-bit ones.
struct BF16 {
  using T = uint16_t;
  static __m256i High() { return _mm256_set1_epi32(static_cast<int>(0xffff0000u)); }

  static void Split(const uint16_t* p, const Step& s, __m256& ev, __m256& od) {
    const int* q = reinterpret_cast<const int*>(p);
    const __m256i v = s.full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                             : _mm256_maskload_epi32(q, s.out);
    ev = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    od = _mm256_castsi256_ps(_mm256_and_si256(v, High()));
  }
  static void Zip(uint16_t* p, const Step& s, __m256 ev, __m256 od) {
    const __m256i v = _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(od), High()),
                                      _mm256_srli_epi32(_mm256_castps_si256(ev), 16));
    if (s.full) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    else _mm256_maskstore_epi32(reinterpret_cast<int*>(p), s.out, v);
  }
  static __m256 Load(const uint16_t* p, const Step& s) {
    alignas(16) uint16_t buf[8] = {};
    if (!s.full) p = static_cast<const uint16_t*>(std::memcpy(buf, p, 2 * s.n));
    const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16));
  }
  static void Store(uint16_t* p, const Step& s, __m256 v) {
    const __m256i w = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
    // packus works per 128-bit half: [w0..w3 w0..w3 | w4..w7 w4..w7], then halves 0 and 2.
    const __m128i packed = _mm256_castsi256_si128(
        _mm256_permute4x64_epi64(_mm256_packus_epi32(w, w), _MM_SHUFFLE(3, 1, 2, 0)));
    if (s.full) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
    } else {
      alignas(16) uint16_t buf[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(buf), packed);
      std::memcpy(p, buf, 2 * s.n);
    }
  }
};

// The ISA policy of pool2x2_loops.h.
struct Avx2 {
  static constexpr int64_t kStep = 8;
  static Step MakeStep(int64_t left) { return avx2::MakeStep(left); }

  // One step's four window elements, and which of b, c, d took over as the running first
  // maximum (all-ones lanes).
  template <typename S>
  struct Windows {
    __m256 a, b, c, d, tb, tc, td;
    __m256 max;  // the first maximum, as stored (a NaN only when a is)

    Windows(const S&, const typename S::T* x0, const typename S::T* x1, const Step& s) {
      S::Split(x0, s, a, b);
      S::Split(x1, s, c, d);
      tb = _mm256_cmp_ps(b, a, _CMP_GT_OQ);
      max = _mm256_blendv_ps(a, b, tb);
      tc = _mm256_cmp_ps(c, max, _CMP_GT_OQ);
      max = _mm256_blendv_ps(max, c, tc);
      td = _mm256_cmp_ps(d, max, _CMP_GT_OQ);
      max = _mm256_blendv_ps(max, d, td);
    }
  };

  struct Routes {
    __m256 even0, odd0, even1, odd1;  // rows 2r and 2r + 1
  };
  template <typename W>
  static Routes Route(const W& win, __m256 g, bool relu) {
    if (relu) g = _mm256_and_ps(g, _mm256_cmp_ps(win.max, _mm256_setzero_ps(), _CMP_GT_OQ));
    const __m256 cd = _mm256_or_ps(win.tc, win.td), bcd = _mm256_or_ps(cd, win.tb);
    return {_mm256_andnot_ps(bcd, g), _mm256_andnot_ps(cd, _mm256_and_ps(win.tb, g)),
            _mm256_andnot_ps(win.td, _mm256_and_ps(win.tc, g)), _mm256_and_ps(win.td, g)};
  }
};

}  // namespace

MT_POOL2X2_DEFINE(Avx2)

}  // namespace mixtrain::cpu::avx2
