// CPU kernels for the less common reductions: ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp, and ArgMin. Which axes are reduced comes from
// graph/ops/reduce_params.h, shared with the shape rules (so planned shapes and kernels agree).
//
// These ops are rare in training graphs, so they take the simple route: the input is converted
// to double once (CastBuffer, exact for every dtype but huge int64s), reduced with one index walk
// in double, and the result converted back with a single rounding. The hot reductions (Sum, Mean,
// Max, SumSquare) have their vectorized kernels in reduce.cc.
#include <cmath>
#include <limits>
#include <vector>

#include "graph/ops/movement_params.h"
#include "graph/ops/reduce_params.h"
#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

enum class Kind { kMin, kProd, kL1, kL2, kLogSum, kLogSumExp };

absl::StatusOr<std::vector<double>> ToDouble(const KernelContext& ctx, const TensorView& t) {
  std::vector<double> v(t.numel());
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, t.dtype, t.data, DType::kF64, v.data(), t.numel()));
  return v;
}

absl::Status FromDouble(const KernelContext& ctx, const std::vector<double>& v, TensorView& t) {
  if (static_cast<int64_t>(v.size()) != t.numel()) return ctx.Error("output size mismatch");
  return cpu_ew::CastBuffer(ctx, DType::kF64, v.data(), t.dtype, t.data, t.numel());
}

// Calls fn(i, out) for every input element i in row-major order, with `out` the offset of the
// output element it reduces into (reduced dims have output stride 0).
template <typename Fn>
void WalkReduced(const std::vector<int64_t>& dims, const std::vector<bool>& mask, Fn&& fn) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> ostride(rank, 0);
  int64_t s = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    if (mask[d]) continue;
    ostride[d] = s;
    s *= dims[d];
  }
  const int64_t n = NumElements(dims);
  std::vector<int64_t> idx(rank, 0);
  int64_t out = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, out);
    for (int64_t d = rank - 1; d >= 0; --d) {
      out += ostride[d];
      if (++idx[d] < dims[d]) break;
      out -= ostride[d] * dims[d];
      idx[d] = 0;
    }
  }
}

template <Kind K>
absl::Status ReduceKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("needs input data");
  std::vector<int64_t> axes;
  const TensorView* axes_in = ctx.input(1);
  if (axes_in != nullptr)
    for (int64_t i = 0; i < axes_in->numel(); ++i) axes.push_back(IntAt(*axes_in, i));
  auto mask = reduce::ReduceMask(ctx.node(), axes_in ? &axes : nullptr, x->rank());
  if (!mask.ok()) return ctx.Error(mask.status().message());
  const bool keepdims = ctx.node().attr_int("keepdims", 1) != 0;
  if (NumElements(reduce::ReducedDims(x->dims, *mask, keepdims)) != y->numel())
    return ctx.Error("output size does not match the reduced input");
  MT_ASSIGN_OR_RETURN(std::vector<double> in, ToDouble(ctx, *x));

  const double inf = std::numeric_limits<double>::infinity();
  double init = 0;
  if constexpr (K == Kind::kMin) init = inf;
  if constexpr (K == Kind::kProd) init = 1;
  // LogSumExp subtracts the per-output max first so exp cannot overflow.
  std::vector<double> shift(y->numel(), 0.0);
  if constexpr (K == Kind::kLogSumExp) {
    std::vector<double> mx(y->numel(), -inf);
    WalkReduced(x->dims, *mask, [&](int64_t i, int64_t o) { mx[o] = std::max(mx[o], in[i]); });
    for (size_t o = 0; o < mx.size(); ++o) shift[o] = std::isfinite(mx[o]) ? mx[o] : 0.0;
  }
  std::vector<double> acc(y->numel(), init);
  WalkReduced(x->dims, *mask, [&](int64_t i, int64_t o) {
    const double v = in[i];
    if constexpr (K == Kind::kMin) acc[o] = (v < acc[o] || v != v) ? v : acc[o];
    if constexpr (K == Kind::kProd) acc[o] *= v;
    if constexpr (K == Kind::kL1) acc[o] += std::fabs(v);
    if constexpr (K == Kind::kL2) acc[o] += v * v;
    if constexpr (K == Kind::kLogSum) acc[o] += v;
    if constexpr (K == Kind::kLogSumExp) acc[o] += std::exp(v - shift[o]);
  });
  for (size_t o = 0; o < acc.size(); ++o) {
    if constexpr (K == Kind::kL2) acc[o] = std::sqrt(acc[o]);
    if constexpr (K == Kind::kLogSum) acc[o] = std::log(acc[o]);
    if constexpr (K == Kind::kLogSumExp) acc[o] = std::log(acc[o]) + shift[o];
  }
  return FromDouble(ctx, acc, *y);
}

// ArgMin along `axis`: the first minimum, or the last with select_last_index; a NaN counts as
// the minimum (numpy's argmin, which ONNX's reference uses), its first occurrence wins.
absl::Status ArgMinKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("needs input data");
  if (y->dtype != DType::kI64) return ctx.Error("output must be int64");
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", 0), x->rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  const bool last = ctx.node().attr_int("select_last_index", 0) != 0;
  const AxisView v = ViewAroundAxis(x->dims, *axis);
  if (v.outer * v.inner != y->numel()) return ctx.Error("output size does not match the input");
  if (v.n == 0 && y->numel() > 0) return ctx.Error("cannot take ArgMin over an empty axis");
  MT_ASSIGN_OR_RETURN(std::vector<double> in, ToDouble(ctx, *x));
  int64_t* out = y->as<int64_t>();
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const double* p = in.data() + o * v.n * v.inner + i;
      int64_t best = 0;
      for (int64_t j = 1; j < v.n && p[best * v.inner] == p[best * v.inner]; ++j) {
        const double c = p[j * v.inner], b = p[best * v.inner];
        if (c < b || c != c || (last && c == b)) best = j;
      }
      out[o * v.inner + i] = best;
    }
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_reduce_double) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> num = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                                  DType::kI8,  DType::kI32, DType::kI64,  DType::kU8};
  r.Register({"ReduceMin", "", cpu, num, 0, FnKernel(ReduceKernel<Kind::kMin>)});
  r.Register({"ReduceProd", "", cpu, num, 0, FnKernel(ReduceKernel<Kind::kProd>)});
  r.Register({"ReduceL1", "", cpu, num, 0, FnKernel(ReduceKernel<Kind::kL1>)});
  r.Register({"ReduceL2", "", cpu, num, 0, FnKernel(ReduceKernel<Kind::kL2>)});
  r.Register({"ReduceLogSum", "", cpu, num, 0, FnKernel(ReduceKernel<Kind::kLogSum>)});
  r.Register({"ReduceLogSumExp", "", cpu, num, 0, FnKernel(ReduceKernel<Kind::kLogSumExp>)});
  r.Register({"ArgMin", "", cpu, num, 0, FnKernel(ArgMinKernel)});
}

}  // namespace mixtrain::cpu
