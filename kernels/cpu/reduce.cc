// CPU kernels for reductions along axes: ReduceSum, ReduceMean, ReduceMax, ReduceSumSquare,
// ArgMax and CumSum, in fp32/fp16/bf16 (load the storage type, accumulate wide, store with
// round-to-nearest-even), f64, and i32/i64.
//
// A reduction is first simplified by merging neighbouring dims that are both reduced or both kept
// (and dropping dims of size 1). Most real reductions then have a single reduced block,
// [outer, R, inner]: with inner == 1 each output is a contiguous row sum (a vectorized horizontal
// reduction); with inner > 1 whole contiguous inner rows are accumulated into a buffer (vectorized
// along inner). Anything else falls back to an index walk. Outer rows go to ParallelFor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "graph/ops/movement_params.h"
#include "graph/ops/reduce_params.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

// Elements one thread should at least get before work is split.
constexpr int64_t kGrain = 32768;
// Width of the inner-axis accumulator buffers (fits L1 in double).
constexpr int64_t kChunk = 1024;

enum class ReduceKind { kSum, kMean, kMax, kSumSquare };

// The arithmetic of one reduction kind for one storage type. C is what Io loads to (float,
// double or int64); sums accumulate in double (or int64), max in C.
// OutIo: the output's storage, Io's unless the output is wider (ai.mixtrain ReduceSum's `to`:
// bf16 in, fp32 out, AMP's bias gradients).
template <typename Io, ReduceKind K, typename OutIo = Io>
struct ReduceOp {
  using T = typename Io::T;
  using OutT = typename OutIo::T;
  using C = decltype(Io::Load(T{}));
  static constexpr bool kMax = K == ReduceKind::kMax;
  using Acc = std::conditional_t<kMax, C, std::conditional_t<std::is_integral_v<C>, int64_t, double>>;

  static C Load(T v) { return Io::Load(v); }
  static Acc Init() {
    if constexpr (!kMax) return Acc{0};
    else if constexpr (std::is_integral_v<C>) return std::numeric_limits<C>::lowest();
    else return -std::numeric_limits<C>::infinity();
  }
  static Acc Map(C v) {
    if constexpr (K == ReduceKind::kSumSquare) return static_cast<Acc>(v) * static_cast<Acc>(v);
    else return static_cast<Acc>(v);
  }
  // Max propagates NaN like numpy: once the accumulator is NaN nothing compares greater.
  static Acc Combine(Acc a, Acc v) {
    if constexpr (kMax) return (v > a || v != v) ? v : a;
    else return a + v;
  }
  static OutT Finish(Acc a, int64_t count) {
    if constexpr (K == ReduceKind::kMean) {
      if constexpr (std::is_integral_v<Acc>) a = count > 0 ? a / count : 0;
      else a = a / static_cast<Acc>(count);  // 0/0 = NaN for an empty set, like numpy
    }
    return OutIo::Store(static_cast<C>(a));
  }
};

struct Group {
  int64_t size;
  bool reduced;
};

// Inline up to rank 8: a reduction allocates nothing after its kernel's first call.
using Groups = absl::InlinedVector<Group, 8>;
using DimList = absl::InlinedVector<int64_t, 8>;

Groups MergeGroups(const std::vector<int64_t>& dims, const std::vector<bool>& mask) {
  Groups g;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!g.empty() && g.back().reduced == mask[i])
      g.back().size *= dims[i];
    else
      g.push_back({dims[i], static_cast<bool>(mask[i])});
  }
  return g;
}

// The reduction of one contiguous run of n inputs, folded into a.
template <typename Op>
typename Op::Acc FoldRow(typename Op::Acc a, const typename Op::T* row, int64_t n) {
  if constexpr (Op::kMax) {
    for (int64_t r = 0; r < n; ++r) a = Op::Combine(a, Op::Map(Op::Load(row[r])));
  } else {
    MT_SIMD_SUM(a)
    for (int64_t r = 0; r < n; ++r) a += Op::Map(Op::Load(row[r]));
  }
  return a;
}

// Each output is the reduction of one contiguous row of R inputs.
template <typename Op>
void ReduceRows(const typename Op::T* x, typename Op::OutT* y, int64_t outer, int64_t R) {
  ParallelFor(outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(R, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t o = b; o < e; ++o) {
                  const typename Op::T* row = x + o * R;
                  y[o] = Op::Finish(FoldRow<Op>(Op::Init(), row, R), R);
                }
              });
}

// Few outputs over many rows (a bias gradient: [tokens, features] summed over tokens): the rows
// are cut into S slices, a fixed number that does not depend on the thread count (so neither
// does the result), each slice summed into its own partial row in parallel, then the partials
// combined in slice order. Column chunks alone would give such a reduction one work item, run on
// one thread.
template <typename Op>
void ReduceColumnsSliced(const typename Op::T* x, typename Op::OutT* y, int64_t outer, int64_t R,
                         int64_t inner) {
  using Acc = typename Op::Acc;
  const int64_t S = std::clamp<int64_t>(R / 64, 1, 16);
  // The partial rows, in a buffer of the calling thread's that only grows (the workers write
  // through `partial`: a thread_local named inside the loop would be each worker's own).
  thread_local std::vector<Acc> part;
  if (part.size() < static_cast<size_t>(outer * S * inner)) part.resize(static_cast<size_t>(outer * S * inner));
  Acc* const partial = part.data();
  ParallelFor(outer * S, 1, [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      const int64_t o = w / S, sl = w % S;
      Acc* acc = partial + w * inner;
      std::fill(acc, acc + inner, Op::Init());
      for (int64_t r = R * sl / S; r < R * (sl + 1) / S; ++r) {
        const typename Op::T* src = x + (o * R + r) * inner;
        for (int64_t i = 0; i < inner; ++i) acc[i] = Op::Combine(acc[i], Op::Map(Op::Load(src[i])));
      }
    }
  });
  for (int64_t o = 0; o < outer; ++o) {
    const Acc* first = partial + o * S * inner;
    for (int64_t i = 0; i < inner; ++i) {
      Acc a = first[i];
      for (int64_t sl = 1; sl < S; ++sl) a = Op::Combine(a, first[sl * inner + i]);
      y[o * inner + i] = Op::Finish(a, R);
    }
  }
}

// Each output is the reduction of R contiguous rows of `inner` elements (stride inner), summed
// row by row into a buffer so the inner loop is a plain vectorizable elementwise update.
// Few outputs over many rows go to ReduceColumnsSliced.
template <typename Op>
void ReduceColumns(const typename Op::T* x, typename Op::OutT* y, int64_t outer, int64_t R,
                   int64_t inner) {
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  if (outer * chunks < 4 && R >= 256 && inner <= 4 * kChunk) {
    ReduceColumnsSliced<Op>(x, y, outer, R, inner);
    return;
  }
  const int64_t per_item = R * std::min(inner, kChunk);
  ParallelFor(outer * chunks, std::max<int64_t>(1, kGrain / std::max<int64_t>(per_item, 1)),
              [&](int64_t b, int64_t e) {
                typename Op::Acc acc[kChunk];
                for (int64_t w = b; w < e; ++w) {
                  const int64_t o = w / chunks, i0 = (w % chunks) * kChunk;
                  const int64_t len = std::min(kChunk, inner - i0);
                  std::fill(acc, acc + len, Op::Init());
                  for (int64_t r = 0; r < R; ++r) {
                    const typename Op::T* src = x + (o * R + r) * inner + i0;
                    for (int64_t i = 0; i < len; ++i)
                      acc[i] = Op::Combine(acc[i], Op::Map(Op::Load(src[i])));
                  }
                  typename Op::OutT* dst = y + o * inner + i0;
                  for (int64_t i = 0; i < len; ++i) dst[i] = Op::Finish(acc[i], R);
                }
              });
}

// Any pattern of reduced groups: each output walks its reduced index space with an odometer.
// When the last group is reduced (a bias gradient's ReduceSum over N, H, W of [N, C, H, W]),
// the odometer walks only the other reduced groups and each step folds a contiguous run.
template <typename Op>
void ReduceGeneral(const typename Op::T* x, typename Op::OutT* y, const Groups& g, int64_t out_n,
                   int64_t count) {
  const int64_t ng = static_cast<int64_t>(g.size());
  DimList stride(ng);
  for (int64_t s = 1, i = ng - 1; i >= 0; --i) {
    stride[i] = s;
    s *= g[i].size;
  }
  DimList kept, red;
  for (int64_t i = 0; i < ng; ++i) (g[i].reduced ? red : kept).push_back(i);
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(count, 1));
  // Each output q: its base offset from the kept groups, then `steps` odometer steps over the
  // groups in `walk`, folding at each offset with `fold`.
  auto reduce = [&](const DimList& walk, int64_t steps, auto fold) {
    ParallelFor(out_n, grain, [&](int64_t b, int64_t e) {
      DimList idx(walk.size());
      for (int64_t q = b; q < e; ++q) {
        int64_t base = 0;
        for (int64_t k = static_cast<int64_t>(kept.size()) - 1, rem = q; k >= 0; --k) {
          base += (rem % g[kept[k]].size) * stride[kept[k]];
          rem /= g[kept[k]].size;
        }
        typename Op::Acc a = Op::Init();
        std::fill(idx.begin(), idx.end(), 0);
        for (int64_t n = 0; n < steps; ++n) {
          int64_t off = base;
          for (size_t j = 0; j < walk.size(); ++j) off += idx[j] * stride[walk[j]];
          a = fold(a, off);
          for (int64_t j = static_cast<int64_t>(walk.size()) - 1; j >= 0; --j) {
            if (++idx[j] < g[walk[j]].size) break;
            idx[j] = 0;
          }
        }
        y[q] = Op::Finish(a, count);
      }
    });
  };
  if (g.back().reduced) {
    const int64_t run = g.back().size;
    red.pop_back();
    reduce(red, count / run,
           [&](typename Op::Acc a, int64_t off) { return FoldRow<Op>(a, x + off, run); });
    return;
  }
  reduce(red, count, [&](typename Op::Acc a, int64_t off) {
    return Op::Combine(a, Op::Map(Op::Load(x[off])));
  });
}

template <typename Op>
void RunReduce(const TensorView& xv, TensorView& yv, const std::vector<bool>& mask) {
  const auto* x = xv.as<typename Op::T>();
  auto* y = yv.as<typename Op::OutT>();
  const int64_t out_n = yv.numel();
  int64_t count = 1;
  for (int64_t i = 0; i < xv.rank(); ++i)
    if (mask[i]) count *= xv.dims[i];
  if (out_n == 0) return;
  if (count == 0) {  // reducing an empty set: the identity of the reduction
    for (int64_t q = 0; q < out_n; ++q) y[q] = Op::Finish(Op::Init(), 0);
    return;
  }
  const Groups g = MergeGroups(xv.dims, mask);
  int64_t num_reduced = 0, pos = -1;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i].reduced) ++num_reduced, pos = static_cast<int64_t>(i);
  if (num_reduced == 0) {  // nothing (or only size-1 dims) reduced: elementwise
    ReduceRows<Op>(x, y, out_n, 1);
    return;
  }
  if (num_reduced == 1) {
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < pos; ++i) outer *= g[i].size;
    for (size_t i = pos + 1; i < g.size(); ++i) inner *= g[i].size;
    if (inner == 1)
      ReduceRows<Op>(x, y, outer, g[pos].size);
    else
      ReduceColumns<Op>(x, y, outer, g[pos].size, inner);
    return;
  }
  ReduceGeneral<Op>(x, y, g, out_n, count);
}

// The reduced-axes mask is worked out (and the output size checked) on the first call and again
// only when X's dims or non-constant axes change: the steps of a plan make no heap allocation.
template <ReduceKind K>
class ReduceKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView& x = *ctx.input(0);
    TensorView& y = *ctx.output(0);
    const TensorView* axes_in = ctx.input(1);
    if (!ready_ || x.dims != dims_ || (axes_in != nullptr && !ctx.input_constant(1))) {
      ready_ = false;
      std::vector<int64_t> axes;
      if (axes_in != nullptr)
        for (int64_t i = 0; i < axes_in->numel(); ++i) axes.push_back(IntAt(*axes_in, i));
      auto mask = reduce::ReduceMask(ctx.node(), axes_in ? &axes : nullptr, x.rank());
      if (!mask.ok()) return ctx.Error(mask.status().message());
      const bool keepdims = ctx.node().attr_int("keepdims", 1) != 0;
      if (NumElements(reduce::ReducedDims(x.dims, *mask, keepdims)) != y.numel())
        return ctx.Error("output size does not match the reduced input shape");
      mask_ = *std::move(mask);
      dims_ = x.dims;
      ready_ = true;
    }
    if (y.dtype != x.dtype) {  // ai.mixtrain ReduceSum `to` = f32 from bf16/fp16
      if (K != ReduceKind::kSum || y.dtype != DType::kF32 || !IsLowFloat(x.dtype))
        return ctx.Error(absl::StrCat("cannot reduce ", DTypeName(x.dtype), " into ", DTypeName(y.dtype)));
      if (x.dtype == DType::kBF16)
        RunReduce<ReduceOp<red::BF16Io, K, red::F32Io>>(x, y, mask_);
      else
        RunReduce<ReduceOp<red::F16Io, K, red::F32Io>>(x, y, mask_);
      return absl::OkStatus();
    }
    return DispatchNumeric(ctx, x.dtype, [&](auto io) { RunReduce<ReduceOp<decltype(io), K>>(x, y, mask_); });
  }

 private:
  bool ready_ = false;
  std::vector<int64_t> dims_;
  std::vector<bool> mask_;
};


// ArgMax along one axis; NaN counts as the largest value (numpy's rule), ties go to the first
// index, or the last with select_last_index.
template <typename Io>
void ArgMaxImpl(const typename Io::T* x, int64_t* y, AxisView v, bool last) {
  using C = decltype(Io::Load(typename Io::T{}));
  auto better = [last](C val, C best) {
    return last ? (val >= best || val != val) : (val > best || (val != val && best == best));
  };
  const int64_t chunks = (v.inner + kChunk - 1) / kChunk;
  ParallelFor(v.outer * chunks, std::max<int64_t>(1, kGrain / std::max<int64_t>(v.n * std::min(v.inner, kChunk), 1)),
              [&](int64_t b, int64_t e) {
                std::vector<C> best(kChunk);
                for (int64_t w = b; w < e; ++w) {
                  const int64_t o = w / chunks, i0 = (w % chunks) * kChunk;
                  const int64_t len = std::min(kChunk, v.inner - i0);
                  const typename Io::T* base = x + o * v.n * v.inner + i0;
                  int64_t* out = y + o * v.inner + i0;
                  for (int64_t i = 0; i < len; ++i) {
                    best[i] = Io::Load(base[i]);
                    out[i] = 0;
                  }
                  for (int64_t r = 1; r < v.n; ++r) {
                    const typename Io::T* src = base + r * v.inner;
                    for (int64_t i = 0; i < len; ++i) {
                      C val = Io::Load(src[i]);
                      if (better(val, best[i])) {
                        best[i] = val;
                        out[i] = r;
                      }
                    }
                  }
                }
              });
}

absl::Status ArgMaxKernel(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", 0), x.rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  AxisView v = ViewAroundAxis(x.dims, *axis);
  if (v.n == 0 && v.outer * v.inner > 0) return ctx.Error("ArgMax over an empty axis");
  const bool last = ctx.node().attr_int("select_last_index", 0) != 0;
  int64_t* y = ctx.output(0)->as<int64_t>();
  return DispatchNumeric(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    ArgMaxImpl<Io>(x.as<typename Io::T>(), y, v, last);
  });
}

// Running sums along one axis, accumulated wide (double or int64), vectorized along inner.
template <typename Io>
void CumSumImpl(const typename Io::T* x, typename Io::T* y, AxisView v, bool exclusive,
                bool reverse) {
  using C = decltype(Io::Load(typename Io::T{}));
  using Acc = std::conditional_t<std::is_integral_v<C>, int64_t, double>;
  const int64_t chunks = (v.inner + kChunk - 1) / kChunk;
  ParallelFor(v.outer * chunks, std::max<int64_t>(1, kGrain / std::max<int64_t>(v.n * std::min(v.inner, kChunk), 1)),
              [&](int64_t b, int64_t e) {
                std::vector<Acc> acc(kChunk);
                for (int64_t w = b; w < e; ++w) {
                  const int64_t o = w / chunks, i0 = (w % chunks) * kChunk;
                  const int64_t len = std::min(kChunk, v.inner - i0);
                  std::fill(acc.begin(), acc.begin() + len, Acc{0});
                  for (int64_t k = 0; k < v.n; ++k) {
                    const int64_t r = reverse ? v.n - 1 - k : k;
                    const int64_t off = (o * v.n + r) * v.inner + i0;
                    for (int64_t i = 0; i < len; ++i) {
                      Acc val = static_cast<Acc>(Io::Load(x[off + i]));
                      if (exclusive) {
                        y[off + i] = Io::Store(static_cast<C>(acc[i]));
                        acc[i] += val;
                      } else {
                        acc[i] += val;
                        y[off + i] = Io::Store(static_cast<C>(acc[i]));
                      }
                    }
                  }
                }
              });
}

absl::Status CumSumKernel(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const TensorView* axis_in = ctx.input(1);
  if (axis_in == nullptr || axis_in->numel() != 1)
    return ctx.Error("axis must be a scalar (or 1-element) tensor");
  auto axis = movement::NormalizeAxis(IntAt(*axis_in, 0), x.rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  AxisView v = ViewAroundAxis(x.dims, *axis);
  const bool exclusive = ctx.node().attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.node().attr_int("reverse", 0) != 0;
  TensorView& y = *ctx.output(0);
  return DispatchNumeric(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    CumSumImpl<Io>(x.as<typename Io::T>(), y.as<typename Io::T>(), v, exclusive, reverse);
  });
}

const std::vector<DType> kNumericTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                          DType::kF64, DType::kI32, DType::kI64};

}  // namespace

MT_REGISTER_KERNELS(cpu_reduce) {
  auto add = [&r](const char* op, KernelFn fn) {
    r.Register({op, "", DeviceType::kCPU, kNumericTypes, 0, FnKernel(fn)});
  };
  auto cls = [&r](const char* op, KernelFactory f) { r.Register({op, "", DeviceType::kCPU, kNumericTypes, 0, f}); };
  cls("ReduceSum", ClassKernel<ReduceKernel<ReduceKind::kSum>>());
  // ReduceSum with an fp32 output from bf16/fp16 (`to`; passes/fp32_grad_products.cc).
  r.Register({"ReduceSum", "ai.mixtrain", DeviceType::kCPU, {DType::kBF16, DType::kF16}, 0,
              ClassKernel<ReduceKernel<ReduceKind::kSum>>()});
  cls("ReduceMean", ClassKernel<ReduceKernel<ReduceKind::kMean>>());
  cls("ReduceMax", ClassKernel<ReduceKernel<ReduceKind::kMax>>());
  cls("ReduceSumSquare", ClassKernel<ReduceKernel<ReduceKind::kSumSquare>>());
  add("ArgMax", ArgMaxKernel);
  add("CumSum", CumSumKernel);
}

}  // namespace mixtrain::cpu
