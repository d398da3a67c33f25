// Gradient rules of data movement and reductions: reshapes, Transpose, Concat/Split, Slice/Pad,
// Gather, Expand/Tile, Resize, the Reduce* family and CumSum. Shape-like operands (shapes, axes,
// pads, indices, repeats) carry no gradient. Where they are constants and the shapes static, a
// rule emits plain ONNX ops with static shapes; where they are computed by the graph (a dynamic
// batch: Shape -> Gather -> ...), it passes them on as tensors, to graph arithmetic or to an
// ai.mixtrain backward op (PadGrad, SliceGrad, ResizeGrad: kernels/cpu/grad_shape_kernels.cc)
// that reads them at run time.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/reduce_params.h"
#include "passes/autodiff.h"
#include "passes/grad_reduce.h"

namespace mixtrain {
namespace {

using V = Value*;
constexpr char kMt[] = "ai.mixtrain";

int64_t Rank(const Value* v) { return v->shape.rank_known ? v->shape.rank() : -1; }

// The int64 contents of v when it is a constant, else nullopt (a run-time tensor).
std::optional<std::vector<int64_t>> MaybeConstInts(const Value* v) {
  if (v == nullptr || !v->is_initializer()) return std::nullopt;
  return v->initializer->ToInt64Vector();
}

// Inputs for an op with optional operands: omitted trailing ones dropped.
std::vector<V> Operands(std::vector<V> ins) {
  while (!ins.empty() && ins.back() == nullptr) ins.pop_back();
  return ins;
}

// X's shape as a constant when static, else computed at run time.
V ShapeOperand(GradContext& c, V x) {
  if (x->shape.fully_known()) return c.b().Ints(x->shape.sizes());
  return c.b().ShapeOf(x);
}

// dX = Reshape(dY, shape(X)) (Reshape, Flatten, Squeeze, Unsqueeze)
absl::Status ReshapeGrad(GradContext& c) {
  c.SetGrad(0, c.b().ReshapeLike(c.dY(0), c.X(0)));
  return absl::OkStatus();
}

// dX = Transpose(dY, inverse(perm))
absl::Status TransposeGrad(GradContext& c) {
  const int64_t r = Rank(c.X(0));
  if (r < 0) return c.Error("input rank must be known statically");
  std::vector<int64_t> perm = c.node().attr_ints("perm");
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  c.SetGrad(0, c.b().Op("Transpose", {c.dY(0)}, {Attribute::Ints("perm", inv)}));
  return absl::OkStatus();
}

// dX_i = Slice(dY, offset_i, offset_i + size_i) along the concat axis when the sizes are
// static, else dX_i = Split(dY, sizes) with the sizes read from the inputs' shapes at run time.
absl::Status ConcatGrad(GradContext& c) {
  auto& b = c.b();
  const int64_t r = Rank(c.Y(0));
  if (r < 0) return c.Error("output rank must be known statically");
  int64_t axis = c.node().attr_int("axis", 0);
  if (axis < 0) axis += r;
  const size_t k = c.node().num_inputs();
  bool known = true;
  for (size_t i = 0; i < k; ++i) known &= Rank(c.X(i)) == r && c.X(i)->shape.dims[axis].known();
  if (!known) {
    if (c.opset() < 13) return c.Error(absl::StrCat("dim ", axis, " of the inputs must be static"));
    std::vector<V> sizes;
    for (size_t i = 0; i < k; ++i)
      sizes.push_back(b.Op("Slice", {b.ShapeOf(c.X(i)), b.Ints({axis}), b.Ints({axis + 1})}));
    V split = k == 1 ? sizes[0] : b.Op("Concat", sizes, {Attribute::Int("axis", 0)});
    std::vector<V> parts = b.OpN("Split", {c.dY(0), split}, std::vector<bool>(k, true),
                                 {Attribute::Int("axis", axis)});
    for (size_t i = 0; i < k; ++i)
      if (c.needs(i)) c.SetGrad(i, parts[i]);
    return absl::OkStatus();
  }
  int64_t offset = 0;
  for (size_t i = 0; i < k; ++i) {
    const int64_t size = c.X(i)->shape.dims[axis].value;
    if (c.needs(i))
      c.SetGrad(i, b.Op("Slice", {c.dY(0), b.Ints({offset}), b.Ints({offset + size}),
                                  b.Ints({axis})}));
    offset += size;
  }
  return absl::OkStatus();
}

// dX = Concat(dY_0, ..., dY_k) along the split axis, zeros for unused outputs
absl::Status SplitGrad(GradContext& c) {
  auto& b = c.b();
  std::vector<V> parts;
  for (size_t i = 0; i < c.node().num_outputs(); ++i)
    parts.push_back(c.dY(i) ? c.dY(i) : b.ZerosLike(c.Y(i)));
  c.SetGrad(0, b.Op("Concat", parts, {Attribute::Int("axis", c.node().attr_int("axis", 0))}));
  return absl::OkStatus();
}

// Slice's starts/ends/axes/steps: attributes before opset 10, else inputs 1-4 (null if omitted).
struct SliceArgs {
  V starts = nullptr, ends = nullptr, axes = nullptr, steps = nullptr;
};
SliceArgs SliceArgsOf(GradContext& c) {
  const Node& n = c.node();
  if (n.has_attr("starts")) {
    auto& b = c.b();
    return {b.Ints(n.attr_ints("starts")), b.Ints(n.attr_ints("ends")),
            n.has_attr("axes") ? b.Ints(n.attr_ints("axes")) : nullptr, nullptr};
  }
  return {c.X(1), c.X(2), c.X(3), c.X(4)};
}

// Constant starts/ends/axes, steps of 1 and static sliced dims: dX = Pad(dY) with zeros back to
// X's shape. Otherwise dX = SliceGrad(dY, shape(X), starts, ends, axes, steps): zeros of X's
// shape with dY written where the slice read, clamped at run time exactly as Slice clamps.
absl::Status SliceGrad(GradContext& c) {
  auto& b = c.b();
  const SliceArgs args = SliceArgsOf(c);
  if (args.starts == nullptr || args.ends == nullptr) return c.Error("needs starts and ends");
  const int64_t r = Rank(c.X(0));
  auto starts = MaybeConstInts(args.starts), ends = MaybeConstInts(args.ends);
  std::optional<std::vector<int64_t>> axes = std::vector<int64_t>{}, steps = axes;
  if (args.axes) axes = MaybeConstInts(args.axes);
  if (args.steps) steps = MaybeConstInts(args.steps);
  bool static_pad = r >= 0 && starts && ends && axes && steps && starts->size() == ends->size();
  if (static_pad && axes->empty())
    for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
  std::vector<int64_t> pads(std::max<int64_t>(r, 0) * 2, 0);
  for (size_t i = 0; static_pad && i < starts->size(); ++i) {
    const int64_t a = (*axes)[i] < 0 ? (*axes)[i] + r : (*axes)[i];
    static_pad = a >= 0 && a < r && (steps->empty() || (*steps)[i] == 1) &&
                 c.X(0)->shape.dims[a].known();
    if (!static_pad) break;
    const int64_t dim = c.X(0)->shape.dims[a].value;
    int64_t s = (*starts)[i] < 0 ? (*starts)[i] + dim : (*starts)[i];
    int64_t e = (*ends)[i] < 0 ? (*ends)[i] + dim : (*ends)[i];
    s = std::clamp<int64_t>(s, 0, dim);
    e = std::clamp<int64_t>(e, s, dim);
    pads[a] = s;
    pads[a + r] = dim - e;
  }
  if (static_pad) {
    c.SetGrad(0, b.Op("Pad", {c.dY(0), b.Ints(pads)}));
    return absl::OkStatus();
  }
  c.SetGrad(0, b.Op("SliceGrad",
                    Operands({c.dY(0), ShapeOperand(c, c.X(0)), args.starts, args.ends,
                              args.axes, args.steps}),
                    {}, kMt));
  return absl::OkStatus();
}

// Constant mode with constant non-negative pads: dX = Slice(dY, pads_begin, -pads_end).
// Otherwise (edge, reflect, wrap; negative pads; pads or axes computed at run time)
// dX = PadGrad(dY, pads, axes): every dY element added to the X element Pad copied it from.
absl::Status PadGrad(GradContext& c) {
  auto& b = c.b();
  const Node& n = c.node();
  const std::string mode = n.attr_string("mode", "constant");
  V pads_in = n.has_attr("pads") ? b.Ints(n.attr_ints("pads")) : c.X(1);  // attribute before 11
  V axes_in = n.has_attr("pads") ? nullptr : c.X(3);
  if (pads_in == nullptr) return c.Error("needs pads");
  const int64_t r = Rank(c.X(0));
  auto pads = MaybeConstInts(pads_in);
  std::optional<std::vector<int64_t>> axes = std::vector<int64_t>{};
  if (axes_in) axes = MaybeConstInts(axes_in);
  bool static_slice = mode == "constant" && r >= 0 && pads && axes;
  if (static_slice && axes->empty())
    for (int64_t i = 0; i < r; ++i) axes->push_back(i);
  if (static_slice && pads->size() != 2 * axes->size())
    return c.Error("pads and axes disagree in length");
  for (size_t i = 0; static_slice && i < pads->size(); ++i) static_slice = (*pads)[i] >= 0;
  if (!static_slice) {
    std::vector<V> ins{c.dY(0), pads_in};
    if (axes_in) ins.push_back(axes_in);
    c.SetGrad(0, b.Op("PadGrad", ins, {Attribute::String("mode", mode)}, kMt));
    return absl::OkStatus();
  }
  std::vector<int64_t> starts, ends, sl_axes;
  for (size_t i = 0; i < axes->size(); ++i) {
    const int64_t begin = (*pads)[i], end = (*pads)[i + axes->size()];
    starts.push_back(begin);
    ends.push_back(end == 0 ? std::numeric_limits<int64_t>::max() : -end);
    sl_axes.push_back((*axes)[i] < 0 ? (*axes)[i] + r : (*axes)[i]);
  }
  c.SetGrad(0, b.Op("Slice", {c.dY(0), b.Ints(starts), b.Ints(ends), b.Ints(sl_axes)}));
  return absl::OkStatus();
}

// dX = GatherGrad(dY, indices, X): zeros of X's shape with dY scatter-added at the indices
absl::Status GatherGrad(GradContext& c) {
  c.SetGrad(0, c.b().Op("GatherGrad", {c.dY(0), c.X(1), c.X(0)},
                        {Attribute::Int("axis", c.node().attr_int("axis", 0))}, "ai.mixtrain"));
  return absl::OkStatus();
}

// dX = dY summed over the broadcast axes
absl::Status ExpandGrad(GradContext& c) {
  return c.SetGradSumTo(0, c.dY(0), c.Y(0)->shape);
}

// dY viewed as [r0, d0, r1, d1, ...] summed over the repeat axes. The view is a constant when
// repeats and X's dims are; else it interleaves the repeats tensor with Shape(X) at run time.
absl::Status TileGrad(GradContext& c) {
  auto& b = c.b();
  const int64_t r = Rank(c.X(0));
  if (r < 0) return c.Error("input rank must be known statically");
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < r; ++i) axes.push_back(2 * i);
  auto repeats = MaybeConstInts(c.X(1));
  V view;
  if (repeats && c.X(0)->shape.fully_known()) {
    if (static_cast<int64_t>(repeats->size()) != r) return c.Error("repeats must have rank entries");
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < r; ++i) {
      dims.push_back((*repeats)[i]);
      dims.push_back(c.X(0)->shape.dims[i].value);
    }
    view = b.Ints(dims);
  } else {
    V pairs = b.Op("Concat",
                   {b.Unsqueeze(b.Cast(c.X(1), DType::kI64), {1}),
                    b.Unsqueeze(b.ShapeOf(c.X(0)), {1})},
                   {Attribute::Int("axis", 1)});
    view = b.Op("Reshape", {pairs, b.Ints({2 * r})});
  }
  c.SetGrad(0, b.ReduceSum(b.Op("Reshape", {c.dY(0), view}), axes, false));
  return absl::OkStatus();
}

// Resize's adjoint: dX = ResizeGrad(dY, shape(X), roi, scales), each dY element added to the
// input taps the forward read, with their interpolation weights (nearest: weight 1 at the one
// source; linear/cubic: the separable weights). Upsample's and Resize-10's fixed coordinate
// rules become explicit attributes; the kernel shares resize_taps.h with the forward kernel.
absl::Status ResizeGrad(GradContext& c) {
  auto& b = c.b();
  const Node& n = c.node();
  const bool legacy = n.op_type() == "Upsample" || c.opset() < 11;
  std::vector<Attribute> attrs{Attribute::String("mode", n.attr_string("mode", "nearest"))};
  if (legacy) {
    attrs.push_back(Attribute::String("coordinate_transformation_mode", "asymmetric"));
    attrs.push_back(Attribute::String("nearest_mode", "floor"));
  }
  std::vector<const char*> copied{"cubic_coeff_a", "exclude_outside", "extrapolation_value",
                                  "scales"};
  if (!legacy) copied.insert(copied.end(), {"coordinate_transformation_mode", "nearest_mode"});
  for (const char* a : copied)
    if (const Attribute* at = n.attr(a)) attrs.push_back(*at);
  if (n.has_attr("axes") || n.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch")
    return c.Error("the axes and keep_aspect_ratio_policy attributes are not supported");
  V roi = legacy ? nullptr : c.X(1);
  V scales = legacy ? c.X(1) : c.X(2);
  c.SetGrad(0, b.Op("ResizeGrad", Operands({c.dY(0), ShapeOperand(c, c.X(0)), roi, scales}),
                    attrs, kMt));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Reduced> ReducedOf(GradContext& c) {
  const Node& n = c.node();
  auto& b = c.b();
  const bool keepdims = n.attr_int("keepdims", 1) != 0;
  V axes_in = n.has_attr("axes") ? nullptr : c.X(1);
  const bool no_axes = axes_in == nullptr && !n.has_attr("axes");
  if ((axes_in != nullptr && !axes_in->is_initializer()) || (no_axes && Rank(c.X(0)) < 0)) {
    Reduced red;
    red.dy_keep = keepdims || no_axes ? c.dY(0) : b.Op("Unsqueeze", {c.dY(0), axes_in});
    red.y_keep = keepdims || no_axes ? c.Y(0) : b.Op("Unsqueeze", {c.Y(0), axes_in});
    return red;
  }
  const int64_t r = Rank(c.X(0));
  if (r < 0) return c.Error("input rank must be known statically");
  std::vector<int64_t> axes_val;
  if (axes_in) axes_val = axes_in->initializer->ToInt64Vector();
  auto mask = reduce::ReduceMask(n, axes_in ? &axes_val : nullptr, r);
  if (!mask.ok()) return c.Error(std::string(mask.status().message()));
  Reduced red{*mask};
  std::vector<int64_t> lost;
  if (!keepdims)
    for (int64_t i = 0; i < r; ++i)
      if ((*red.mask)[i]) lost.push_back(i);
  red.dy_keep = b.Unsqueeze(c.dY(0), lost);
  red.y_keep = b.Unsqueeze(c.Y(0), lost);
  return red;
}

namespace {

// dX = Expand(dY)
absl::Status ReduceSumGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  c.SetGrad(0, c.b().ExpandLike(red.dy_keep, c.X(0)));
  return absl::OkStatus();
}

// dX = Expand(dY) / count, the count of elements each output averaged: from static dims, else
// counted over the known axes at run time, else (run-time axes) Size(Y) / Size(X).
absl::Status ReduceMeanGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  V g = b.ExpandLike(red.dy_keep, c.X(0));
  if (!red.mask) {
    auto size = [&](V v) { return b.Cast(b.Op("Size", {v}), DType::kF32); };
    V ratio = b.Cast(b.Div(size(c.Y(0)), size(c.X(0))), g->dtype);
    c.SetGrad(0, b.Mul(g, ratio));
    return absl::OkStatus();
  }
  int64_t count = 1;
  std::vector<int64_t> axes;
  bool known = true;
  for (size_t i = 0; i < red.mask->size(); ++i) {
    if (!(*red.mask)[i]) continue;
    axes.push_back(static_cast<int64_t>(i));
    const Dim& d = c.X(0)->shape.dims[i];
    known &= d.known();
    if (d.known()) count *= d.value;
  }
  if (!known) {
    c.SetGrad(0, b.Div(g, b.CountOver(c.X(0), axes)));
    return absl::OkStatus();
  }
  c.SetGrad(0, count == 1 ? g : b.Mul(g, b.Scalar(1.0 / count, g->dtype)));
  return absl::OkStatus();
}

// dX = dY where X equals the max
absl::Status ReduceMaxGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  c.SetGrad(0, b.MaskKeep(b.Op("Equal", {c.X(0), red.y_keep}), red.dy_keep));
  return absl::OkStatus();
}

// dX = 2 * X * dY
absl::Status ReduceSumSquareGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  V two_x = b.Mul(c.X(0), b.Scalar(2, c.X(0)->dtype));
  c.SetGrad(0, b.Mul(two_x, red.dy_keep));
  return absl::OkStatus();
}

// dX = CumSum(dY) in the opposite direction
absl::Status CumSumGrad(GradContext& c) {
  const Node& n = c.node();
  c.SetGrad(0, c.b().Op("CumSum", {c.dY(0), c.X(1)},
                        {Attribute::Int("exclusive", n.attr_int("exclusive", 0)),
                         Attribute::Int("reverse", n.attr_int("reverse", 0) ? 0 : 1)}));
  return absl::OkStatus();
}

MT_REGISTER_GRAD_RULES(movement, {
    {"Reshape", "", ReshapeGrad, Inputs({0})},
    {"Flatten", "", ReshapeGrad, Inputs({0})},
    {"Squeeze", "", ReshapeGrad, Inputs({0})},
    {"Unsqueeze", "", ReshapeGrad, Inputs({0})},
    {"Transpose", "", TransposeGrad},
    {"Concat", "", ConcatGrad},
    {"Split", "", SplitGrad, Inputs({0})},
    {"Slice", "", SliceGrad, Inputs({0})},
    {"Pad", "", PadGrad, Inputs({0})},
    {"Gather", "", GatherGrad, Inputs({0})},
    {"Expand", "", ExpandGrad, Inputs({0})},
    {"Tile", "", TileGrad, Inputs({0})},
    {"Resize", "", ResizeGrad, Inputs({0})},
    {"Upsample", "", ResizeGrad, Inputs({0})},
    {"ReduceSum", "", ReduceSumGrad, Inputs({0})},
    {"ReduceMean", "", ReduceMeanGrad, Inputs({0})},
    {"ReduceMax", "", ReduceMaxGrad, Inputs({0})},
    {"ReduceSumSquare", "", ReduceSumSquareGrad, Inputs({0})},
    {"CumSum", "", CumSumGrad, Inputs({0})},
});

}  // namespace
}  // namespace mixtrain
