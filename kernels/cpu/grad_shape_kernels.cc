// CPU kernels of the ai.mixtrain backward ops of data movement whose shape-like operands may be
// known only at run time (rules in passes/grad_rules_movement.cc, schemas in
// graph/ops/grad_ops_shape.cc):
//   PadGrad(dY, pads[, axes]) -> dX        adjoint of Pad in every mode (constant, edge, reflect,
//                                          wrap; negative pads crop)
//   SliceGrad(dY, shape, starts, ends[, axes][, steps]) -> dX
//                                          zeros of `shape` with dY at the sliced positions
//   ResizeGrad(dY, shape[, roi][, scales]) -> dX
//                                          adjoint of Resize (nearest, linear, cubic)
//
// Why one engine: each forward op is a separable linear map, a product of per-axis maps where
// output coordinate o of an axis reads a few input coordinates with weights. Its adjoint applies
// the transposed per-axis maps one axis at a time, every dY element adding weight * itself into
// the elements it was read from. Axis by axis, rows of different outer indices never collide,
// so the scatter parallelizes without atomics. The per-axis maps come from the same functions
// as the forward kernels' (movement::PlanSlice, resize_taps.h, cpu_movement::PadSource in
// movement_util.h), so forward and backward cannot disagree. Sums in double.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "kernels/cpu/movement_util.h"
#include "kernels/cpu/parallel.h"
#include "kernels/common/resize_taps.h"
#include "kernels/cpu/elementwise_loops.h"

namespace mixtrain::cpu {
namespace {

using cpu_movement::ReadInts;

// One axis of a separable map: output coordinate o reads input coordinates idx[o * width + k]
// (-1: none, the constant of a constant pad) with weights w (empty: all 1).
struct AxisMap {
  int64_t in_len = 0;
  int width = 1;
  std::vector<int64_t> idx;
  std::vector<double> w;

  int64_t out_len() const { return static_cast<int64_t>(idx.size()) / width; }
  double weight(size_t j) const { return w.empty() ? 1.0 : w[j]; }
  // Whether the map copies each coordinate to itself (nothing to do for this axis).
  bool identity() const {
    if (out_len() != in_len) return false;
    for (int64_t o = 0; o < out_len(); ++o) {
      double self = 0;
      for (int k = 0; k < width; ++k) {
        const size_t j = o * width + k;
        if (idx[j] == o) self += weight(j);
        else if (idx[j] >= 0 && weight(j) != 0) return false;
      }
      if (self != 1) return false;
    }
    return true;
  }
};

// The adjoint of the product of `maps` applied to g (dims: every map's out_len): one axis at a
// time, the result has dims in_len.
std::vector<double> Adjoint(std::vector<double> g, std::vector<int64_t> dims,
                            const std::vector<AxisMap>& maps) {
  for (size_t d = 0; d < maps.size(); ++d) {
    const AxisMap& m = maps[d];
    if (m.identity()) continue;
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < d; ++i) outer *= dims[i];
    for (size_t i = d + 1; i < dims.size(); ++i) inner *= dims[i];
    const int64_t out_len = m.out_len();
    std::vector<double> next(static_cast<size_t>(outer * m.in_len * inner), 0.0);
    // Work items: (outer index, block of inner columns); each owns its slice of `next`.
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(out_len * kBlock, 1));
    ParallelFor(outer * blocks, grain, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        const int64_t a = item / blocks, c0 = (item % blocks) * kBlock;
        const int64_t c1 = std::min(inner, c0 + kBlock);
        for (int64_t o = 0; o < out_len; ++o)
          for (int k = 0; k < m.width; ++k) {
            const size_t j = o * m.width + k;
            const int64_t i = m.idx[j];
            const double w = m.weight(j);
            if (i < 0 || w == 0) continue;
            const double* src = g.data() + (a * out_len + o) * inner;
            double* dst = next.data() + (a * m.in_len + i) * inner;
            for (int64_t c = c0; c < c1; ++c) dst[c] += w * src[c];
          }
      }
    });
    g.swap(next);
    dims[d] = m.in_len;
  }
  return g;
}

// Loads dY, applies the adjoint of `maps` and stores dX (whose planned dims must be the maps'
// input lengths).
absl::Status RunAdjoint(KernelContext& ctx, const std::vector<AxisMap>& maps) {
  const TensorView& dy = *ctx.input(0);
  TensorView& dx = *ctx.output(0);
  if (static_cast<int64_t>(maps.size()) != dy.rank() || dx.rank() != dy.rank())
    return ctx.Error("dY and dX ranks differ from the op's");
  for (size_t d = 0; d < maps.size(); ++d) {
    if (maps[d].out_len() != dy.dims[d])
      return ctx.Error(absl::StrCat("dim ", d, " of dY is ", dy.dims[d], ", expected ",
                                    maps[d].out_len()));
    if (maps[d].in_len != dx.dims[d])
      return ctx.Error(absl::StrCat("dim ", d, " of dX is planned as ", dx.dims[d],
                                    ", the parameters give ", maps[d].in_len));
  }
  MT_ASSIGN_OR_RETURN(std::vector<double> g, resize::Doubles(ctx, &dy));
  std::vector<double> out = Adjoint(std::move(g), dy.dims, maps);
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), dx.dtype, dx.data, dx.numel());
}

absl::StatusOr<std::vector<int64_t>> OptionalInts(const KernelContext& ctx, size_t i) {
  if (ctx.input(i) == nullptr) return std::vector<int64_t>{};
  return ReadInts(ctx, *ctx.input(i));
}

absl::Status PadGradKernel(KernelContext& ctx) {
  const TensorView* dy = ctx.input(0);
  if (dy == nullptr || ctx.input(1) == nullptr || ctx.output(0) == nullptr)
    return ctx.Error("needs inputs dY and pads");
  const std::string mode = ctx.node().attr_string("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
    return ctx.Error(absl::StrCat("unknown mode '", mode, "'"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> pads, ReadInts(ctx, *ctx.input(1)));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, OptionalInts(ctx, 2));
  const int64_t r = dy->rank();
  auto full = movement::ExpandPads(r, pads, axes);
  if (!full.ok()) return ctx.Error(full.status().message());
  std::vector<AxisMap> maps(r);
  for (int64_t d = 0; d < r; ++d) {
    const int64_t begin = (*full)[d], n = dy->dims[d] - begin - (*full)[r + d];
    if (n < 0) return ctx.Error(absl::StrCat("pads exceed dim ", d, " of dY"));
    if (mode != "constant" && n == 0 && dy->dims[d] > 0)
      return ctx.Error(absl::StrCat("cannot ", mode, "-pad the empty dim ", d));
    maps[d].in_len = n;
    for (int64_t o = 0; o < dy->dims[d]; ++o) maps[d].idx.push_back(cpu_movement::PadSource(mode, o, begin, n));
  }
  return RunAdjoint(ctx, maps);
}

absl::Status SliceGradKernel(KernelContext& ctx) {
  const TensorView* dy = ctx.input(0);
  if (dy == nullptr || ctx.input(1) == nullptr || ctx.input(2) == nullptr ||
      ctx.input(3) == nullptr || ctx.output(0) == nullptr)
    return ctx.Error("needs inputs dY, shape, starts and ends");
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(ctx, *ctx.input(1)));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> starts, ReadInts(ctx, *ctx.input(2)));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> ends, ReadInts(ctx, *ctx.input(3)));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, OptionalInts(ctx, 4));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> steps, OptionalInts(ctx, 5));
  auto plan = movement::PlanSlice(shape, starts, ends, axes, steps);
  if (!plan.ok()) return ctx.Error(plan.status().message());
  std::vector<AxisMap> maps(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    maps[d].in_len = shape[d];
    for (int64_t o = 0; o < plan->count[d]; ++o)
      maps[d].idx.push_back(plan->start[d] + o * plan->step[d]);
  }
  return RunAdjoint(ctx, maps);
}

// The rule resolves Upsample's and Resize-10's fixed modes into attributes, so this reads them
// as Resize-11+ does; `scales` may also be the Upsample-7 attribute.
absl::Status ResizeGradKernel(KernelContext& ctx) {
  const TensorView* dy = ctx.input(0);
  if (dy == nullptr || ctx.input(1) == nullptr || ctx.output(0) == nullptr)
    return ctx.Error("needs inputs dY and shape");
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(ctx, *ctx.input(1)));
  MT_ASSIGN_OR_RETURN(resize::Params p, resize::ParamsOf(ctx, false));
  const TensorView* scales = ctx.input(3);
  if (scales != nullptr && scales->numel() == 0) scales = nullptr;
  MT_ASSIGN_OR_RETURN(std::vector<resize::Taps> taps,
                      resize::AllTaps(ctx, p, shape, dy->dims, scales, ctx.input(2)));
  std::vector<AxisMap> maps(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    maps[d].in_len = shape[d];
    maps[d].width = taps[d].width;
    maps[d].idx = taps[d].idx;
    maps[d].w = taps[d].w;
    // A coordinate outside the crop box reads the extrapolation constant, not the input.
    for (size_t o = 0; o < taps[d].outside.size(); ++o)
      if (taps[d].outside[o])
        for (int k = 0; k < taps[d].width; ++k) maps[d].w[o * taps[d].width + k] = 0;
  }
  return RunAdjoint(ctx, maps);
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_shape) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> f = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
  r.Register({"PadGrad", "ai.mixtrain", cpu, f, 0, FnKernel(PadGradKernel)});
  r.Register({"SliceGrad", "ai.mixtrain", cpu, f, 0, FnKernel(SliceGradKernel)});
  r.Register({"ResizeGrad", "ai.mixtrain", cpu, f, 0, FnKernel(ResizeGradKernel)});
}

}  // namespace mixtrain::cpu
