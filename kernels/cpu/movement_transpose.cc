// The CPU transpose engine (TransposeCopy in movement_util.h). After merging dims that stay
// contiguous, a permutation whose innermost output dim is also innermost in the input is a strided
// copy of contiguous runs; any other is a batch of 2-D transposes (NCHW<->NHWC, attention's
// last-two swap, plain matrices), done in 8x8 register tiles: AVX shuffles for 4-byte elements
// where the CPU has AVX, SSE2 unpacks for 2-byte elements (fp16/bf16), scalar otherwise. Tiles are
// pure bit moves, so every dtype of that size shares them.
#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/movement_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu_movement {
namespace {

// Every tile below computes dst[i * dst_ld + j] = src[i + j * src_ld] for i, j < 8.
template <typename T>
void Tile8x8Scalar(T* dst, const T* src, int64_t dst_ld, int64_t src_ld) {
  T buf[8][8];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 8; ++i) buf[i][j] = src[i + j * src_ld];
  for (int i = 0; i < 8; ++i) std::memcpy(dst + i * dst_ld, buf[i], 8 * sizeof(T));
}

#if defined(__x86_64__)
bool CpuHasAvx() {
  static const bool has = __builtin_cpu_supports("avx");
  return has;
}

__attribute__((target("avx"))) void Tile8x8Avx(uint32_t* dst_u, const uint32_t* src_u,
                                               int64_t dst_ld, int64_t src_ld) {
  auto* dst = reinterpret_cast<float*>(dst_u);
  auto* src = reinterpret_cast<const float*>(src_u);
  __m256 r[8], t[8], s[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + j * src_ld);
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k) {
    s[4 * k + 0] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
    s[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
    s[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    s[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * dst_ld, _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dst_ld, _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
  }
}

void Tile8x8Sse2(uint16_t* dst, const uint16_t* src, int64_t dst_ld, int64_t src_ld) {
  __m128i a[8], b[8], c[8];
  for (int j = 0; j < 8; ++j)
    a[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j * src_ld));
  for (int k = 0; k < 4; ++k) {  // b[2k], b[2k+1]: columns 0-3 and 4-7 of rows 2k, 2k+1
    b[2 * k] = _mm_unpacklo_epi16(a[2 * k], a[2 * k + 1]);
    b[2 * k + 1] = _mm_unpackhi_epi16(a[2 * k], a[2 * k + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3 (h = 0) and 4-7 (h = 1)
    const int o = 4 * h;
    c[o + 0] = _mm_unpacklo_epi32(b[o + 0], b[o + 2]);  // columns 0, 1
    c[o + 1] = _mm_unpackhi_epi32(b[o + 0], b[o + 2]);  // columns 2, 3
    c[o + 2] = _mm_unpacklo_epi32(b[o + 1], b[o + 3]);  // columns 4, 5
    c[o + 3] = _mm_unpackhi_epi32(b[o + 1], b[o + 3]);  // columns 6, 7
  }
  for (int k = 0; k < 4; ++k) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * k) * dst_ld),
                     _mm_unpacklo_epi64(c[k], c[k + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * k + 1) * dst_ld),
                     _mm_unpackhi_epi64(c[k], c[k + 4]));
  }
}
#endif

template <typename T>
void Tile8x8(T* dst, const T* src, int64_t dst_ld, int64_t src_ld) {
#if defined(__x86_64__)
  if constexpr (sizeof(T) == 4) {
    if (CpuHasAvx()) return Tile8x8Avx(dst, src, dst_ld, src_ld);
  } else if constexpr (sizeof(T) == 2) {
    return Tile8x8Sse2(dst, src, dst_ld, src_ld);
  }
#endif
  Tile8x8Scalar(dst, src, dst_ld, src_ld);
}

// Rows [r0, r1) of dst[r * dst_ld + c] = src[r + c * src_ld], all `cols` columns: full 8x8 tiles,
// then the ragged right and bottom edges element by element.
template <typename T>
void TransposeRows(T* dst, const T* src, int64_t r0, int64_t r1, int64_t cols, int64_t dst_ld,
                   int64_t src_ld) {
  int64_t r = r0;
  for (; r + 8 <= r1; r += 8) {
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) Tile8x8(dst + r * dst_ld + c, src + r + c * src_ld, dst_ld, src_ld);
    for (int64_t i = r; i < r + 8; ++i)
      for (int64_t cc = c; cc < cols; ++cc) dst[i * dst_ld + cc] = src[i + cc * src_ld];
  }
  for (; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * dst_ld + c] = src[r + c * src_ld];
}

// Output-order layout `l` whose innermost dim L reads with stride l.strides[L] != 1 and whose dim
// j reads with stride 1: every other dim is a batch loop around a 2-D transpose of (j, L).
template <typename T>
void BatchedTranspose(T* dst, const T* src, const Layout& l, int64_t j) {
  const int64_t rank = static_cast<int64_t>(l.dims.size());
  const int64_t L = rank - 1;
  DimVec dst_strides(rank);
  for (int64_t d = rank - 1, s = 1; d >= 0; --d) {
    dst_strides[d] = s;
    s *= l.dims[d];
  }
  DimVec bdims, bsrc, bdst;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == j || d == L) continue;
    bdims.push_back(l.dims[d]);
    bsrc.push_back(l.strides[d]);
    bdst.push_back(dst_strides[d]);
  }
  const int64_t rows = l.dims[j], cols = l.dims[L];
  const int64_t src_ld = l.strides[L], dst_ld = dst_strides[j];
  int64_t batch = 1;
  for (int64_t d : bdims) batch *= d;
  // Work items are strips of 32 rows: big enough to amortize, small enough to balance threads.
  constexpr int64_t kStrip = 32;
  const int64_t strips = (rows + kStrip - 1) / kStrip;
  ParallelFor(batch * strips, RowGrain(kStrip * cols * sizeof(T)), [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      const int64_t o = w / strips, r0 = (w % strips) * kStrip;
      TransposeRows(dst + OffsetOf(o, bdims, bdst), src + OffsetOf(o, bdims, bsrc), r0,
                    std::min(r0 + kStrip, rows), cols, dst_ld, src_ld);
    }
  });
}

}  // namespace

void TransposeCopy(void* dst, const void* src, size_t esize, Dims in_dims, Dims perm) {
  const DimVec in_strides = StridesOf(in_dims);
  DimVec dims, strides;
  for (int64_t p : perm) {
    dims.push_back(in_dims[p]);
    strides.push_back(in_strides[p]);
  }
  Layout l = Simplify(dims, strides);
  if (l.empty) return;
  auto unit = std::find(l.strides.begin(), l.strides.end(), 1);
  if (l.dims.size() < 2 || l.strides.back() == 1 || unit == l.strides.end() ||
      (esize != 1 && esize != 2 && esize != 4 && esize != 8))
    return StridedCopy(dst, src, esize, l.dims, l.strides);
  const int64_t j = unit - l.strides.begin();
  switch (esize) {
    case 1: return BatchedTranspose(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), l, j);
    case 2: return BatchedTranspose(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), l, j);
    case 4: return BatchedTranspose(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), l, j);
    default: return BatchedTranspose(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), l, j);
  }
}

}  // namespace mixtrain::cpu_movement
