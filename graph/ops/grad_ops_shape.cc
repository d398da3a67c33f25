// Shape and type rules of the ai.mixtrain backward ops whose output shape is given by run-time
// operands (kernels in kernels/cpu/grad_shape_kernels.cc and group_norm.cc):
//   PadGrad(dY, pads[, axes])                 dY's dims minus the pads
//   SliceGrad(dY, shape, starts, ends[, axes][, steps]), ResizeGrad(dY, shape[, roi][, scales])
//                                             the dims held by `shape`
//   GroupNormalizationGrad(dY, X, scale) -> dX, dScale, dBias  like X, scale, scale
// Where the operands' contents are not known (the importer, autodiff), the rank still is; the
// planner re-infers with the values it computed.
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_ops_util.h"
#include "graph/ops/movement_params.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

using movement_infer::IntsInput;
using movement_infer::SymIntsInput;
using movement_infer::UnknownDims;
using movement_infer::UnknownDimsOfLength;

// The output has the dims held by input `i` (a 1-D int64 shape): numbers or symbols as far as
// known, else as many unknown dims as the shape has entries.
Shape ShapeFromInput(const InferContext& ctx, size_t i) {
  std::optional<SymInts> s = SymIntsInput(ctx, i);
  if (!s) return UnknownDimsOfLength(ctx.input(i).shape);
  std::vector<Dim> dims;
  for (const SymInt& v : *s)
    dims.push_back(v.known() ? Dim(*v.value) : v.symbol.empty() ? Dim() : Dim::Symbol(v.symbol));
  return Shape(std::move(dims));
}

absl::Status InferShapedByInput1(InferContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.Error("needs inputs dY and shape");
  ctx.output(0).dtype = ctx.input(0).dtype;
  ctx.output(0).shape = ShapeFromInput(ctx, 1);
  return absl::OkStatus();
}

absl::Status InferPadGrad(InferContext& ctx) {
  const TypeInfo& dy = ctx.input(0);
  if (!dy.present || !ctx.has_input(1)) return ctx.Error("needs inputs dY and pads");
  ctx.output(0).dtype = dy.dtype;
  if (!dy.shape.rank_known) return absl::OkStatus();
  const int64_t r = dy.shape.rank();
  std::optional<std::vector<int64_t>> pads = IntsInput(ctx, 1);
  std::optional<std::vector<int64_t>> axes =
      ctx.has_input(2) ? IntsInput(ctx, 2) : std::vector<int64_t>{};
  if (!pads || !axes) {
    ctx.output(0).shape = UnknownDims(dy.shape);
    return absl::OkStatus();
  }
  auto full = movement::ExpandPads(r, *pads, *axes);
  if (!full.ok()) return ctx.Error(full.status().message());
  std::vector<Dim> out = dy.shape.dims;
  for (int64_t d = 0; d < r; ++d) {
    if ((*full)[d] == 0 && (*full)[r + d] == 0) continue;
    if (!out[d].known()) {
      out[d] = Dim();
      continue;
    }
    const int64_t v = out[d].value - (*full)[d] - (*full)[r + d];
    if (v < 0) return ctx.Error(absl::StrCat("pads exceed dim ", d, " of dY"));
    out[d] = Dim(v);
  }
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

// dX like X, dScale and dBias like scale.
absl::Status InferGroupNormGrad(InferContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2))
    return ctx.Error("needs inputs dY, X and scale");
  const int src[] = {1, 2, 2};
  for (size_t i = 0; i < 3 && i < ctx.num_outputs(); ++i) {
    if (!ctx.output(i).present) continue;
    ctx.output(i).dtype = ctx.input(src[i]).dtype;
    ctx.output(i).shape = ctx.input(src[i]).shape;
  }
  return absl::OkStatus();
}

MT_REGISTER_OP_SCHEMAS(grad_ops_shape, {
    {"PadGrad", "ai.mixtrain", InferPadGrad},
    {"SliceGrad", "ai.mixtrain", InferShapedByInput1},
    {"ResizeGrad", "ai.mixtrain", InferShapedByInput1},
    {"GroupNormalizationGrad", "ai.mixtrain", InferGroupNormGrad},
});

}  // namespace
}  // namespace mixtrain
