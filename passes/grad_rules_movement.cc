// Gradient rules of data movement and reductions: reshapes, Transpose, Concat/Split, Slice/Pad,
// Gather, Expand/Tile, the Reduce* family and CumSum. Shape-like operands (shapes, axes, pads,
// indices) carry no gradient and must be constants where a rule needs their values.
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/reduce_params.h"
#include "passes/autodiff.h"

namespace mixtrain {
namespace {

using V = Value*;

int64_t Rank(const Value* v) { return v->shape.rank_known ? v->shape.rank() : -1; }

// The int64 contents of a constant operand, or an error naming it.
absl::StatusOr<std::vector<int64_t>> ConstInts(GradContext& c, const Value* v, const char* what) {
  if (v == nullptr || !v->is_initializer())
    return c.Error(absl::StrCat("the ", what, " input must be a constant (initializer)"));
  return v->initializer->ToInt64Vector();
}

// Static size of dim `i` of v, or an error.
absl::StatusOr<int64_t> StaticDim(GradContext& c, const Value* v, int64_t i) {
  if (Rank(v) <= i || !v->shape.dims[i].known())
    return c.Error(absl::StrCat("dim ", i, " of '", v->name, "' must be known statically"));
  return v->shape.dims[i].value;
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

// dX_i = Slice(dY, offset_i, offset_i + size_i) along the concat axis
absl::Status ConcatGrad(GradContext& c) {
  auto& b = c.b();
  const int64_t r = Rank(c.Y(0));
  if (r < 0) return c.Error("output rank must be known statically");
  int64_t axis = c.node().attr_int("axis", 0);
  if (axis < 0) axis += r;
  int64_t offset = 0;
  for (size_t i = 0; i < c.node().num_inputs(); ++i) {
    MT_ASSIGN_OR_RETURN(int64_t size, StaticDim(c, c.X(i), axis));
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

// dX = Pad(dY) with zeros back to X's shape (steps of 1 only)
absl::Status SliceGrad(GradContext& c) {
  auto& b = c.b();
  const int64_t r = Rank(c.X(0));
  if (r < 0) return c.Error("input rank must be known statically");
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> starts, ConstInts(c, c.X(1), "starts"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> ends, ConstInts(c, c.X(2), "ends"));
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (c.X(3)) {
    MT_ASSIGN_OR_RETURN(axes, ConstInts(c, c.X(3), "axes"));
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (c.X(4)) {
    MT_ASSIGN_OR_RETURN(steps, ConstInts(c, c.X(4), "steps"));
  }
  std::vector<int64_t> pads(2 * r, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    if (steps[i] != 1) return c.Error("only steps of 1 are supported");
    int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    MT_ASSIGN_OR_RETURN(int64_t dim, StaticDim(c, c.X(0), a));
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    s = std::clamp<int64_t>(s, 0, dim);
    e = std::clamp<int64_t>(e, s, dim);
    pads[a] = s;
    pads[a + r] = dim - e;
  }
  c.SetGrad(0, b.Op("Pad", {c.dY(0), b.Ints(pads)}));
  return absl::OkStatus();
}

// dX = Slice(dY, pads_begin, -pads_end): constant padding only
absl::Status PadGrad(GradContext& c) {
  auto& b = c.b();
  const Node& n = c.node();
  if (n.attr_string("mode", "constant") != "constant")
    return c.Error("only mode=constant is supported");
  const int64_t r = Rank(c.X(0));
  if (r < 0) return c.Error("input rank must be known statically");
  std::vector<int64_t> pads;
  if (c.opset() < 11) {
    pads = n.attr_ints("pads");
  } else {
    MT_ASSIGN_OR_RETURN(pads, ConstInts(c, c.X(1), "pads"));
  }
  std::vector<int64_t> axes;
  if (c.X(3)) {
    MT_ASSIGN_OR_RETURN(axes, ConstInts(c, c.X(3), "axes"));
  } else {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) return c.Error("pads and axes disagree in length");
  std::vector<int64_t> starts, ends, sl_axes;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t begin = pads[i], end = pads[i + axes.size()];
    if (begin < 0 || end < 0) return c.Error("negative pads are not supported");
    starts.push_back(begin);
    ends.push_back(end == 0 ? std::numeric_limits<int64_t>::max() : -end);
    sl_axes.push_back(axes[i] < 0 ? axes[i] + r : axes[i]);
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

// dY viewed as [r0, d0, r1, d1, ...] summed over the repeat axes
absl::Status TileGrad(GradContext& c) {
  auto& b = c.b();
  const int64_t r = Rank(c.X(0));
  if (r < 0) return c.Error("input rank must be known statically");
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, ConstInts(c, c.X(1), "repeats"));
  std::vector<int64_t> view, axes;
  for (int64_t i = 0; i < r; ++i) {
    MT_ASSIGN_OR_RETURN(int64_t d, StaticDim(c, c.X(0), i));
    view.push_back(repeats[i]);
    view.push_back(d);
    axes.push_back(2 * i);
  }
  V g = b.Op("Reshape", {c.dY(0), b.Ints(view)});
  c.SetGrad(0, b.ReduceSum(g, axes, false));
  return absl::OkStatus();
}

// Which axes a Reduce* node reduced, and dY with those axes restored (size 1).
struct Reduced {
  std::vector<bool> mask;
  V dy_keep = nullptr;  // dY broadcastable against X
  V y_keep = nullptr;   // Y broadcastable against X
};
absl::StatusOr<Reduced> ReducedOf(GradContext& c) {
  const Node& n = c.node();
  const int64_t r = Rank(c.X(0));
  if (r < 0) return c.Error("input rank must be known statically");
  std::vector<int64_t> axes_in;
  const std::vector<int64_t>* axes_ptr = nullptr;
  if (c.X(1)) {
    MT_ASSIGN_OR_RETURN(axes_in, ConstInts(c, c.X(1), "axes"));
    axes_ptr = &axes_in;
  }
  auto mask = reduce::ReduceMask(n, axes_ptr, r);
  if (!mask.ok()) return c.Error(std::string(mask.status().message()));
  Reduced red{*mask};
  std::vector<int64_t> lost;
  if (n.attr_int("keepdims", 1) == 0)
    for (int64_t i = 0; i < r; ++i)
      if (red.mask[i]) lost.push_back(i);
  red.dy_keep = c.b().Unsqueeze(c.dY(0), lost);
  red.y_keep = c.b().Unsqueeze(c.Y(0), lost);
  return red;
}

// dX = Expand(dY)
absl::Status ReduceSumGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  c.SetGrad(0, c.b().ExpandLike(red.dy_keep, c.X(0)));
  return absl::OkStatus();
}

// dX = Expand(dY) / count (count from static dims, else counted at run time)
absl::Status ReduceMeanGrad(GradContext& c) {
  MT_ASSIGN_OR_RETURN(Reduced red, ReducedOf(c));
  auto& b = c.b();
  V g = b.ExpandLike(red.dy_keep, c.X(0));
  int64_t count = 1;
  std::vector<int64_t> axes;
  bool known = true;
  for (size_t i = 0; i < red.mask.size(); ++i) {
    if (!red.mask[i]) continue;
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
    {"ReduceSum", "", ReduceSumGrad, Inputs({0})},
    {"ReduceMean", "", ReduceMeanGrad, Inputs({0})},
    {"ReduceMax", "", ReduceMaxGrad, Inputs({0})},
    {"ReduceSumSquare", "", ReduceSumSquareGrad, Inputs({0})},
    {"CumSum", "", CumSumGrad, Inputs({0})},
});

}  // namespace
}  // namespace mixtrain
