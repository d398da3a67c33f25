// CPU kernels of ai.mixtrain.MaxPoolGrad(dY, X) and AveragePoolGrad(dY, X): the input gradients
// of MaxPool and AveragePool (1-D/2-D/3-D, strides, pads, dilations, ceil_mode, auto_pad;
// attributes as the forward node). MaxPool routes each window's gradient to its first maximum
// (scan order, as PyTorch); AveragePool spreads it over the window, dividing by the same count
// the forward used (count_include_pad counts the padded taps, never taps past the padding).
//
// Own loops rather than oneDNN's pooling_backward: max pooling backward there needs the forward's
// workspace, which our graph does not keep, so it would cost a recomputed forward plus the
// backward, both in oneDNN's plain-layout pooling; one pass that finds each window's argmax and
// scatters dY is cheaper, keeps PyTorch's first-maximum tie rule (ties are common: windows of
// zeros after a Relu), and reads the storage type directly. Per (n, c) plane the gradient is
// accumulated in a small fp32 plane (overlapping windows add up) and stored once, rounded to the
// storage type. Parallel over planes, so no two threads write the same element.
//
// MaxPoolGrad with relu=1 (passes/fuse_backward.cc) also applies the gradient of the Relu whose
// output X is: a window's gradient is kept only when its maximum is > 0.
#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dnnl_layout.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pool2x2.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

// Per dim and output position, the taps [lo, hi) of the window that land inside the input, so
// the inner loops need no bounds checks.
struct TapRanges {
  std::array<std::vector<int64_t>, 3> lo, hi;
};

TapRanges MakeTapRanges(const Window3& w) {
  TapRanges r;
  for (int dim = 0; dim < 3; ++dim) {
    for (int64_t o = 0; o < w.out[dim]; ++o) {
      int64_t lo = w.k[dim], hi = 0;
      for (int64_t k = 0; k < w.k[dim]; ++k) {
        const int64_t i = o * w.s[dim] + k * w.d[dim] - w.pb[dim];
        if (i < 0 || i >= w.in[dim]) continue;
        lo = std::min(lo, k);
        hi = k + 1;
      }
      // Taps inside the input are contiguous in k: positions grow with k.
      r.lo[dim].push_back(lo);
      r.hi[dim].push_back(std::max(hi, lo));
    }
  }
  return r;
}

struct PoolArgs {
  Window3 w;
  TapRanges taps;  // filled by the general paths only (Disjoint windows need none)
  int64_t planes = 0;
};

absl::StatusOr<PoolArgs> ReadPool(KernelContext& ctx) {
  const TensorView* dy = ctx.input(0);
  const TensorView* x = ctx.input(1);
  TensorView* dx = ctx.output(0);
  if (!dy || !x || !dx) return ctx.Error("needs inputs dY, X and output dX");
  if (!AllFloat({dy, x, dx})) return ctx.Error("expects float tensors");
  if (dy->dtype != x->dtype || dx->dtype != x->dtype) return ctx.Error("dY, X and dX dtypes differ");
  if (dx->numel() != x->numel()) return ctx.Error("dX must have X's shape");
  PoolArgs a;
  MT_ASSIGN_OR_RETURN(a.w, MakeWindow3(ctx, x->dims, ctx.node().attr_ints("kernel_shape")));
  a.planes = x->dims[0] * x->dims[1];
  if (dy->numel() != a.planes * a.w.out_size())
    return ctx.Error("dY's shape does not match the pooling output");
  return a;
}

// Calls visit(input offset) for every in-bounds tap of output position (od, oh, ow), scan order.
template <typename Fn>
inline void ForTaps(const Window3& w, const TapRanges& t, int64_t od, int64_t oh, int64_t ow,
                    Fn&& visit) {
  for (int64_t kd = t.lo[0][od]; kd < t.hi[0][od]; ++kd) {
    const int64_t id = od * w.s[0] + kd * w.d[0] - w.pb[0];
    for (int64_t kh = t.lo[1][oh]; kh < t.hi[1][oh]; ++kh) {
      const int64_t row = (id * w.in[1] + oh * w.s[1] + kh * w.d[1] - w.pb[1]) * w.in[2];
      const int64_t col = ow * w.s[2] - w.pb[2];
      for (int64_t kw = t.lo[2][ow]; kw < t.hi[2][ow]; ++kw) visit(row + col + kw * w.d[2]);
    }
  }
}

// Runs plane(acc, p, dy_plane) for each (n, c) plane p with a zeroed fp32 accumulator of the
// input plane's size, then stores the accumulator into dX's plane.
template <typename Io, typename PlaneFn>
void ForPlanes(const PoolArgs& a, const TensorView& dy, TensorView& dx, PlaneFn&& plane) {
  using T = typename Io::T;
  const int64_t in = a.w.in_size(), out = a.w.out_size();
  ParallelFor(a.planes, 1, [&](int64_t b, int64_t e) {
    std::vector<float> acc(in);
    for (int64_t p = b; p < e; ++p) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      plane(acc.data(), p, dy.as<T>() + p * out);
      T* dxp = dx.as<T>() + p * in;
      for (int64_t i = 0; i < in; ++i) dxp[i] = Io::Store(acc[i]);
    }
  });
}

// Windows that tile the input without overlap or padding (kernel == stride, no dilation, every
// window inside: the usual 2x2/2 pool): each input element is in at most one window, so dX is
// written directly, zeros and each window's winner, with no accumulator plane and no per-tap
// index arithmetic. fashion_cnn at batch 64 (AVX-512 CPU): 5.0 -> 1.5 ms per step for its two
// pools. A plain `if` here measured faster than the general path's mask select (1.5 vs 4.4 ms).
bool Disjoint(const Window3& w) {
  for (int i = 0; i < 3; ++i)
    if (w.k[i] != w.s[i] || w.d[i] != 1 || w.pb[i] != 0 || w.out[i] * w.s[i] > w.in[i]) return false;
  return true;
}

// The 2x2/2 pool of a [H, W] plane, two rows of X per row of dY: every element of those rows
// is written (the winner gets its window's gradient, the rest 0) with selects instead of
// branches, so the loop vectorizes. Rows and columns past the last window are zeroed.
template <typename Io, bool kRelu>
[[gnu::always_inline]] inline void MaxPoolGrad2x2Body(const typename Io::T* x, const typename Io::T* dy,
                                                      typename Io::T* dx, int64_t h, int64_t w,
                                                      int64_t oh, int64_t ow) {
  using T = typename Io::T;
  const T zero = Io::Store(0.0f);
  for (int64_t r = 0; r < oh; ++r) {
    const T* x0 = x + 2 * r * w;
    const T* x1 = x0 + w;
    const T* g = dy + r * ow;
    T* d0 = dx + 2 * r * w;
    T* d1 = d0 + w;
#pragma omp simd simdlen(8)
    for (int64_t q = 0; q < ow; ++q) {
      const float a = Io::Load(x0[2 * q]), b = Io::Load(x0[2 * q + 1]);
      const float c = Io::Load(x1[2 * q]), d = Io::Load(x1[2 * q + 1]);
      // First maximum in scan order (a, b, c, d), as the general path and MaxPool2x2Body in
      // dnnl_pool.cc (written out in both: a shared helper returning the flags stopped GCC
      // vectorizing either loop, 2.4 -> 21 ms per step).
      const bool tb = b > a;
      float m = tb ? b : a;
      const bool tc = c > m;
      m = tc ? c : m;
      const bool td = d > m;
      m = td ? d : m;
      // Stores select the stored bits of dY or zero: no rounding, so bf16 vectorizes as fp32.
      const T gv = (!kRelu || m > 0.0f) ? g[q] : zero;
      d1[2 * q + 1] = td ? gv : zero;
      d1[2 * q] = !td && tc ? gv : zero;
      d0[2 * q + 1] = !td && !tc && tb ? gv : zero;
      d0[2 * q] = !td && !tc && !tb ? gv : zero;
    }
    for (int64_t i = 2 * ow; i < w; ++i) d0[i] = d1[i] = zero;
  }
  std::fill(dx + 2 * oh * w, dx + h * w, zero);
}

template <typename Io, bool kRelu>
MT_TARGET_AVX512 void MaxPoolGrad2x2Avx512(const typename Io::T* x, const typename Io::T* dy,
                                           typename Io::T* dx, int64_t h, int64_t w, int64_t oh,
                                           int64_t ow) {
  MaxPoolGrad2x2Body<Io, kRelu>(x, dy, dx, h, w, oh, ow);
}

template <typename Io, bool kRelu>
void MaxPoolGrad2x2(const typename Io::T* x, const typename Io::T* dy, typename Io::T* dx,
                    int64_t h, int64_t w, int64_t oh, int64_t ow) {
  if constexpr (std::is_same_v<Io, red::F32Io> || std::is_same_v<Io, red::BF16Io>) {
    if (Avx512Enabled())  // masked row ends (pool2x2.h)
      avx512::MaxPoolGrad2x2(x, dy, dx, h, w, oh, ow, kRelu);
    else
      avx2::MaxPoolGrad2x2(x, dy, dx, h, w, oh, ow, kRelu);
  } else if (Avx512Enabled()) {
    MaxPoolGrad2x2Avx512<Io, kRelu>(x, dy, dx, h, w, oh, ow);
  } else {
    MaxPoolGrad2x2Body<Io, kRelu>(x, dy, dx, h, w, oh, ow);
  }
}

absl::Status MaxPoolGradDisjoint(KernelContext& ctx, const Window3& w, int64_t planes) {
  const TensorView& x = *ctx.input(1);
  const bool relu = ctx.node().attr_int("relu", 0) != 0;
  if (w.k[0] == 1 && w.k[1] == 2 && w.k[2] == 2)  // 2-D 2x2/2 (the 1-D/2-D forms pad dims with 1)
    return DispatchFloat(ctx, x.dtype, [&](auto io) {
      using Io = decltype(io);
      using T = typename Io::T;
      const T* xs = x.as<T>();
      const T* dy = ctx.input(0)->as<T>();
      T* dx = ctx.output(0)->as<T>();
      const int64_t in = w.in_size(), out = w.out_size();
      ParallelFor(planes * w.in[0], 1, [&](int64_t b, int64_t e) {
        const int64_t pin = w.in[1] * w.in[2], pout = w.out[1] * w.out[2];
        for (int64_t p = b; p < e; ++p) {
          // Plane p of the [planes * D] 2-D planes; depth slices past the last window are zero.
          const int64_t plane = p / w.in[0], depth = p % w.in[0];
          T* dxp = dx + plane * in + depth * pin;
          if (depth >= w.out[0]) {
            std::fill(dxp, dxp + pin, Io::Store(0.0f));
            continue;
          }
          const T* xp = xs + plane * in + depth * pin;
          const T* dyp = dy + plane * out + depth * pout;
          if (relu)
            MaxPoolGrad2x2<Io, true>(xp, dyp, dxp, w.in[1], w.in[2], w.out[1], w.out[2]);
          else
            MaxPoolGrad2x2<Io, false>(xp, dyp, dxp, w.in[1], w.in[2], w.out[1], w.out[2]);
        }
      });
    });
  return DispatchFloat(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    const T* dy = ctx.input(0)->as<T>();
    const T* xs = x.as<T>();
    T* dx = ctx.output(0)->as<T>();
    const int64_t in = w.in_size(), out = w.out_size(), hw = w.in[1] * w.in[2], row = w.in[2];
    ParallelFor(planes, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* xp = xs + p * in;
        const T* dyp = dy + p * out;
        T* dxp = dx + p * in;
        std::fill(dxp, dxp + in, Io::Store(0.0f));
        int64_t o = 0;
        for (int64_t od = 0; od < w.out[0]; ++od)
          for (int64_t oh = 0; oh < w.out[1]; ++oh)
            for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
              const int64_t base = od * w.k[0] * hw + oh * w.k[1] * row + ow * w.k[2];
              int64_t best = base;
              float best_v = Io::Load(xp[base]);
              for (int64_t kd = 0; kd < w.k[0]; ++kd)
                for (int64_t kh = 0; kh < w.k[1]; ++kh)
                  for (int64_t kw = 0; kw < w.k[2]; ++kw) {
                    const int64_t i = base + kd * hw + kh * row + kw;
                    const float v = Io::Load(xp[i]);
                    if (v > best_v) {  // first maximum in scan order, as the general path
                      best_v = v;
                      best = i;
                    }
                  }
              if (!relu || best_v > 0.0f) dxp[best] = dyp[o];
            }
      }
    });
  });
}

// ---- channel_block = 16 or 8 -----------------------------------------------------------------
// dY, X and dX stored [N, C/b, sp..., b] (passes/conv_layout_train.cc): each tap of a window is
// b contiguous channels, one vector (b = 16 on AVX-512, 8 on AVX2), and every lane finds its own
// first maximum in scan order (the same rule as the plain paths, so the gradients are the same).
// Disjoint windows write dX directly; overlapping ones add into an fp32 plane.
template <typename Io, int kLanes, bool kDisjoint>
[[gnu::always_inline]] inline void MaxPoolGradBlockedPlane(const Window3& w, const TapRanges& taps,
                                                           bool relu, const typename Io::T* xp,
                                                           const typename Io::T* dyp,
                                                           typename Io::T* dxp, float* acc) {
  using T = typename Io::T;
  const int64_t in = w.in_size();
  if constexpr (kDisjoint) {
    std::fill(dxp, dxp + in * kLanes, Io::Store(0.0f));
  } else {
    std::fill(acc, acc + in * kLanes, 0.0f);
  }
  int64_t o = 0;
  for (int64_t od = 0; od < w.out[0]; ++od)
    for (int64_t oh = 0; oh < w.out[1]; ++oh)
      for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
        int32_t best[kLanes];
        float best_v[kLanes];
        bool first = true;
        ForTaps(w, taps, od, oh, ow, [&](int64_t i) {
          const T* v = xp + i * kLanes;
          const int32_t at = static_cast<int32_t>(i);
#pragma omp simd
          for (int l = 0; l < kLanes; ++l) {
            const float x = Io::Load(v[l]);
            const bool take = first || x > best_v[l];
            best[l] = take ? at : best[l];
            best_v[l] = take ? x : best_v[l];
          }
          first = false;
        });
        if (first) continue;  // a window entirely in the padding
        const T* g = dyp + o * kLanes;
        for (int l = 0; l < kLanes; ++l) {
          if (relu && !(best_v[l] > 0.0f)) continue;
          if constexpr (kDisjoint) {
            dxp[best[l] * kLanes + l] = g[l];
          } else {
            acc[best[l] * kLanes + l] += Io::Load(g[l]);
          }
        }
      }
  if constexpr (!kDisjoint)
    for (int64_t i = 0; i < in * kLanes; ++i) dxp[i] = Io::Store(acc[i]);
}

template <typename Io, int kLanes, bool kDisjoint>
MT_TARGET_AVX512 void MaxPoolGradBlockedPlaneAvx512(const Window3& w, const TapRanges& taps,
                                                    bool relu, const typename Io::T* xp,
                                                    const typename Io::T* dyp,
                                                    typename Io::T* dxp, float* acc) {
  MaxPoolGradBlockedPlane<Io, kLanes, kDisjoint>(w, taps, relu, xp, dyp, dxp, acc);
}

// The 2x2/2 pool of one blocked [H, W, 16] plane, the rule of MaxPoolGrad2x2Body with one
// 16-channel vector per tap, in four sequential passes per output row: X's two input rows
// (adjacent in memory) find each window's winner, code[] in [0, 4) or -1 where the Relu gate
// drops it, then dX's two rows are written. One pass reading both rows and writing both dX rows
// at once kept four streams 1-2 KiB apart in flight and ran at half the memory bandwidth; the
// codes are int32 (the lanes' width) because GCC left the stores scalar with int8 codes
// (CIFAR-CNN's first pool, fp32, one thread: 6.1 ms one pass, 5.9 int8 codes, 2.4 now, the
// NC<sp> kernel 2.3). `m0` and `code` hold ow * 16 entries.
template <typename Io, int kLanes, bool kRelu>
[[gnu::always_inline]] inline void MaxPoolGrad2x2BlockedBody(const typename Io::T* x,
                                                             const typename Io::T* dy,
                                                             typename Io::T* dx, int64_t h,
                                                             int64_t w, int64_t oh, int64_t ow,
                                                             float* m0, int32_t* code) {
  using T = typename Io::T;
  const T zero = Io::Store(0.0f);
  const int64_t row = w * kLanes, n = ow * kLanes;
  for (int64_t r = 0; r < oh; ++r) {
    const T* x0 = x + 2 * r * row;
    const T* x1 = x0 + row;
    const T* g = dy + r * n;
    T* d0 = dx + 2 * r * row;
    T* d1 = d0 + row;
    for (int64_t q = 0; q < ow; ++q) {  // first maximum in scan order: a, b, then c, d
      const int64_t i = 2 * q * kLanes, o = q * kLanes;
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        const float a = Io::Load(x0[i + l]), b = Io::Load(x0[i + kLanes + l]);
        const bool tb = b > a;
        m0[o + l] = tb ? b : a;
        code[o + l] = tb ? 1 : 0;
      }
    }
    for (int64_t q = 0; q < ow; ++q) {
      const int64_t i = 2 * q * kLanes, o = q * kLanes;
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        const float c = Io::Load(x1[i + l]), d = Io::Load(x1[i + kLanes + l]);
        float m = m0[o + l];
        const bool tc = c > m;
        m = tc ? c : m;
        const bool td = d > m;
        m = td ? d : m;
        const int32_t k = td ? 3 : tc ? 2 : code[o + l];
        code[o + l] = (!kRelu || m > 0.0f) ? k : -1;
      }
    }
    // Stores select the stored bits of dY or zero: no rounding, so bf16 vectorizes as fp32.
    for (int64_t q = 0; q < ow; ++q) {
      const int64_t i = 2 * q * kLanes, o = q * kLanes;
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        d0[i + l] = code[o + l] == 0 ? g[o + l] : zero;
        d0[i + kLanes + l] = code[o + l] == 1 ? g[o + l] : zero;
      }
    }
    for (int64_t q = 0; q < ow; ++q) {
      const int64_t i = 2 * q * kLanes, o = q * kLanes;
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        d1[i + l] = code[o + l] == 2 ? g[o + l] : zero;
        d1[i + kLanes + l] = code[o + l] == 3 ? g[o + l] : zero;
      }
    }
    std::fill(d0 + 2 * n, d0 + row, zero);  // columns past the last window
    std::fill(d1 + 2 * n, d1 + row, zero);
  }
  std::fill(dx + 2 * oh * row, dx + h * row, zero);  // rows past the last window
}

template <typename Io, int kLanes, bool kRelu>
MT_TARGET_AVX512 void MaxPoolGrad2x2BlockedAvx512(const typename Io::T* x, const typename Io::T* dy,
                                                  typename Io::T* dx, int64_t h, int64_t w,
                                                  int64_t oh, int64_t ow, float* m0, int32_t* code) {
  MaxPoolGrad2x2BlockedBody<Io, kLanes, kRelu>(x, dy, dx, h, w, oh, ow, m0, code);
}

template <typename Io, int kLanes, bool kRelu>
void MaxPoolGrad2x2Blocked(const typename Io::T* x, const typename Io::T* dy, typename Io::T* dx,
                           int64_t h, int64_t w, int64_t oh, int64_t ow, float* m0, int32_t* code) {
  if (Avx512Enabled()) {
    MaxPoolGrad2x2BlockedAvx512<Io, kLanes, kRelu>(x, dy, dx, h, w, oh, ow, m0, code);
  } else {
    MaxPoolGrad2x2BlockedBody<Io, kLanes, kRelu>(x, dy, dx, h, w, oh, ow, m0, code);
  }
}

// A blocked MaxPoolGrad's window for one shape, worked out on its first call.
struct BlockedPoolPlan {
  Window3 w;
  TapRanges taps;  // the general paths only
  int64_t planes = 0;
  bool disjoint = false, two_by_two = false;
};

// Per-thread scratch that grows and is kept, so a step allocates nothing after its first.
template <typename T>
T* ThreadScratch(size_t n) {
  thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

template <int kLanes>
absl::Status MaxPoolGradBlocked(KernelContext& ctx, std::vector<int64_t>& key,
                                std::optional<BlockedPoolPlan>& plan) {
  const TensorView* dy = ctx.input(0);
  const TensorView* x = ctx.input(1);
  TensorView* dx = ctx.output(0);
  if (!dy || !x || !dx) return ctx.Error("needs inputs dY, X and output dX");
  if (!AllFloat({dy, x, dx})) return ctx.Error("expects float tensors");
  if (dy->dtype != x->dtype || dx->dtype != x->dtype) return ctx.Error("dY, X and dX dtypes differ");
  if (x->rank() < 4 || x->dims.back() != kLanes || dx->dims != x->dims)
    return ctx.Error(absl::StrCat("X and dX must be channel-blocked, [N, C/", kLanes, ", spatial..., ",
                                  kLanes, "], of one shape"));
  if (!plan || key.size() != x->dims.size() + dy->dims.size() ||
      !std::equal(x->dims.begin(), x->dims.end(), key.begin()) ||
      !std::equal(dy->dims.begin(), dy->dims.end(), key.begin() + x->dims.size())) {
    plan.reset();
    key.assign(x->dims.begin(), x->dims.end());
    key.insert(key.end(), dy->dims.begin(), dy->dims.end());
    BlockedPoolPlan p;
    MT_ASSIGN_OR_RETURN(p.w, MakeWindow3(ctx, dnnl_util::UnblockedDims(x->dims), ctx.node().attr_ints("kernel_shape")));
    p.planes = x->dims[0] * x->dims[1];
    if (dy->numel() != p.planes * p.w.out_size() * kLanes)
      return ctx.Error("dY's shape does not match the pooling output");
    p.disjoint = Disjoint(p.w);
    p.two_by_two = p.disjoint && p.w.in[0] == 1 && p.w.k[0] == 1 && p.w.k[1] == 2 && p.w.k[2] == 2;
    if (!p.two_by_two) p.taps = MakeTapRanges(p.w);
    plan = std::move(p);
  }
  const Window3& w = plan->w;
  const TapRanges& taps = plan->taps;
  const bool disjoint = plan->disjoint, two_by_two = plan->two_by_two;
  const bool relu = ctx.node().attr_int("relu", 0) != 0;
  return DispatchFloat(ctx, x->dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    const int64_t in = w.in_size() * kLanes, out = w.out_size() * kLanes;
    ParallelFor(plan->planes, 1, [&](int64_t b, int64_t e) {
      float* acc = ThreadScratch<float>(two_by_two ? w.out[2] * kLanes : disjoint ? 0 : in);
      int32_t* code = ThreadScratch<int32_t>(two_by_two ? w.out[2] * kLanes : 0);
      for (int64_t p = b; p < e; ++p) {
        const T* xp = x->as<T>() + p * in;
        const T* dyp = dy->as<T>() + p * out;
        T* dxp = dx->as<T>() + p * in;
        if (two_by_two) {  // 2-D 2x2/2 (the 1-D/2-D forms pad dims with 1)
          relu ? MaxPoolGrad2x2Blocked<Io, kLanes, true>(xp, dyp, dxp, w.in[1], w.in[2], w.out[1], w.out[2],
                                                         acc, code)
               : MaxPoolGrad2x2Blocked<Io, kLanes, false>(xp, dyp, dxp, w.in[1], w.in[2], w.out[1], w.out[2],
                                                          acc, code);
        } else if (disjoint) {
          Avx512Enabled() ? MaxPoolGradBlockedPlaneAvx512<Io, kLanes, true>(w, taps, relu, xp, dyp, dxp, nullptr)
                          : MaxPoolGradBlockedPlane<Io, kLanes, true>(w, taps, relu, xp, dyp, dxp, nullptr);
        } else {
          Avx512Enabled() ? MaxPoolGradBlockedPlaneAvx512<Io, kLanes, false>(w, taps, relu, xp, dyp, dxp, acc)
                          : MaxPoolGradBlockedPlane<Io, kLanes, false>(w, taps, relu, xp, dyp, dxp, acc);
        }
      }
    });
  });
}

absl::Status MaxPoolGradPlain(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(PoolArgs a, ReadPool(ctx));
  if (Disjoint(a.w)) return MaxPoolGradDisjoint(ctx, a.w, a.planes);
  a.taps = MakeTapRanges(a.w);
  const TensorView& x = *ctx.input(1);
  const bool relu = ctx.node().attr_int("relu", 0) != 0;
  return DispatchFloat(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    const Window3& w = a.w;
    ForPlanes<Io>(a, *ctx.input(0), *ctx.output(0), [&](float* acc, int64_t p, const T* dyp) {
      const T* xp = x.as<T>() + p * w.in_size();
      int64_t o = 0;
      for (int64_t od = 0; od < w.out[0]; ++od)
        for (int64_t oh = 0; oh < w.out[1]; ++oh)
          for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
            int64_t best = -1;
            float best_v = 0;
            ForTaps(w, a.taps, od, oh, ow, [&](int64_t i) {
              // Selects by masks: which tap wins is data-dependent, so a branch (which the
              // compiler emits for a plain `if` or `?:`) mispredicts about every other window.
              const float v = Io::Load(xp[i]);
              const int64_t take = -static_cast<int64_t>((best < 0) | (v > best_v));
              best = (i & take) | (best & ~take);
              const uint32_t take32 = static_cast<uint32_t>(take);
              best_v = std::bit_cast<float>((std::bit_cast<uint32_t>(v) & take32) |
                                            (std::bit_cast<uint32_t>(best_v) & ~take32));
            });
            if (best >= 0 && (!relu || best_v > 0.0f)) acc[best] += Io::Load(dyp[o]);
          }
    });
  });
}

// The blocked layouts keep their window between calls (the training step's pools allocate
// nothing after the first step); NC<sp> pools work theirs out per call.
class MaxPoolGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const int64_t block = ctx.node().attr_int("channel_block", 0);
    if (block == 16) return MaxPoolGradBlocked<16>(ctx, key_, plan_);
    if (block == 8) return MaxPoolGradBlocked<8>(ctx, key_, plan_);
    if (block != 0) return ctx.Error(absl::StrCat("unsupported channel_block ", block, " (16, 8 or 0)"));
    return MaxPoolGradPlain(ctx);
  }

 private:
  std::vector<int64_t> key_;  // X's dims, then dY's, of the plan
  std::optional<BlockedPoolPlan> plan_;
};

absl::Status AveragePoolGradKernel(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(PoolArgs a, ReadPool(ctx));
  a.taps = MakeTapRanges(a.w);
  const Window3& w = a.w;
  const bool include_pad = ctx.node().attr_int("count_include_pad", 0) != 0;
  // The divisor per output position, dim by dim: taps inside the input, or inside the padded
  // input with count_include_pad.
  std::array<std::vector<int64_t>, 3> count;
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t lo = include_pad ? -w.pb[dim] : 0;
    const int64_t hi = include_pad ? w.in[dim] + w.pe[dim] : w.in[dim];
    for (int64_t o = 0; o < w.out[dim]; ++o) {
      int64_t n = 0;
      for (int64_t k = 0; k < w.k[dim]; ++k) {
        const int64_t i = o * w.s[dim] + k * w.d[dim] - w.pb[dim];
        n += i >= lo && i < hi;
      }
      count[dim].push_back(n);
    }
  }
  return DispatchFloat(ctx, ctx.input(1)->dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    ForPlanes<Io>(a, *ctx.input(0), *ctx.output(0), [&](float* acc, int64_t, const T* dyp) {
      int64_t o = 0;
      for (int64_t od = 0; od < w.out[0]; ++od)
        for (int64_t oh = 0; oh < w.out[1]; ++oh)
          for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
            const int64_t n = count[0][od] * count[1][oh] * count[2][ow];
            if (n == 0) continue;
            const float g = Io::Load(dyp[o]) / static_cast<float>(n);
            ForTaps(w, a.taps, od, oh, ow, [&](int64_t i) { acc[i] += g; });
          }
    });
  });
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_pool) {
  r.Register({"MaxPoolGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              ClassKernel<MaxPoolGradKernel>()});
  r.Register({"AveragePoolGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(AveragePoolGradKernel)});
}

}  // namespace mixtrain::cpu
