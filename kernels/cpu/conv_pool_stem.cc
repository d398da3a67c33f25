// The stem conv + max pool (conv_pool_stem.h), hand-written because nothing in oneDNN 2.6 fuses
// them: it has no pooling post-op, so a conv over an image's 1-4 channels writes its whole
// full-resolution map and the pool reads it back. That round trip is the cost, not the
// arithmetic: fashion_cnn's 1->32 3x3 conv + Relu at batch 64 writes 6.4 MB (oneDNN
// jit:avx512_core 0.156 ms) that the 2x2 pool reads back (0.065 ms), for only 0.9 M zmm FMAs.
//
// Here each task is one pooled output row of one image and 16-channel block. The image is
// copied once per thread into a zero-padded fp32 plane (so the inner loops have no bounds
// checks and any input dtype or pad works), then a tile of P pooled pixels keeps its 2 x 2P conv
// outputs in zmm accumulators: per tap one weight vector load and 4P FMAs with a broadcast
// input scalar. The pool is the max over the accumulators; the bias is added after it
// (rounding is monotonic, so max(a_i) + b == max(a_i + b) exactly) and a Relu is a max with 0.
// Measured on that stem (EPYC, one core): 0.19-0.21 ms, ~80% of the core's FMA peak (a pure
// zmm FMA loop: 7.4 G/s); the conv-rows-then-pool loops of conv_pool.cc take 0.34 ms. Winograd
// F(2x2, 3x3) would need 16 FMAs instead of 36 per pooled pixel, but with one input channel its
// output transform (24 adds) eats the saving.
#include "kernels/cpu/conv_pool_stem.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "graph/check.h"
#include "graph/half.h"
#include "kernels/cpu/float_element.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/rows_avx512.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

constexpr int64_t kMaxFastChannels = 4;
constexpr int64_t kMaxFastKernel = 7;
constexpr int kMaxTile = 6;  // pooled pixels per tile: 2 x 12 accumulators of 32 zmm
constexpr int64_t kPlainRun = 4;  // conv outputs the plain path computes together (8 ymm)

// The padded image plane [C, hp, wp]: the rows and columns the computed conv outputs read,
// pads included. `cols` conv columns are computed per row: those the pool reads, rounded up to
// whole runs of the plain path.
struct Padded {
  int64_t hp, wp, cols;
};

Padded PaddedSize(const StemGeometry& g) {
  const int64_t used_h = (g.qh() - 1) * g.psh + g.pkh;  // conv rows the pool reads
  const int64_t used_w = (g.qw() - 1) * g.psw + g.pkw;
  const int64_t cols = (used_w + kPlainRun - 1) / kPlainRun * kPlainRun;
  return {(used_h - 1) * g.sh + g.kh, (cols - 1) * g.sw + g.kw, cols};
}

// Image `img` of X into dst [C, hp, wp], zeros where the conv reads padding.
void PadImage(const StemGeometry& g, const Padded& pd, const void* x, DType x_type, int64_t img,
              float* dst) {
  std::fill(dst, dst + g.c * pd.hp * pd.wp, 0.0f);
  const int64_t rows = std::min(g.h, pd.hp - g.pt), cols = std::min(g.w, pd.wp - g.pl);
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src = ((img * g.c + c) * g.h + r) * g.w;
      float* d = dst + (c * pd.hp + r + g.pt) * pd.wp + g.pl;
      if (x_type == DType::kF32) {
        std::copy_n(static_cast<const float*>(x) + src, cols, d);
      } else {
        for (int64_t i = 0; i < cols; ++i) d[i] = LoadAsFloat(x_type, x, src + i);
      }
    }
}

// 8 floats, a ymm register: half an output block. (A 16-float GCC vector is lowered to ymm
// halves through the stack on the AVX2 baseline, 20x slower.)
typedef float V8 __attribute__((vector_size(8 * sizeof(float))));

inline V8 Load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One pooled row (qw pixels of 16 channels) from the padded image, any pool window: the pool's
// conv rows (conv columns rounded up to kPlainRun, bias not yet added) into `rows`, then their
// window maxima. The plain C++ path, for CPUs without AVX-512 and the pools it does not take.
inline void PooledRowPlain(const StemGeometry& g, const Padded& pd, const float* xp,
                           const float* w, const float* bias, float floor, int64_t qy,
                           float* rows, float* out) {
  const int64_t cols = pd.cols, sw = g.sw;
  for (int64_t py = 0; py < g.pkh; ++py) {
    float* row = rows + py * cols * kStemBlock;
    const int64_t oy = qy * g.psh + py;
    for (int64_t ox0 = 0; ox0 < cols; ox0 += kPlainRun) {
      // Named accumulators (4 outputs x 2 halves) and scalar input loads: with arrays, or loads
      // indexed by k * sw in a loop, GCC keeps them on the stack.
      V8 a0 = {}, b0 = {}, a1 = {}, b1 = {}, a2 = {}, b2 = {}, a3 = {}, b3 = {};
      const float* wt = w;
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const float* xr = xp + (c * pd.hp + oy * g.sh + ky) * pd.wp + ox0 * sw;
          for (int64_t kx = 0; kx < g.kw; ++kx, wt += kStemBlock) {
            const V8 lo = Load8(wt), hi = Load8(wt + 8);
            const float* xk = xr + kx;
            const float x0 = xk[0], x1 = xk[sw], x2 = xk[2 * sw], x3 = xk[3 * sw];
            a0 += x0 * lo, b0 += x0 * hi;
            a1 += x1 * lo, b1 += x1 * hi;
            a2 += x2 * lo, b2 += x2 * hi;
            a3 += x3 * lo, b3 += x3 * hi;
          }
        }
      float* dst = row + ox0 * kStemBlock;
      for (const V8& v : {a0, b0, a1, b1, a2, b2, a3, b3}) {
        std::memcpy(dst, &v, sizeof(v));
        dst += 8;
      }
    }
  }
  for (int64_t qx = 0; qx < g.qw(); ++qx) {
    float best[kStemBlock];
    std::fill(best, best + kStemBlock, -INFINITY);
    for (int64_t py = 0; py < g.pkh; ++py)
      for (int64_t px = 0; px < g.pkw; ++px) {
        const float* v = rows + (py * cols + qx * g.psw + px) * kStemBlock;
        for (int64_t j = 0; j < kStemBlock; ++j) best[j] = std::max(best[j], v[j]);
      }
    for (int64_t j = 0; j < kStemBlock; ++j)
      out[qx * kStemBlock + j] = std::max(best[j] + bias[j], floor);
  }
}

// The plain path compiled for the baseline ISA and for AVX-512 (the pools the tiles below do
// not take, on CPUs that have it).
void PooledRowPlainBaseline(const StemGeometry& g, const Padded& pd, const float* xp,
                            const float* w, const float* bias, float floor, int64_t qy,
                            float* rows, float* out) {
  PooledRowPlain(g, pd, xp, w, bias, floor, qy, rows, out);
}
MT_TARGET_AVX512 void PooledRowPlainAvx512(const StemGeometry& g, const Padded& pd,
                                           const float* xp, const float* w, const float* bias,
                                           float floor, int64_t qy, float* rows, float* out) {
  PooledRowPlain(g, pd, xp, w, bias, floor, qy, rows, out);
}

// P pooled pixels (2x2 window, stride 2) starting at pooled column qx0: conv rows 2qy and
// 2qy + 1, conv columns 2qx0 .. 2qx0 + 2P - 1, all in registers. SW is the conv's column stride.
// acc += w * broadcast(*x) with the broadcast folded into the FMA's memory operand. Written
// with intrinsics, GCC hoists the 4P scalar loads of a tap into xmm registers ahead of the
// FMAs, spills them (24 accumulators leave no room) and broadcasts each through the shuffle
// port: 40% slower.
MT_TARGET_AVX512 inline void FmaBroadcast(__m512& acc, __m512 w, const float* x) {
  asm("vfmadd231ps %[x]%{1to16%}, %[w], %[acc]" : [acc] "+v"(acc) : [w] "v"(w), [x] "m"(*x));
}

// GCC 12 warns that _mm512_max_ps's deliberately undefined pass-through operand (unused: the
// mask is all ones) is uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <int P, int SW>
MT_TARGET_AVX512 void PooledTileAvx512(const StemGeometry& g, const Padded& pd, const float* xp,
                                       const float* w, const float* bias, float floor,
                                       int64_t qy, int64_t qx0, float* out) {
  __m512 acc[2][2 * P];
#pragma GCC unroll 2
  for (int r = 0; r < 2; ++r)
#pragma GCC unroll 12
    for (int j = 0; j < 2 * P; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t row_step = g.sh * pd.wp;  // conv row 2qy + 1 reads this much further down
  const float* base = xp + 2 * qy * row_step + 2 * qx0 * SW;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const float* r0 = base + (c * pd.hp + ky) * pd.wp;
      const float* r1 = r0 + row_step;
      for (int64_t kx = 0; kx < g.kw; ++kx, w += kStemBlock) {
        const __m512 wv = _mm512_loadu_ps(w);
#pragma GCC unroll 12
        for (int j = 0; j < 2 * P; ++j) {
          FmaBroadcast(acc[0][j], wv, r0 + j * SW + kx);
          FmaBroadcast(acc[1][j], wv, r1 + j * SW + kx);
        }
      }
    }
  const __m512 b = _mm512_loadu_ps(bias), f = _mm512_set1_ps(floor);
#pragma GCC unroll 6
  for (int p = 0; p < P; ++p) {
    const __m512 top = _mm512_max_ps(acc[0][2 * p], acc[0][2 * p + 1]);
    const __m512 bottom = _mm512_max_ps(acc[1][2 * p], acc[1][2 * p + 1]);
    const __m512 v = _mm512_add_ps(_mm512_max_ps(top, bottom), b);
    _mm512_storeu_ps(out + (qx0 + p) * kStemBlock, _mm512_max_ps(v, f));
  }
}
#pragma GCC diagnostic pop

// Tiles of near-equal width covering a pooled row (14 = 5 + 5 + 4, not 6 + 6 + 2): a narrow
// tile has too few independent FMA chains to hide the FMA latency.
std::vector<int> TileWidths(int64_t qw) {
  const int64_t tiles = (qw + kMaxTile - 1) / kMaxTile;
  std::vector<int> widths(tiles);
  for (int64_t t = 0; t < tiles; ++t) widths[t] = qw / tiles + (t < qw % tiles ? 1 : 0);
  return widths;
}

template <int SW>
void PooledRowAvx512(const StemGeometry& g, const Padded& pd, const std::vector<int>& tiles,
                     const float* xp, const float* w, const float* bias, float floor, int64_t qy,
                     float* out) {
  int64_t qx = 0;
  for (int p : tiles) {
    switch (p) {
      case 1: PooledTileAvx512<1, SW>(g, pd, xp, w, bias, floor, qy, qx, out); break;
      case 2: PooledTileAvx512<2, SW>(g, pd, xp, w, bias, floor, qy, qx, out); break;
      case 3: PooledTileAvx512<3, SW>(g, pd, xp, w, bias, floor, qy, qx, out); break;
      case 4: PooledTileAvx512<4, SW>(g, pd, xp, w, bias, floor, qy, qx, out); break;
      case 5: PooledTileAvx512<5, SW>(g, pd, xp, w, bias, floor, qy, qx, out); break;
      default: PooledTileAvx512<6, SW>(g, pd, xp, w, bias, floor, qy, qx, out); break;
    }
    qx += p;
  }
}

void StoreRow(const float* row, int64_t n, void* y, DType t, int64_t offset, bool avx512) {
  switch (t) {
    case DType::kF32:
      std::copy_n(row, n, static_cast<float*>(y) + offset);
      return;
    case DType::kBF16:
      if (avx512) {
        avx512::FloatToBFloat16Row(row, static_cast<uint16_t*>(y) + offset, n);
      } else {
        for (int64_t i = 0; i < n; ++i)
          static_cast<uint16_t*>(y)[offset + i] = FloatToBFloat16(row[i]);
      }
      return;
    default:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(y)[offset + i] = FloatToHalf(row[i]);
  }
}

}  // namespace

bool StemValid(const StemGeometry& g) {
  return g.n > 0 && g.c > 0 && g.h > 0 && g.w > 0 && g.m > 0 && g.m % kStemBlock == 0 &&
         g.kh > 0 && g.kw > 0 && g.sh > 0 && g.sw > 0 && g.pt >= 0 && g.pl >= 0 &&
         g.pkh > 0 && g.pkw > 0 && g.psh > 0 && g.psw > 0 && g.oh >= g.pkh && g.ow >= g.pkw;
}

bool StemFastPath(const StemGeometry& g) {
  return Avx512Enabled() && g.c <= kMaxFastChannels && g.kh <= kMaxFastKernel &&
         g.kw <= kMaxFastKernel && (g.sw == 1 || g.sw == 2) && g.pkh == 2 && g.pkw == 2 &&
         g.psh == 2 && g.psw == 2;
}

std::vector<float> PackStemWeights(const StemGeometry& g, const float* w) {
  const int64_t taps = g.c * g.kh * g.kw;
  std::vector<float> packed(g.m * taps);
  for (int64_t o = 0; o < g.m; ++o)
    for (int64_t t = 0; t < taps; ++t)
      packed[((o / kStemBlock) * taps + t) * kStemBlock + o % kStemBlock] = w[o * taps + t];
  return packed;
}

void ConvPoolStem(const StemGeometry& g, const void* x, DType x_type, const float* packed_w,
                  const float* bias, float floor, void* y, DType y_type) {
  MT_CHECK(StemValid(g));
  const Padded pd = PaddedSize(g);
  const bool fast = StemFastPath(g), avx512 = Avx512Enabled();
  const int64_t mb = g.m / kStemBlock, qh = g.qh(), qw = g.qw();
  const int64_t taps = g.c * g.kh * g.kw, row = qw * kStemBlock;
  const int64_t plane = g.c * pd.hp * pd.wp;
  const std::vector<int> tiles = TileWidths(qw);
  // ~25 K FMAs per task for fashion_cnn: a few tasks already pay for waking the other thread.
  ParallelFor(g.n * mb * qh, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> xp(plane);
    std::vector<float> buf(y_type == DType::kF32 ? 0 : row);
    std::vector<float> rows(fast ? 0 : g.pkh * pd.cols * kStemBlock);
    int64_t padded_image = -1;
    // Task r is pooled row qy of block cb of image img; counted, not divided out per row.
    int64_t qy = begin % qh, cb = (begin / qh) % mb, img = begin / (qh * mb);
    for (int64_t r = begin; r < end; ++r) {
      if (img != padded_image) {
        PadImage(g, pd, x, x_type, img, xp.data());
        padded_image = img;
      }
      float* out = y_type == DType::kF32 ? static_cast<float*>(y) + r * row : buf.data();
      const float* w = packed_w + cb * taps * kStemBlock;
      const float* b = bias + cb * kStemBlock;
      if (fast && g.sw == 1) {
        PooledRowAvx512<1>(g, pd, tiles, xp.data(), w, b, floor, qy, out);
      } else if (fast) {
        PooledRowAvx512<2>(g, pd, tiles, xp.data(), w, b, floor, qy, out);
      } else if (avx512) {
        PooledRowPlainAvx512(g, pd, xp.data(), w, b, floor, qy, rows.data(), out);
      } else {
        PooledRowPlainBaseline(g, pd, xp.data(), w, b, floor, qy, rows.data(), out);
      }
      if (y_type != DType::kF32) StoreRow(out, row, y, y_type, r * row, avx512);
      if (++qy == qh) {
        qy = 0;
        if (++cb == mb) cb = 0, ++img;
      }
    }
  });
}

}  // namespace mixtrain::cpu
