// Shape-inference rules for the ops that make tensors from attributes, shapes or scalars:
// Constant, Shape, Size, ConstantOfShape, Range. Their output shapes come from attribute contents
// or input *values*; when a needed value is unknown the rank is still given where it can be.
#include "absl/strings/str_cat.h"
#include "graph/ops/movement_ops_util.h"
#include "graph/ops/movement_params.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

using movement_infer::IntsInput;
using movement_infer::SymIntsInput;
using movement_infer::UnknownDimsOfLength;
using movement_infer::Wrap;

absl::Status InferConstant(InferContext& ctx) {
  const Node& n = ctx.node();
  TypeInfo& out = ctx.output(0);
  if (const Attribute* a = n.attr("value")) {
    if (a->kind != Attribute::Kind::kTensor) return ctx.Error("attribute 'value' is not a tensor");
    out.dtype = a->t.dtype();
    out.shape = Shape::Of(a->t.dims());
  } else if (n.has_attr("value_float")) {
    out.dtype = DType::kF32;
    out.shape = Shape::Of({});
  } else if (const Attribute* a = n.attr("value_floats")) {
    out.dtype = DType::kF32;
    out.shape = Shape::Of({static_cast<int64_t>(a->floats.size())});
  } else if (n.has_attr("value_int")) {
    out.dtype = DType::kI64;
    out.shape = Shape::Of({});
  } else if (const Attribute* a = n.attr("value_ints")) {
    out.dtype = DType::kI64;
    out.shape = Shape::Of({static_cast<int64_t>(a->ints.size())});
  } else {
    return ctx.Error(
        "needs one of value, value_float(s), value_int(s) (strings and sparse tensors are not "
        "supported)");
  }
  return absl::OkStatus();
}

absl::Status InferShapeOp(InferContext& ctx) {
  const Shape& in = ctx.input(0).shape;
  ctx.output(0).dtype = DType::kI64;
  if (!in.rank_known) {
    ctx.output(0).shape = Shape({Dim()});
    return absl::OkStatus();
  }
  movement::Window w = movement::ShapeWindow(in.rank(), ctx.node().attr_int("start", 0),
                                             ctx.node().attr_int("end", in.rank()));
  ctx.output(0).shape = Shape::Of({w.end - w.begin});
  return absl::OkStatus();
}

absl::Status InferSize(InferContext& ctx) {
  ctx.output(0).dtype = DType::kI64;
  ctx.output(0).shape = Shape::Of({});
  return absl::OkStatus();
}

absl::Status InferConstantOfShape(InferContext& ctx) {
  TypeInfo& out = ctx.output(0);
  out.dtype = DType::kF32;
  if (const Attribute* a = ctx.node().attr("value")) {
    if (a->kind != Attribute::Kind::kTensor || a->t.numel() != 1)
      return ctx.Error("attribute 'value' must be a one-element tensor");
    out.dtype = a->t.dtype();
  }
  std::optional<SymInts> dims = SymIntsInput(ctx, 0);
  if (!dims) {
    out.shape = UnknownDimsOfLength(ctx.input(0).shape);
    return absl::OkStatus();
  }
  std::vector<Dim> shape;
  for (const SymInt& d : *dims) {
    if (d.known() && *d.value < 0) return ctx.Error(absl::StrCat("shape entry ", *d.value, " is negative"));
    shape.push_back(d.known() ? Dim(*d.value) : Dim::Symbol(d.symbol));
  }
  out.shape = Shape(std::move(shape));
  return absl::OkStatus();
}

absl::Status InferRange(InferContext& ctx) {
  DType t = ctx.input(0).dtype;
  for (size_t i = 1; i < 3; ++i)
    if (ctx.input(i).dtype != t)
      return ctx.Error(absl::StrCat("input ", i, " is ", DTypeName(ctx.input(i).dtype),
                                    ", input 0 is ", DTypeName(t)));
  ctx.output(0).dtype = t;
  ctx.output(0).shape = Shape({Dim()});
  const Tensor *s = ctx.input(0).value, *l = ctx.input(1).value, *d = ctx.input(2).value;
  if (s == nullptr || l == nullptr || d == nullptr) return absl::OkStatus();
  if (s->numel() != 1 || l->numel() != 1 || d->numel() != 1)
    return ctx.Error("start, limit and delta must be scalars");
  MT_ASSIGN_OR_RETURN(int64_t n, Wrap(ctx, movement::RangeCount(s->GetDouble(0), l->GetDouble(0),
                                                                d->GetDouble(0))));
  ctx.output(0).shape = Shape::Of({n});
  return absl::OkStatus();
}

// A draw of the input's shape, in the attribute `dtype` or else the input's type. No kernel runs
// it: canonicalization rewrites exporters' dropout masks into Dropout (passes/canonicalize_dropout.cc).
absl::Status InferRandomUniformLike(InferContext& ctx) {
  TypeInfo& out = ctx.output(0);
  out.dtype = ctx.input(0).dtype;
  if (ctx.node().has_attr("dtype")) {
    absl::StatusOr<DType> t = FromOnnxType(static_cast<int32_t>(ctx.node().attr_int("dtype", 0)));
    if (!t.ok() || !IsFloat(*t)) return ctx.Error("attribute 'dtype' must be a float type");
    out.dtype = *t;
  }
  out.shape = ctx.input(0).shape;
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(movement_shape, {{"Constant", "", InferConstant},
                                        {"Shape", "", InferShapeOp, kOpReadsOnlyDims},
                                        {"Size", "", InferSize, kOpReadsOnlyDims},
                                        {"ConstantOfShape", "", InferConstantOfShape},
                                        {"Range", "", InferRange},
                                        {"RandomUniformLike", "", InferRandomUniformLike, kOpRandom}});

}  // namespace mixtrain
