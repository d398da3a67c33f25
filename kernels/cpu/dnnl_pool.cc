// MaxPool and AveragePool on oneDNN's pooling primitive (kernel, strides, pads, dilations,
// auto_pad, ceil_mode, count_include_pad), fp32 and bf16 natively, fp16 staged through fp32.
// MaxPool's optional Indices output, the global pools, and MaxPool over a plain NCHW tensor whose
// windows tile it (MaxPoolDisjoint2D, measured there) are our own loops: oneDNN's max-pool
// workspace is not an ONNX index, and a global pool is a memory-bound reduction. The
// ai.mixtrain variants with channels_last = 1 (the inference layout pass's) pool [N, sp..., C]
// tensors; oneDNN pools that layout about 10x faster than NC<spatial> (fashion_cnn's first
// MaxPool: 0.04 vs 0.46 ms). MaxPool and AveragePool with channel_block = 16 pool
// [N, C/16, sp..., 16] tensors (oneDNN's nC<sp>16c, as fast: 0.065 ms for that MaxPool); their
// 2x2/2 MaxPool is our own loop too (MaxPool2x2Blocked).
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "graph/check.h"
#include "graph/ops/nn_geometry.h"
#include "graph/half.h"
#include "kernels/cpu/float_element.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/dnnl_layout.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pool2x2.h"
#include "kernels/cpu/reduce_util.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain {
namespace {

using dnnl_util::ActivationDesc;
using dnnl_util::Fp32Staging;
using dnnl_util::Guard;
using dnnl_util::Layout;
using dnnl_util::ShapeCache;
using dnnl_util::ShapeKey;

absl::StatusOr<WindowGeometry> PoolGeometry(const KernelContext& ctx, const TensorView& x) {
  if (x.rank() < 3) return ctx.Error("X must be [N, C, spatial...]");
  std::vector<int64_t> in_sp(x.dims.begin() + 2, x.dims.end());
  std::vector<int64_t> kernel = ctx.node().attr_ints("kernel_shape");
  if (kernel.empty()) return ctx.Error("attribute kernel_shape is required");
  return ForwardWindowGeometry(ctx.node(), in_sp, kernel);
}

struct PoolEntry {
  dnnl_util::BoundPrimitive prim;  // SRC and DST
  dnnl::memory::desc x_md, y_md;
  // AveragePool counting pads whose ceil_mode windows reach past the end pads: oneDNN divides
  // by the kernel size there, ONNX by the window clipped to the padded input. Per output
  // position (spatial, row-major) the factor that corrects it; empty when none is needed.
  std::vector<float> rescale;
  std::vector<int64_t> y_dims;  // as stored
};

// Number of window taps inside [-pad_begin, in + pad_end) per output position of one dim.
std::vector<int64_t> TapsInPadded(const WindowGeometry& g, size_t d, int64_t in) {
  std::vector<int64_t> taps(g.out[d]);
  for (int64_t o = 0; o < g.out[d]; ++o) {
    int64_t count = 0;
    for (int64_t t = 0; t < g.kernel[d]; ++t) {
      int64_t pos = o * g.strides[d] - g.pads_begin[d] + t * g.dilations[d];
      count += pos < in + g.pads_end[d];
    }
    taps[o] = count;
  }
  return taps;
}

// `x` has logical [N, C, sp...] dims; `layout` says how it is stored.
absl::StatusOr<std::unique_ptr<PoolEntry>> BuildPool(const KernelContext& ctx, const TensorView& x,
                                                     bool is_max, Layout layout, int64_t block) {
  MT_ASSIGN_OR_RETURN(WindowGeometry g, PoolGeometry(ctx, x));
  const bool include_pad = !is_max && ctx.node().attr_int("count_include_pad", 0) != 0;
  auto dt = dnnl_util::ToDnnl(dnnl_util::ComputeType(x.dtype));
  if (!dt.ok()) return ctx.Error(std::string(dt.status().message()));
  auto e = std::make_unique<PoolEntry>();
  std::vector<int64_t> y_dims = {x.dims[0], x.dims[1]};
  y_dims.insert(y_dims.end(), g.out.begin(), g.out.end());
  std::vector<int64_t> dil = g.dilations;
  for (int64_t& d : dil) d -= 1;
  if (include_pad && g.pads_end_effective != g.pads_end) {
    const size_t nsp = g.out.size();
    std::vector<std::vector<int64_t>> taps(nsp);
    int64_t ktotal = 1, outs = 1;
    for (size_t d = 0; d < nsp; ++d) {
      taps[d] = TapsInPadded(g, d, x.dims[2 + d]);
      ktotal *= g.kernel[d];
      outs *= g.out[d];
    }
    e->rescale.resize(outs);
    std::vector<int64_t> idx(nsp, 0);
    for (int64_t i = 0; i < outs; ++i) {
      int64_t count = 1;
      for (size_t d = 0; d < nsp; ++d) count *= taps[d][idx[d]];
      e->rescale[i] = static_cast<float>(ktotal) / static_cast<float>(count);
      for (int64_t d = nsp - 1; d >= 0; --d) {
        if (++idx[d] < g.out[d]) break;
        idx[d] = 0;
      }
    }
  }
  e->y_dims = dnnl_util::StoredDims(y_dims, layout, block);
  const dnnl::algorithm alg = is_max        ? dnnl::algorithm::pooling_max
                              : include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                            : dnnl::algorithm::pooling_avg_exclude_padding;
  MT_RETURN_IF_ERROR(Guard(ctx, "building pooling", [&] {
    e->x_md = ActivationDesc(x.dims, *dt, layout, block);
    e->y_md = ActivationDesc(y_dims, *dt, layout, block);
    dnnl::pooling_v2_forward::desc d(
        dnnl::prop_kind::forward_inference, alg, e->x_md, e->y_md, dnnl_util::ToDims(g.strides),
        dnnl_util::ToDims(g.kernel), dnnl_util::ToDims(dil), dnnl_util::ToDims(g.pads_begin),
        dnnl_util::ToDims(g.pads_end_effective));
    e->prim = dnnl_util::BoundPrimitive(dnnl::pooling_v2_forward(
        dnnl::pooling_v2_forward::primitive_desc(d, dnnl_util::Attr(), dnnl_util::Engine())));
    e->prim.Arg(DNNL_ARG_SRC, e->x_md);
    e->prim.Arg(DNNL_ARG_DST, e->y_md);
  }));
  return e;
}

// MaxPool with Indices: ONNX's flat index into X (row-major over N, C and the spatial dims;
// storage_order=1 makes the spatial part column-major).
absl::Status MaxPoolWithIndices(KernelContext& ctx, const TensorView& x, TensorView& y,
                                TensorView& ind) {
  MT_ASSIGN_OR_RETURN(WindowGeometry g, PoolGeometry(ctx, x));
  const bool col_major = ctx.node().attr_int("storage_order", 0) != 0;
  const size_t nsp = g.out.size();
  std::vector<int64_t> in_sp(x.dims.begin() + 2, x.dims.end());
  std::vector<int64_t> in_strides = dnnl_util::DenseStrides(in_sp);
  std::vector<int64_t> idx_strides(nsp, 1);
  for (size_t d = 1; d < nsp; ++d) idx_strides[d] = idx_strides[d - 1] * in_sp[d - 1];
  if (!col_major) idx_strides = in_strides;
  int64_t in_plane = 1, out_plane = 1, ktotal = 1;
  for (size_t d = 0; d < nsp; ++d) {
    in_plane *= in_sp[d];
    out_plane *= g.out[d];
    ktotal *= g.kernel[d];
  }
  const int64_t planes = x.dims[0] * x.dims[1];
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    std::vector<int64_t> o(nsp, 0), t(nsp);
    for (int64_t oi = 0; oi < out_plane; ++oi) {
      float best = -std::numeric_limits<float>::infinity();
      int64_t best_idx = -1;
      std::fill(t.begin(), t.end(), 0);
      for (int64_t ki = 0; ki < ktotal; ++ki) {
        int64_t off = 0, ioff = 0;
        bool inside = true;
        for (size_t d = 0; d < nsp; ++d) {
          int64_t pos = o[d] * g.strides[d] - g.pads_begin[d] + t[d] * g.dilations[d];
          inside &= pos >= 0 && pos < in_sp[d];
          off += pos * in_strides[d];
          ioff += pos * idx_strides[d];
        }
        if (inside) {
          float v = cpu::LoadAsFloat(x.dtype, x.data, p * in_plane + off);
          if (best_idx < 0 || v > best || std::isnan(v)) {
            best = v;
            best_idx = p * in_plane + ioff;
          }
        }
        for (int64_t d = nsp - 1; d >= 0; --d) {
          if (++t[d] < g.kernel[d]) break;
          t[d] = 0;
        }
      }
      cpu::StoreFromFloat(y.dtype, y.data, p * out_plane + oi, best);
      ind.as<int64_t>()[p * out_plane + oi] = best_idx;
      for (int64_t d = nsp - 1; d >= 0; --d) {
        if (++o[d] < g.out[d]) break;
        o[d] = 0;
      }
    }
  }
  return absl::OkStatus();
}

// MaxPool over a plain [N, C, H, W] tensor whose windows tile it (kernel == stride, no pads, no
// dilation: the usual 2x2/2), as one read of X with our own loop; nullopt when it does not apply.
// oneDNN pools the plain layout slowly (the inference passes move pools to channels-last or
// blocked layouts; the training graph keeps NCHW): fashion_cnn's two training-step MaxPools take
// 10.9 ms per step on AVX2 through oneDNN and 0.3 ms this way. The maximum is the first maximum
// in scan order (NaN wins only when a window starts with it), as MaxPoolGrad's.
// Rows of 2x2/2 windows, branch-free so the loop vectorizes; values are copied exactly.
template <typename Io>
[[gnu::always_inline]] inline void MaxPool2x2Body(const typename Io::T* x, typename Io::T* y,
                                                  int64_t w, int64_t oh, int64_t ow) {
  for (int64_t r = 0; r < oh; ++r) {
    const typename Io::T* x0 = x + 2 * r * w;
    const typename Io::T* x1 = x0 + w;
    typename Io::T* yr = y + r * ow;
#pragma omp simd simdlen(8)
    for (int64_t q = 0; q < ow; ++q) {
      const float a = Io::Load(x0[2 * q]), b = Io::Load(x0[2 * q + 1]);
      const float c = Io::Load(x1[2 * q]), d = Io::Load(x1[2 * q + 1]);
      // First maximum in scan order, as the general loop and MaxPoolGrad2x2Body in grad_pool.cc;
      // its stored bits are selected, so no
      // rounding store (bf16 vectorizes as fp32).
      const bool tb = b > a;
      float m = tb ? b : a;
      typename Io::T best = tb ? x0[2 * q + 1] : x0[2 * q];
      const bool tc = c > m;
      m = tc ? c : m;
      best = tc ? x1[2 * q] : best;
      best = d > m ? x1[2 * q + 1] : best;
      yr[q] = best;
    }
  }
}

template <typename Io>
MT_TARGET_AVX512 void MaxPool2x2Avx512(const typename Io::T* x, typename Io::T* y, int64_t w,
                                       int64_t oh, int64_t ow) {
  MaxPool2x2Body<Io>(x, y, w, oh, ow);
}

// Whether 2-D windows tile [N, C, H, W] `dims` (kernel == stride, no dilation, no padding, every
// window inside), the case our own MaxPool loops take.
bool TilesInput2D(const WindowGeometry& g, const std::vector<int64_t>& dims) {
  for (int i = 0; i < 2; ++i)
    if (g.kernel[i] != g.strides[i] || g.dilations[i] != 1 || g.pads_begin[i] != 0 ||
        g.out[i] * g.strides[i] > dims[2 + i])
      return false;
  return true;
}

std::optional<absl::Status> MaxPoolDisjoint2D(KernelContext& ctx, const TensorView& x, TensorView& y) {
  if (x.rank() != 4) return std::nullopt;
  absl::StatusOr<WindowGeometry> g = PoolGeometry(ctx, x);
  if (!g.ok()) return g.status();
  if (!TilesInput2D(*g, x.dims)) return std::nullopt;
  const int64_t planes = x.dims[0] * x.dims[1], h = x.dims[2], w = x.dims[3];
  const int64_t oh = g->out[0], ow = g->out[1], kh = g->kernel[0], kw = g->kernel[1];
  if (y.numel() != planes * oh * ow) return ctx.Error("output allocated with unexpected dims");
  return cpu::DispatchFloat(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    const T* xs = x.as<T>();
    T* ys = y.as<T>();
    if (kh == 2 && kw == 2) {
      ParallelFor(planes, 1, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const T* xp = xs + p * h * w;
          T* yp = ys + p * oh * ow;
          if constexpr (std::is_same_v<Io, red::F32Io> || std::is_same_v<Io, red::BF16Io>) {
            if (cpu::Avx512Enabled())  // masked row ends (pool2x2.h)
              cpu::avx512::MaxPool2x2(xp, yp, w, oh, ow);
            else
              cpu::avx2::MaxPool2x2(xp, yp, w, oh, ow);
          } else if (cpu::Avx512Enabled()) {
            MaxPool2x2Avx512<Io>(xp, yp, w, oh, ow);
          } else {
            MaxPool2x2Body<Io>(xp, yp, w, oh, ow);
          }
        }
      });
      return;
    }
    ParallelFor(planes, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p)
        for (int64_t r = 0; r < oh; ++r)
          for (int64_t q = 0; q < ow; ++q) {
            const T* win = xs + p * h * w + r * kh * w + q * kw;
            T best = win[0];
            float best_v = Io::Load(best);
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t c = 0; c < kw; ++c) {
                const float v = Io::Load(win[a * w + c]);
                if (v > best_v) {
                  best_v = v;
                  best = win[a * w + c];
                }
              }
            ys[(p * oh + r) * ow + q] = best;
          }
    });
  });
}

// channel_block = 16 or 8, 2x2/2 windows tiling the input (the training step's pools,
// passes/conv_layout_train.cc): per channel lane the first maximum in scan order, as
// MaxPool2x2Body and the blocked MaxPoolGrad. Two sequential passes per output row, the first
// input row into Y's row then the second against it (reading both rows at once kept two streams
// 1-2 KiB apart and ran at half the bandwidth, as in MaxPoolGrad2x2BlockedBody). CIFAR-style
// CNN's two training-step pools, batch 256, alternated runs: fp32 2.35-2.5 ms against oneDNN's
// blocked pooling's 3.3-4.4; bf16 0.7-1.1 against 0.86-0.97.
template <typename Io, int kLanes>
[[gnu::always_inline]] inline void MaxPool2x2BlockedBody(const typename Io::T* x, typename Io::T* y,
                                                         int64_t w, int64_t oh, int64_t ow) {
  using T = typename Io::T;
  const int64_t row = w * kLanes, n = ow * kLanes;
  for (int64_t r = 0; r < oh; ++r) {
    const T* x0 = x + 2 * r * row;
    const T* x1 = x0 + row;
    T* yr = y + r * n;
    for (int64_t q = 0; q < ow; ++q) {
      const int64_t i = 2 * q * kLanes, o = q * kLanes;
#pragma omp simd
      for (int l = 0; l < kLanes; ++l)
        yr[o + l] = Io::Load(x0[i + kLanes + l]) > Io::Load(x0[i + l]) ? x0[i + kLanes + l] : x0[i + l];
    }
    for (int64_t q = 0; q < ow; ++q) {
      const int64_t i = 2 * q * kLanes, o = q * kLanes;
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        float m = Io::Load(yr[o + l]);
        T best = yr[o + l];
        const float c = Io::Load(x1[i + l]), d = Io::Load(x1[i + kLanes + l]);
        const bool tc = c > m;
        m = tc ? c : m;
        best = tc ? x1[i + l] : best;
        yr[o + l] = d > m ? x1[i + kLanes + l] : best;
      }
    }
  }
}

template <typename Io, int kLanes>
MT_TARGET_AVX512 void MaxPool2x2BlockedAvx512(const typename Io::T* x, typename Io::T* y, int64_t w,
                                              int64_t oh, int64_t ow) {
  MaxPool2x2BlockedBody<Io, kLanes>(x, y, w, oh, ow);
}

// The output rows and columns of blocked `x` under the node's window when it is 2x2/2 tiling
// the input (the loop below), else {-1, -1}.
std::pair<int64_t, int64_t> Blocked2x2Output(const KernelContext& ctx, const TensorView& x, int64_t lanes) {
  if (x.rank() != 5 || x.dims.back() != lanes) return {-1, -1};
  TensorView logical = x;
  logical.dims = dnnl_util::UnblockedDims(x.dims);
  absl::StatusOr<WindowGeometry> g = PoolGeometry(ctx, logical);
  if (!g.ok()) return {-1, -1};  // the oneDNN path reports it
  if (!TilesInput2D(*g, logical.dims) || g->kernel[0] != 2 || g->kernel[1] != 2) return {-1, -1};
  return {g->out[0], g->out[1]};
}

template <int kLanes>
absl::Status MaxPool2x2Blocked(KernelContext& ctx, const TensorView& x, TensorView& y, int64_t oh,
                               int64_t ow) {
  const int64_t planes = x.dims[0] * x.dims[1], h = x.dims[2], w = x.dims[3];
  if (y.numel() != planes * oh * ow * kLanes) return ctx.Error("output allocated with unexpected dims");
  return cpu::DispatchFloat(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    ParallelFor(planes, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* xp = x.as<T>() + p * h * w * kLanes;
        T* yp = y.as<T>() + p * oh * ow * kLanes;
        if (cpu::Avx512Enabled()) {
          MaxPool2x2BlockedAvx512<Io, kLanes>(xp, yp, w, oh, ow);
        } else {
          MaxPool2x2BlockedBody<Io, kLanes>(xp, yp, w, oh, ow);
        }
      }
    });
  });
}

class PoolKernel final : public OpKernel {
 public:
  explicit PoolKernel(bool is_max) : is_max_(is_max) {}

  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* x = ctx.input(0);
    TensorView* y = ctx.output(0);
    if (x == nullptr || y == nullptr) return ctx.Error("needs X and Y");
    if (y->dtype != x->dtype) return ctx.Error("X and Y dtypes differ");
    if (y->numel() == 0) return absl::OkStatus();
    if (TensorView* ind = ctx.output(1); is_max_ && ind != nullptr) {
      if (ind->dtype != DType::kI64 || ind->dims != y->dims)
        return ctx.Error("Indices must be int64 with Y's shape");
      return MaxPoolWithIndices(ctx, *x, *y, *ind);
    }
    Layout layout = Layout::kChannelsFirst;
    if (ctx.node().attr_int("channels_last", 0) != 0) layout = Layout::kChannelsLast;
    if (is_max_ && layout == Layout::kChannelsFirst && ctx.node().attr_int("channel_block", 0) == 0)
      if (std::optional<absl::Status> done = MaxPoolDisjoint2D(ctx, *x, *y)) return *done;
    const int64_t block = ctx.node().attr_int("channel_block", 0);
    if (block != 0) {
      if (!dnnl_util::SupportedChannelBlock(block) || layout != Layout::kChannelsFirst)
        return ctx.Error(absl::StrCat("unsupported channel_block ", block,
                                      " (16 or 8, without channels_last)"));
      layout = Layout::kBlocked;
      if (is_max_) {  // the 2x2/2 loop, its geometry worked out once per X shape
        if (x->dims != blocked_x_dims_) {
          blocked_x_dims_ = x->dims;
          blocked_out_ = Blocked2x2Output(ctx, *x, block);
        }
        if (blocked_out_.first >= 0)
          return block == 8 ? MaxPool2x2Blocked<8>(ctx, *x, *y, blocked_out_.first, blocked_out_.second)
                            : MaxPool2x2Blocked<16>(ctx, *x, *y, blocked_out_.first, blocked_out_.second);
      }
    }
    std::vector<int64_t>& key = key_;
    ShapeKey(ctx, &key);
    PoolEntry* e = cache_.Find(key);
    if (e == nullptr) {
      TensorView logical = *x;
      if (layout == Layout::kChannelsLast && x->rank() < 3)
        return ctx.Error("channels_last X must be [N, spatial..., C]");
      if (layout == Layout::kBlocked && (x->rank() < 4 || x->dims.back() != block))
        return ctx.Error(absl::StrCat("channel-blocked X must be [N, C/", block, ", spatial..., ",
                                      block, "]"));
      logical.dims = dnnl_util::LogicalDims(x->dims, layout);
      MT_ASSIGN_OR_RETURN(auto built, BuildPool(ctx, logical, is_max_, layout, block));
      e = cache_.Insert(key, std::move(built));
    }
    if (y->dims != e->y_dims) return ctx.Error("output allocated with unexpected dims");
    staging_.Begin();
    const void* xp = staging_.Input(*x);
    void* yp = staging_.Output(*y);
    MT_RETURN_IF_ERROR(Guard(ctx, "running pooling", [&] {
      dnnl_util::Bind(e->prim.at(DNNL_ARG_SRC), xp);
      dnnl_util::Bind(e->prim.at(DNNL_ARG_DST), yp);
      e->prim.Execute();
      dnnl_util::Stream().wait();
    }));
    if (!e->rescale.empty()) {
      const DType ct = dnnl_util::ComputeType(y->dtype);
      const int64_t plane = static_cast<int64_t>(e->rescale.size());
      const int64_t total = y->numel();
      // Consecutive elements of one spatial position: C of them channels-last, the block's
      // channels blocked, else 1.
      const int64_t run = layout == Layout::kChannelsFirst ? 1 : y->dims.back();
      for (int64_t i = 0; i < total; ++i)
        if (float f = e->rescale[(i / run) % plane]; f != 1.0f)
          cpu::StoreFromFloat(ct, yp, i, cpu::LoadAsFloat(ct, yp, i) * f);
    }
    staging_.Finish();
    return absl::OkStatus();
  }

 private:
  bool is_max_;
  ShapeCache<PoolEntry> cache_;
  std::vector<int64_t> key_;  // the last call's cache key (its capacity reused)
  Fp32Staging staging_;
  std::vector<int64_t> blocked_x_dims_;           // the blocked 2x2 loop's last X shape
  std::pair<int64_t, int64_t> blocked_out_{-1, -1};  // and its output rows, columns (-1: not 2x2/2)
};

// Channels-last GlobalAveragePool: per image, the mean of its [sp, C] rows, accumulated in fp32.
absl::Status GlobalAveragePoolChannelsLast(KernelContext& ctx, const TensorView& x, TensorView& y) {
  const int64_t n = x.dims[0], c = x.dims.back();
  const int64_t rows = n == 0 || c == 0 ? 0 : x.numel() / (n * c);
  if (rows == 0 && n * c > 0) return ctx.Error("global pooling over an empty spatial extent");
#pragma omp parallel for schedule(static) if (x.numel() > (1 << 15))
  for (int64_t b = 0; b < n; ++b) {
    std::vector<float> acc(c, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t ch = 0; ch < c; ++ch) acc[ch] += cpu::LoadAsFloat(x.dtype, x.data, (b * rows + r) * c + ch);
    for (int64_t ch = 0; ch < c; ++ch)
      cpu::StoreFromFloat(y.dtype, y.data, b * c + ch, acc[ch] / static_cast<float>(rows));
  }
  return absl::OkStatus();
}

// GlobalAveragePool / GlobalMaxPool: one reduction per (n, c) plane, accumulated in fp32.
template <bool kMax>
absl::Status GlobalPool(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("needs X and Y");
  if (x->rank() < 3) return ctx.Error("X must be [N, C, spatial...]");
  if (y->dtype != x->dtype) return ctx.Error("X and Y dtypes differ");
  if (ctx.node().attr_int("channel_block", 0) != 0)
    return ctx.Error("global pools take no channel_block");
  if (!kMax && ctx.node().attr_int("channels_last", 0) != 0)
    return GlobalAveragePoolChannelsLast(ctx, *x, *y);
  const int64_t planes = x->dims[0] * x->dims[1];
  const int64_t plane = planes == 0 ? 0 : x->numel() / planes;
  if (plane == 0 && planes > 0) return ctx.Error("global pooling over an empty spatial extent");
#pragma omp parallel for schedule(static) if (x->numel() > (1 << 15))
  for (int64_t p = 0; p < planes; ++p) {
    float acc = kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
    for (int64_t i = 0; i < plane; ++i) {
      float v = cpu::LoadAsFloat(x->dtype, x->data, p * plane + i);
      acc = kMax ? (v > acc || std::isnan(v) ? v : acc) : acc + v;
    }
    cpu::StoreFromFloat(y->dtype, y->data, p, kMax ? acc : acc / static_cast<float>(plane));
  }
  return absl::OkStatus();
}

KernelFactory PoolFactory(bool is_max) {
  return [is_max](const Node&) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new PoolKernel(is_max));
  };
}

}  // namespace

MT_REGISTER_KERNELS(dnnl_pool) {
  r.Register({"MaxPool", "", DeviceType::kCPU, kFloatTypes, 0, PoolFactory(true)});
  r.Register({"AveragePool", "", DeviceType::kCPU, kFloatTypes, 0, PoolFactory(false)});
  r.Register({"GlobalAveragePool", "", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(GlobalPool<false>)});
  r.Register({"GlobalMaxPool", "", DeviceType::kCPU, kFloatTypes, 0, FnKernel(GlobalPool<true>)});
  // The channels_last variants (graph/ops/fused_conv_ops.cc).
  r.Register({"MaxPool", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0, PoolFactory(true)});
  r.Register({"AveragePool", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0, PoolFactory(false)});
  r.Register({"GlobalAveragePool", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(GlobalPool<false>)});
}

}  // namespace mixtrain
