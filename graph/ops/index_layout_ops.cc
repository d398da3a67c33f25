// Shape and type inference for the less common indexing and layout ops: GatherElements,
// ScatterElements (and its opset-9 name Scatter), GatherND, ScatterND, OneHot, EyeLike, TopK,
// DepthToSpace, SpaceToDepth, Resize, Upsample, GridSample and MaxUnpool. Kernels: kernels/cpu/
// gather_scatter.cc, movement_rearrange.cc, resize.cc, grid_sample.cc.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

absl::Status CheckIndices(InferContext& ctx, size_t i) {
  const DType t = ctx.input(i).dtype;
  if (!ctx.input(i).present) return ctx.Error(absl::StrCat("needs input ", i, " (indices)"));
  if (t != DType::kUndefined && t != DType::kI32 && t != DType::kI64)
    return ctx.Error(absl::StrCat("indices must be int32 or int64, got ", DTypeName(t)));
  return absl::OkStatus();
}

// The single value of a known one-element input, else nullopt.
std::optional<double> ScalarInput(const InferContext& ctx, size_t i) {
  const TypeInfo& t = ctx.input(i);
  if (!t.present || t.value == nullptr || t.value->numel() != 1) return std::nullopt;
  return t.value->GetDouble(0);
}

absl::StatusOr<int64_t> Axis(InferContext& ctx, int64_t axis, int64_t rank) {
  auto a = movement::NormalizeAxis(axis, rank);
  if (!a.ok()) return ctx.Error(a.status().message());
  return *a;
}

// GatherElements: the output has the indices' shape and the data's dtype.
absl::Status InferGatherElements(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  MT_RETURN_IF_ERROR(CheckIndices(ctx, 1));
  const TypeInfo& idx = ctx.input(1);
  ctx.output(0).dtype = data.dtype;
  ctx.output(0).shape = idx.shape;
  if (data.shape.rank_known && idx.shape.rank_known && data.shape.rank() != idx.shape.rank())
    return ctx.Error("data and indices must have the same rank");
  return absl::OkStatus();
}

// ScatterElements, Scatter, ScatterND: the output is a modified copy of data.
absl::Status InferScatter(InferContext& ctx) {
  MT_RETURN_IF_ERROR(CheckIndices(ctx, 1));
  if (!ctx.input(0).present || !ctx.has_input(2)) return ctx.Error("needs data, indices, updates");
  if (ctx.input(2).dtype != DType::kUndefined && ctx.input(0).dtype != DType::kUndefined &&
      ctx.input(2).dtype != ctx.input(0).dtype)
    return ctx.Error("updates must have the data's dtype");
  ctx.output(0).dtype = ctx.input(0).dtype;
  ctx.output(0).shape = ctx.input(0).shape;
  return absl::OkStatus();
}

// GatherND: indices [..., k] pick slices of data after `batch_dims` leading dims; the output is
// indices.shape[:-1] + data.shape[batch_dims + k:].
absl::Status InferGatherND(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  MT_RETURN_IF_ERROR(CheckIndices(ctx, 1));
  const TypeInfo& idx = ctx.input(1);
  ctx.output(0).dtype = data.dtype;
  if (!data.shape.rank_known || !idx.shape.rank_known) return absl::OkStatus();
  const int64_t b = ctx.node().attr_int("batch_dims", 0);
  if (idx.shape.rank() < 1 || b < 0 || b >= idx.shape.rank() || b >= data.shape.rank())
    return ctx.Error("indices must have rank >= 1 and batch_dims must be < both ranks");
  const Dim& last = idx.shape.dims.back();
  if (!last.known()) return absl::OkStatus();
  if (b + last.value > data.shape.rank())
    return ctx.Error(absl::StrCat("indices' last dim ", last.value, " plus batch_dims ", b,
                                  " exceeds the data's rank ", data.shape.rank()));
  std::vector<Dim> out(idx.shape.dims.begin(), idx.shape.dims.end() - 1);
  out.insert(out.end(), data.shape.dims.begin() + b + last.value, data.shape.dims.end());
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

// OneHot(indices, depth, values): indices' shape with `depth` inserted at `axis`; values' dtype.
absl::Status InferOneHot(InferContext& ctx) {
  const TypeInfo& idx = ctx.input(0);
  if (!idx.present || !ctx.has_input(1) || !ctx.has_input(2))
    return ctx.Error("needs indices, depth and values");
  ctx.output(0).dtype = ctx.input(2).dtype;
  if (!idx.shape.rank_known) return absl::OkStatus();
  const int64_t rank = idx.shape.rank() + 1;
  MT_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.node().attr_int("axis", -1), rank));
  std::optional<double> depth = ScalarInput(ctx, 1);
  Dim d;
  if (depth.has_value()) {
    if (*depth < 1) return ctx.Error(absl::StrCat("depth must be >= 1, got ", *depth));
    d = Dim(static_cast<int64_t>(*depth));
  }
  std::vector<Dim> out = idx.shape.dims;
  out.insert(out.begin() + axis, d);
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

// EyeLike: the input's 2-D shape; dtype from the `dtype` attribute, else the input's.
absl::Status InferEyeLike(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input 0");
  if (x.shape.rank_known && x.shape.rank() != 2) return ctx.Error("input must be 2-D");
  ctx.output(0).dtype = x.dtype;
  if (const Attribute* a = ctx.node().attr("dtype")) {
    auto t = FromOnnxType(static_cast<int32_t>(a->i));
    if (!t.ok()) return ctx.Error(t.status().message());
    ctx.output(0).dtype = *t;
  }
  ctx.output(0).shape = x.shape;
  return absl::OkStatus();
}

// TopK: K from input 1 (opset >= 10) or the `k` attribute; outputs values and int64 indices
// with dim `axis` set to K.
absl::Status InferTopK(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input X");
  ctx.output(0).dtype = x.dtype;
  if (ctx.num_outputs() > 1) ctx.output(1).dtype = DType::kI64;
  if (!x.shape.rank_known) return absl::OkStatus();
  MT_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, ctx.node().attr_int("axis", -1), x.shape.rank()));
  Dim k;
  if (ctx.node().has_attr("k")) {
    k = Dim(ctx.node().attr_int("k", 0));
  } else if (std::optional<double> v = ScalarInput(ctx, 1)) {
    k = Dim(static_cast<int64_t>(*v));
  } else if (!ctx.has_input(1)) {
    return ctx.Error("needs K (input 1 or attribute k)");
  }
  if (k.known() && x.shape.dims[axis].known() && k.value > x.shape.dims[axis].value)
    return ctx.Error(absl::StrCat("K=", k.value, " exceeds the axis size ", x.shape.dims[axis].value));
  if (k.known() && k.value < 0) return ctx.Error("K must be >= 0");
  std::vector<Dim> out = x.shape.dims;
  out[axis] = k;
  for (size_t i = 0; i < ctx.num_outputs() && i < 2; ++i) ctx.output(i).shape = Shape(out);
  return absl::OkStatus();
}

// DepthToSpace: [N, C, H, W] -> [N, C / b^2, H * b, W * b]; SpaceToDepth the inverse.
absl::Status InferDepthSpace(InferContext& ctx, bool to_space) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input 0");
  ctx.output(0).dtype = x.dtype;
  if (!x.shape.rank_known) return absl::OkStatus();
  if (x.shape.rank() != 4) return ctx.Error("input must be 4-D (N, C, H, W)");
  const int64_t b = ctx.node().attr_int("blocksize", 0);
  if (b <= 0) return ctx.Error("needs a positive 'blocksize' attribute");
  std::vector<Dim> d = x.shape.dims;
  auto scale = [](const Dim& v, int64_t num, int64_t den) {
    return v.known() ? Dim(v.value * num / den) : Dim();
  };
  if (to_space) {
    if (d[1].known() && d[1].value % (b * b) != 0)
      return ctx.Error(absl::StrCat("C=", d[1].value, " is not a multiple of blocksize^2"));
    d = {d[0], scale(d[1], 1, b * b), scale(d[2], b, 1), scale(d[3], b, 1)};
  } else {
    if ((d[2].known() && d[2].value % b != 0) || (d[3].known() && d[3].value % b != 0))
      return ctx.Error("H and W must be multiples of blocksize");
    d = {d[0], scale(d[1], b * b, 1), scale(d[2], 1, b), scale(d[3], 1, b)};
  }
  ctx.output(0).shape = Shape(std::move(d));
  return absl::OkStatus();
}
absl::Status InferDepthToSpace(InferContext& ctx) { return InferDepthSpace(ctx, true); }
absl::Status InferSpaceToDepth(InferContext& ctx) { return InferDepthSpace(ctx, false); }

// Resize (X, roi, scales, sizes; opset 10: X, scales) and Upsample (opset 7: `scales`
// attribute; 9: input 1): the output dims are `sizes` when given (non-empty), else
// floor(in * scale). Unknown values leave the dims unknown (the planner feeds small int inputs).
absl::Status InferResize(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input X");
  ctx.output(0).dtype = x.dtype;
  if (!x.shape.rank_known) return absl::OkStatus();
  const int64_t rank = x.shape.rank();
  const bool v10 = ctx.node().op_type() == "Upsample" || ctx.opset() < 11;
  ctx.output(0).shape = Shape(std::vector<Dim>(rank));
  auto nonempty = [&](size_t i) {
    const Shape& s = ctx.input(i).shape;
    return ctx.has_input(i) && !(s.rank_known && s.rank() == 1 && s.dims[0].known() && s.dims[0].value == 0);
  };
  if (!v10 && nonempty(3)) {
    if (ctx.input(3).value == nullptr) return absl::OkStatus();
    std::vector<int64_t> sizes = ctx.input(3).value->ToInt64Vector();
    if (static_cast<int64_t>(sizes.size()) != rank) return ctx.Error("sizes must have one entry per dim");
    ctx.output(0).shape = Shape::Of(sizes);
    return absl::OkStatus();
  }
  std::vector<double> scales;
  const size_t si = v10 ? 1 : 2;
  if (nonempty(si)) {
    if (ctx.input(si).value == nullptr) return absl::OkStatus();
    const Tensor& t = *ctx.input(si).value;
    for (int64_t i = 0; i < t.numel(); ++i) scales.push_back(t.GetDouble(i));
  } else if (ctx.node().has_attr("scales")) {
    for (float f : ctx.node().attr_floats("scales")) scales.push_back(f);
  } else {
    return ctx.Error("needs scales or sizes");
  }
  if (static_cast<int64_t>(scales.size()) != rank) return ctx.Error("scales must have one entry per dim");
  std::vector<Dim> out(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (!(scales[d] > 0)) return ctx.Error(absl::StrCat("scale ", scales[d], " must be positive"));
    if (x.shape.dims[d].known())
      out[d] = Dim(static_cast<int64_t>(std::floor(x.shape.dims[d].value * scales[d])));
  }
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

// GridSample (4-D): [N, C, H, W] sampled at grid [N, Ho, Wo, 2] -> [N, C, Ho, Wo].
absl::Status InferGridSample(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& grid = ctx.input(1);
  if (!x.present || !grid.present) return ctx.Error("needs inputs X and grid");
  ctx.output(0).dtype = x.dtype;
  if (!x.shape.rank_known || !grid.shape.rank_known) return absl::OkStatus();
  if (x.shape.rank() != 4 || grid.shape.rank() != 4)
    return ctx.Error("X must be [N, C, H, W] and grid [N, Ho, Wo, 2]");
  ctx.output(0).shape = Shape({x.shape.dims[0], x.shape.dims[1], grid.shape.dims[1], grid.shape.dims[2]});
  return absl::OkStatus();
}

// MaxUnpool: output_shape when given, else per spatial dim (in - 1) * stride + kernel - pads.
absl::Status InferMaxUnpool(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  MT_RETURN_IF_ERROR(CheckIndices(ctx, 1));
  ctx.output(0).dtype = x.dtype;
  if (ctx.has_input(2)) {
    const TypeInfo& s = ctx.input(2);
    if (s.value != nullptr) ctx.output(0).shape = Shape::Of(s.value->ToInt64Vector());
    return absl::OkStatus();
  }
  if (!x.shape.rank_known) return absl::OkStatus();
  const int64_t spatial = x.shape.rank() - 2;
  const std::vector<int64_t> k = ctx.node().attr_ints("kernel_shape");
  const std::vector<int64_t> strides = ctx.node().attr_ints("strides", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> pads = ctx.node().attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  if (spatial < 1 || static_cast<int64_t>(k.size()) != spatial ||
      static_cast<int64_t>(strides.size()) != spatial || static_cast<int64_t>(pads.size()) != 2 * spatial)
    return ctx.Error("kernel_shape, strides and pads must match the spatial rank");
  std::vector<Dim> out(x.shape.dims.begin(), x.shape.dims.begin() + 2);
  for (int64_t d = 0; d < spatial; ++d) {
    const Dim& in = x.shape.dims[2 + d];
    out.push_back(in.known() ? Dim((in.value - 1) * strides[d] + k[d] - pads[d] - pads[spatial + d]) : Dim());
  }
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(index_layout_ops, {
    {"MaxUnpool", "", InferMaxUnpool},
    {"GridSample", "", InferGridSample},
    {"Resize", "", InferResize, 0, InputBits({1, 2})},
    {"Upsample", "", InferResize},
    {"GatherElements", "", InferGatherElements},
    {"ScatterElements", "", InferScatter},
    {"Scatter", "", InferScatter},
    {"ScatterND", "", InferScatter},
    {"GatherND", "", InferGatherND},
    {"OneHot", "", InferOneHot},
    {"EyeLike", "", InferEyeLike},
    {"TopK", "", InferTopK},
    {"DepthToSpace", "", InferDepthToSpace},
    {"SpaceToDepth", "", InferSpaceToDepth},
});

}  // namespace mixtrain
