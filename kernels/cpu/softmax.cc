// CPU kernels for Softmax and LogSoftmax in fp32/fp16/bf16 (float arithmetic, stable max-shifted
// form from kernels/common/reduce.h).
//
// The two ONNX definitions differ: up to opset 12 the input is coerced to 2-D at `axis`
// ([prod(dims[:axis]), prod(dims[axis:])], default axis 1) and each row is normalized; from opset
// 13 only the single `axis` is normalized (default -1). They agree when axis is the last dim.
// Contiguous rows use the shared row functor; a non-last axis is handled a block of inner columns
// at a time with float buffers for max and sum, so the inner loops stay vectorizable.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "graph/ops/movement_params.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"
#include "kernels/cpu/rows_avx512.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

constexpr int64_t kGrain = 16384;
constexpr int64_t kChunk = 512;

// Rows [b, e) of a contiguous softmax, compiled for the baseline and for AVX-512 (where the
// exp polynomial inlines into 16-lane loops and attention's rows of 32 are two vectors).
template <typename Io, bool kLog>
[[gnu::always_inline]] inline void SoftmaxRowRange(const typename Io::T* x, typename Io::T* y,
                                                   int64_t b, int64_t e, int64_t n, float* scratch) {
  for (int64_t r = b; r < e; ++r) red::SoftmaxRow<Io, Io, kLog>(x + r * n, y + r * n, n, scratch);
}
template <typename Io, bool kLog>
MT_TARGET_AVX512 void SoftmaxRowRangeAvx512(const typename Io::T* x, typename Io::T* y, int64_t b,
                                            int64_t e, int64_t n, float* scratch) {
  SoftmaxRowRange<Io, kLog>(x, y, b, e, n, scratch);
}

// fp32 and bf16 rows short enough for rows_avx512.h.
template <typename Io>
bool ShortRowsAvx512(int64_t n) {
  return Avx512Enabled() && n <= avx512::kMaxSoftmaxRow &&
         (std::is_same_v<Io, red::F32Io> || std::is_same_v<Io, red::BF16Io>);
}

template <typename Io, bool kLog>
void SoftmaxRows(const typename Io::T* x, typename Io::T* y, int64_t rows, int64_t n) {
  ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
              [&](int64_t b, int64_t e) {
                if constexpr (!std::is_same_v<Io, red::F16Io>) {
                  if (ShortRowsAvx512<Io>(n))
                    return avx512::SoftmaxRows(x + b * n, y + b * n, e - b, n, kLog);
                }
                std::vector<float> scratch(n);
                if (Avx512Enabled())
                  SoftmaxRowRangeAvx512<Io, kLog>(x, y, b, e, n, scratch.data());
                else
                  SoftmaxRowRange<Io, kLog>(x, y, b, e, n, scratch.data());
              });
}

// Softmax over the middle axis of [outer, n, inner] with inner > 1.
template <typename Io, bool kLog>
void SoftmaxStrided(const typename Io::T* x, typename Io::T* y, AxisView v) {
  const int64_t chunks = (v.inner + kChunk - 1) / kChunk;
  ParallelFor(
      v.outer * chunks,
      std::max<int64_t>(1, kGrain / std::max<int64_t>(v.n * std::min(v.inner, kChunk), 1)),
      [&](int64_t b, int64_t e) {
        std::vector<float> mx(kChunk), sum(kChunk);
        for (int64_t w = b; w < e; ++w) {
          const int64_t o = w / chunks, i0 = (w % chunks) * kChunk;
          const int64_t len = std::min(kChunk, v.inner - i0);
          const int64_t base = o * v.n * v.inner + i0;
          std::fill(mx.begin(), mx.begin() + len, -INFINITY);
          std::fill(sum.begin(), sum.begin() + len, 0.0f);
          for (int64_t r = 0; r < v.n; ++r) {
            const typename Io::T* src = x + base + r * v.inner;
            for (int64_t i = 0; i < len; ++i) {
              float val = Io::Load(src[i]);
              // NaN wins, like the row functor.
              mx[i] = (val > mx[i] || val != val || mx[i] != mx[i]) ? val : mx[i];
            }
          }
          for (int64_t r = 0; r < v.n; ++r) {
            const typename Io::T* src = x + base + r * v.inner;
            for (int64_t i = 0; i < len; ++i) sum[i] += red::FastExp(Io::Load(src[i]) - mx[i]);
          }
          if (kLog) {
            for (int64_t i = 0; i < len; ++i) sum[i] = std::log(sum[i]);
          } else {
            for (int64_t i = 0; i < len; ++i) sum[i] = 1.0f / sum[i];
          }
          for (int64_t r = 0; r < v.n; ++r) {
            const typename Io::T* src = x + base + r * v.inner;
            typename Io::T* dst = y + base + r * v.inner;
            for (int64_t i = 0; i < len; ++i) {
              float val = Io::Load(src[i]);
              dst[i] = kLog ? Io::Store((val - mx[i]) - sum[i])
                            : Io::Store(red::FastExp(val - mx[i]) * sum[i]);
            }
          }
        }
      });
}

template <bool kLog>
absl::Status SoftmaxKernel(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  const bool coerce_2d = ctx.opset() > 0 && ctx.opset() < 13;
  const int64_t rank = std::max<int64_t>(x.rank(), 1);  // a scalar is a row of one
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", coerce_2d ? 1 : -1), rank);
  if (!axis.ok()) return ctx.Error(axis.status().message());
  std::vector<int64_t> dims = x.dims;
  if (dims.empty()) dims.push_back(1);
  AxisView v = ViewAroundAxis(dims, *axis);
  if (coerce_2d) v = {v.outer, v.n * v.inner, 1};
  return DispatchFloat(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    const auto* in = x.as<typename Io::T>();
    auto* out = y.as<typename Io::T>();
    if (v.inner == 1)
      SoftmaxRows<Io, kLog>(in, out, v.outer, v.n);
    else
      SoftmaxStrided<Io, kLog>(in, out, v);
  });
}

// --- MaskedSoftmax (fuse_softmax): Softmax(Where(mask, scale * X, fill)) over the last axis ---

struct MaskedRows {
  int64_t n = 0;                   // row length (X's last dim)
  float scale = 1, fill = 0;
  // Inline: SoftmaxGrad builds these on every call of the training step, without allocating.
  absl::InlinedVector<int64_t, 8> row_dims;   // X's leading dims
  absl::InlinedVector<int64_t, 8> mask_step;  // the mask's stride along each leading dim (0: broadcast)
  int64_t mask_inner = 0;          // the mask's stride along the row: 0 or 1
};

// Calls fn(r, mask_offset) for rows [b, e), walking the leading-dim index like an odometer.
template <typename Fn>
[[gnu::always_inline]] inline void ForEachMaskedRow(const MaskedRows& p, int64_t b, int64_t e,
                                                    const Fn& fn) {
  const int64_t rank = static_cast<int64_t>(p.row_dims.size());
  int64_t idx[8] = {}, off = 0;
  for (int64_t d = rank - 1, q = b; d >= 0; --d) {
    idx[d] = q % p.row_dims[d];
    q /= p.row_dims[d];
    off += idx[d] * p.mask_step[d];
  }
  for (int64_t r = b; r < e; ++r) {
    fn(r, off);
    for (int64_t d = rank - 1; d >= 0; --d) {
      off += p.mask_step[d];
      if (++idx[d] < p.row_dims[d]) break;
      off -= idx[d] * p.mask_step[d];
      idx[d] = 0;
    }
  }
}

// Rows [b, e): the masked, scaled row goes to float scratch v, then the shared row softmax.
template <typename Io>
[[gnu::always_inline]] inline void MaskedRowRange(const MaskedRows& p, const typename Io::T* x,
                                                  const bool* mask, typename Io::T* y, int64_t b,
                                                  int64_t e, float* v, float* scratch) {
  const int64_t n = p.n;
  const auto* mb = reinterpret_cast<const uint8_t*>(mask);  // a bool's byte is 0 or 1
  ForEachMaskedRow(p, b, e, [&](int64_t r, int64_t moff) {
    const typename Io::T* xr = x + r * n;
    const uint8_t* mr = mb + moff;
    if (p.mask_inner == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        v[i] = fm::Select(mr[i] != 0, Io::Load(xr[i]) * p.scale, p.fill);
    } else {
      const bool keep = mr[0] != 0;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) v[i] = fm::Select(keep, Io::Load(xr[i]) * p.scale, p.fill);
    }
    red::SoftmaxRow<red::F32Io, Io, false>(v, y + r * n, n, scratch);
  });
}
template <typename Io>
MT_TARGET_AVX512 void MaskedRowRangeAvx512(const MaskedRows& p, const typename Io::T* x,
                                           const bool* mask, typename Io::T* y, int64_t b,
                                           int64_t e, float* v, float* scratch) {
  MaskedRowRange<Io>(p, x, mask, y, b, e, v, scratch);
}

// Rows of X over its last axis, with the bool mask's strides aligned to X's dims (right-aligned
// numpy broadcast).
absl::StatusOr<MaskedRows> RowsWithMask(const KernelContext& ctx, const TensorView& x,
                                        const TensorView& mask) {
  if (mask.dtype != DType::kBool) return ctx.Error("mask must be bool");
  if (x.rank() < 1 || mask.rank() > x.rank())
    return ctx.Error("X must have rank >= 1 and at least the mask's rank");
  MaskedRows p;
  p.n = x.dims.back();
  const int64_t r = x.rank(), lead = r - mask.rank();
  absl::InlinedVector<int64_t, 8> step(r, 0);
  for (int64_t d = r - 1, stride = 1; d >= lead; --d) {
    const int64_t md = mask.dims[d - lead];
    if (md != 1 && md != x.dims[d])
      return ctx.Error(absl::StrCat("mask dim ", d - lead, " (", md, ") does not broadcast to X"));
    step[d] = md == 1 ? 0 : stride;
    stride *= md;
  }
  p.mask_inner = step[r - 1];
  p.row_dims.assign(x.dims.begin(), x.dims.end() - 1);
  p.mask_step.assign(step.begin(), step.end() - 1);
  return p;
}

// The start of each row's mask for rows [b, e): the short-row kernels' form (rows_avx512.h).
absl::InlinedVector<const uint8_t*, 64> RowMasks(const MaskedRows& p, const bool* mask, int64_t b,
                                                 int64_t e) {
  const auto* mb = reinterpret_cast<const uint8_t*>(mask);  // a bool's byte is 0 or 1
  absl::InlinedVector<const uint8_t*, 64> rows(e - b);
  ForEachMaskedRow(p, b, e, [&](int64_t r, int64_t moff) { rows[r - b] = mb + moff; });
  return rows;
}

absl::Status MaskedSoftmaxKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* mask = ctx.input(1);
  if (x == nullptr || mask == nullptr) return ctx.Error("needs inputs X and mask");
  MT_ASSIGN_OR_RETURN(MaskedRows p, RowsWithMask(ctx, *x, *mask));
  p.scale = ctx.node().attr_float("scale", 1.0f);
  p.fill = ctx.node().attr_float("fill", 0.0f);
  const int64_t rows = p.n > 0 ? x->numel() / p.n : 0;
  return DispatchFloat(ctx, x->dtype, [&](auto io) {
    using Io = decltype(io);
    const auto* in = x->as<typename Io::T>();
    auto* out = ctx.output(0)->as<typename Io::T>();
    ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(p.n, 1)),
                [&](int64_t b, int64_t e) {
                  if constexpr (!std::is_same_v<Io, red::F16Io>) {
                    if (ShortRowsAvx512<Io>(p.n)) {
                      const auto rows_mask = RowMasks(p, mask->as<bool>(), b, e);
                      return avx512::MaskedSoftmaxRows(in + b * p.n, out + b * p.n, e - b, p.n,
                                                       rows_mask.data(), p.mask_inner, p.scale,
                                                       p.fill);
                    }
                  }
                  std::vector<float> v(p.n), scratch(p.n);
                  if (Avx512Enabled())
                    MaskedRowRangeAvx512<Io>(p, in, mask->as<bool>(), out, b, e, v.data(),
                                             scratch.data());
                  else
                    MaskedRowRange<Io>(p, in, mask->as<bool>(), out, b, e, v.data(),
                                       scratch.data());
                });
  });
}

// --- SoftmaxGrad (autodiff of Softmax over the last axis and of MaskedSoftmax) ---
// dX = scale * Y * (dY - sum(dY * Y)) per row, and 0 where the mask (if any) is false: one pass
// to sum and one to write, where the rule it replaces took five ops and four full-size temporaries.

// Row r of n elements; `m` is the row's mask (null: none), `m_inner` its stride along the row.
template <typename Io>
[[gnu::always_inline]] inline void SoftmaxGradRow(const typename Io::T* dy, const typename Io::T* y,
                                                  typename Io::T* dx, int64_t n, float scale,
                                                  const uint8_t* m, int64_t m_inner) {
  float dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < n; ++i) dot += Io::Load(dy[i]) * Io::Load(y[i]);
  if (m == nullptr || (m_inner == 0 && m[0] != 0)) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      dx[i] = Io::Store(scale * Io::Load(y[i]) * (Io::Load(dy[i]) - dot));
  } else if (m_inner == 0) {
    for (int64_t i = 0; i < n; ++i) dx[i] = Io::Store(0.0f);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      dx[i] = Io::Store(fm::Select(m[i] != 0, scale * Io::Load(y[i]) * (Io::Load(dy[i]) - dot),
                                   0.0f));
  }
}

template <typename Io>
[[gnu::always_inline]] inline void SoftmaxGradRange(const MaskedRows& p, const typename Io::T* dy,
                                                    const typename Io::T* y, const uint8_t* mask,
                                                    typename Io::T* dx, int64_t b, int64_t e) {
  const int64_t n = p.n;
  if (mask == nullptr) {
    for (int64_t r = b; r < e; ++r)
      SoftmaxGradRow<Io>(dy + r * n, y + r * n, dx + r * n, n, p.scale, nullptr, 0);
    return;
  }
  ForEachMaskedRow(p, b, e, [&](int64_t r, int64_t moff) {
    SoftmaxGradRow<Io>(dy + r * n, y + r * n, dx + r * n, n, p.scale, mask + moff, p.mask_inner);
  });
}
template <typename Io>
MT_TARGET_AVX512 void SoftmaxGradRangeAvx512(const MaskedRows& p, const typename Io::T* dy,
                                             const typename Io::T* y, const uint8_t* mask,
                                             typename Io::T* dx, int64_t b, int64_t e) {
  SoftmaxGradRange<Io>(p, dy, y, mask, dx, b, e);
}

// ai.mixtrain.SoftmaxGrad(dY, Y[, mask]) -> dX; attribute scale (default 1).
absl::Status SoftmaxGradKernel(KernelContext& ctx) {
  const TensorView* dy = ctx.input(0);
  const TensorView* y = ctx.input(1);
  const TensorView* mask = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
  if (dy == nullptr || y == nullptr) return ctx.Error("needs inputs dY and Y");
  if (dy->dims != y->dims || dy->dtype != y->dtype)
    return ctx.Error("dY and Y must have the same shape and type");
  MaskedRows p;
  if (mask != nullptr) {
    MT_ASSIGN_OR_RETURN(p, RowsWithMask(ctx, *y, *mask));
  } else {
    if (y->rank() < 1) return ctx.Error("Y must have rank >= 1");
    p.n = y->dims.back();
  }
  p.scale = ctx.node().attr_float("scale", 1.0f);
  const int64_t rows = p.n > 0 ? y->numel() / p.n : 0;
  const auto* mb = mask != nullptr ? reinterpret_cast<const uint8_t*>(mask->as<bool>()) : nullptr;
  return DispatchFloat(ctx, y->dtype, [&](auto io) {
    using Io = decltype(io);
    const auto* g = dy->as<typename Io::T>();
    const auto* out = y->as<typename Io::T>();
    auto* dx = ctx.output(0)->as<typename Io::T>();
    ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(p.n, 1)),
                [&](int64_t b, int64_t e) {
                  if constexpr (!std::is_same_v<Io, red::F16Io>) {
                    if (ShortRowsAvx512<Io>(p.n)) {
                      if (mb == nullptr)
                        return avx512::SoftmaxGradRows(g + b * p.n, out + b * p.n, dx + b * p.n,
                                                       e - b, p.n, p.scale, nullptr, 0);
                      const auto rows_mask = RowMasks(p, mask->as<bool>(), b, e);
                      return avx512::SoftmaxGradRows(g + b * p.n, out + b * p.n, dx + b * p.n,
                                                     e - b, p.n, p.scale, rows_mask.data(),
                                                     p.mask_inner);
                    }
                  }
                  if (Avx512Enabled())
                    SoftmaxGradRangeAvx512<Io>(p, g, out, mb, dx, b, e);
                  else
                    SoftmaxGradRange<Io>(p, g, out, mb, dx, b, e);
                });
  });
}

}  // namespace

MT_REGISTER_KERNELS(cpu_softmax) {
  r.Register({"MaskedSoftmax", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(MaskedSoftmaxKernel)});
  r.Register({"SoftmaxGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(SoftmaxGradKernel)});
  r.Register({"Softmax", "", DeviceType::kCPU, kFloatTypes, 0, FnKernel(SoftmaxKernel<false>)});
  r.Register({"LogSoftmax", "", DeviceType::kCPU, kFloatTypes, 0, FnKernel(SoftmaxKernel<true>)});
}

}  // namespace mixtrain::cpu
