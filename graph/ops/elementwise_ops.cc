// Shape and type inference for the elementwise ops: unary math and activations (same type and
// shape), broadcasting arithmetic and variadic Max/Min (numpy broadcasting of every input),
// comparisons and logic (bool out), Where, Cast/CastLike (dtype from `to` / the second input).
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

absl::Status InferUnary(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input 0");
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  return absl::OkStatus();
}

absl::Status InferNot(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferUnary(ctx));
  const DType t = ctx.input(0).dtype;
  if (t != DType::kUndefined && t != DType::kBool)
    return ctx.Error(absl::StrCat("input must be bool, got ", DTypeName(t)));
  ctx.output(0).dtype = DType::kBool;
  return absl::OkStatus();
}

// The broadcast shape of inputs [first, num_inputs); every one must be present.
absl::StatusOr<Shape> BroadcastInputs(InferContext& ctx, size_t first) {
  if (ctx.num_inputs() <= first) return ctx.Error("missing inputs");
  Shape s;
  for (size_t i = first; i < ctx.num_inputs(); ++i) {
    const TypeInfo& in = ctx.input(i);
    if (!in.present) return ctx.Error(absl::StrCat("input ", i, " is required"));
    if (i == first) {
      s = in.shape;
      continue;
    }
    auto b = BroadcastShapes(s, in.shape);
    if (!b.ok()) return ctx.Error(b.status().message());
    s = *std::move(b);
  }
  return s;
}

// The common dtype of inputs [first, last): an error when two known dtypes differ.
absl::StatusOr<DType> SameDType(InferContext& ctx, size_t first, size_t last) {
  DType t = DType::kUndefined;
  for (size_t i = first; i < last && i < ctx.num_inputs(); ++i) {
    DType u = ctx.input(i).dtype;
    if (u == DType::kUndefined) continue;
    if (t != DType::kUndefined && u != t)
      return ctx.Error(absl::StrCat("inputs must have one dtype, got ", DTypeName(t), " and ",
                                    DTypeName(u)));
    t = u;
  }
  return t;
}

// Add, Sub, Mul, Div, Max, Min (variadic): one dtype, broadcast shapes.
absl::Status InferBroadcast(InferContext& ctx) {
  // Before opset 7, Add/Sub/Mul/Div broadcast B into A from attribute `axis`; that equals numpy's
  // trailing alignment only when axis = rank(A) - rank(B). Other placements are refused.
  const Attribute* axis = ctx.node().attr("axis");
  if (ctx.node().attr_int("broadcast", 0) != 0 && axis != nullptr && ctx.input(0).shape.rank_known &&
      ctx.input(1).shape.rank_known) {
    int64_t a = ctx.input(0).shape.rank(), b = ctx.input(1).shape.rank();
    int64_t ax = axis->i < 0 ? axis->i + a : axis->i;
    if (ax != a - b)
      return ctx.Error(absl::StrCat("legacy broadcast with axis=", axis->i,
                                    " (not trailing-aligned) is not supported"));
  }
  MT_ASSIGN_OR_RETURN(Shape s, BroadcastInputs(ctx, 0));
  MT_ASSIGN_OR_RETURN(DType t, SameDType(ctx, 0, ctx.num_inputs()));
  ctx.output(0).dtype = t;
  ctx.output(0).shape = std::move(s);
  return absl::OkStatus();
}

// Pow: the exponent may have another numeric dtype; the output has the base's.
absl::Status InferPow(InferContext& ctx) {
  MT_ASSIGN_OR_RETURN(Shape s, BroadcastInputs(ctx, 0));
  ctx.output(0).dtype = ctx.input(0).dtype;
  ctx.output(0).shape = std::move(s);
  return absl::OkStatus();
}

// Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor.
absl::Status InferCompare(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferBroadcast(ctx));
  ctx.output(0).dtype = DType::kBool;
  return absl::OkStatus();
}

absl::Status InferLogic(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferBroadcast(ctx));
  if (ctx.output(0).dtype != DType::kUndefined && ctx.output(0).dtype != DType::kBool)
    return ctx.Error(absl::StrCat("inputs must be bool, got ", DTypeName(ctx.output(0).dtype)));
  ctx.output(0).dtype = DType::kBool;
  return absl::OkStatus();
}

absl::Status InferWhere(InferContext& ctx) {
  MT_ASSIGN_OR_RETURN(Shape s, BroadcastInputs(ctx, 0));
  const DType c = ctx.input(0).dtype;
  if (c != DType::kUndefined && c != DType::kBool)
    return ctx.Error(absl::StrCat("condition must be bool, got ", DTypeName(c)));
  MT_ASSIGN_OR_RETURN(DType t, SameDType(ctx, 1, 3));
  ctx.output(0).dtype = t;
  ctx.output(0).shape = std::move(s);
  return absl::OkStatus();
}

absl::Status InferCast(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferUnary(ctx));
  const Attribute* to = ctx.node().attr("to");
  if (to == nullptr || to->kind != Attribute::Kind::kInt)
    return ctx.Error("needs an int attribute 'to'");
  auto t = FromOnnxType(static_cast<int32_t>(to->i));
  if (!t.ok()) return ctx.Error(t.status().message());
  ctx.output(0).dtype = *t;
  return absl::OkStatus();
}

absl::Status InferCastLike(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferUnary(ctx));
  if (!ctx.has_input(1)) return ctx.Error("needs input 1 (target_type)");
  ctx.output(0).dtype = ctx.input(1).dtype;
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(elementwise, {
    {"Sqrt", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Reciprocal", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Neg", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Abs", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Exp", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Log", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Erf", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Relu", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"LeakyRelu", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Sigmoid", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Tanh", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Gelu", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Softplus", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Clip", "", InferUnary, kOpElementwiseUnary | kOpOverwritesInput0},
    {"Not", "", InferNot},
    {"Add", "", InferBroadcast, kOpElementwiseBinary | kOpOverwritesInput0},
    {"Sub", "", InferBroadcast, kOpElementwiseBinary | kOpOverwritesInput0},
    {"Mul", "", InferBroadcast, kOpElementwiseBinary | kOpOverwritesInput0},
    {"Div", "", InferBroadcast, kOpElementwiseBinary | kOpOverwritesInput0},
    {"Max", "", InferBroadcast, kOpElementwiseBinary},
    {"Min", "", InferBroadcast, kOpElementwiseBinary},
    {"Pow", "", InferPow, kOpElementwiseBinary | kOpOverwritesInput0},
    {"Equal", "", InferCompare},    {"Less", "", InferCompare},
    {"LessOrEqual", "", InferCompare}, {"Greater", "", InferCompare},
    {"GreaterOrEqual", "", InferCompare},
    {"And", "", InferLogic},        {"Or", "", InferLogic},
    {"Xor", "", InferLogic},
    {"Where", "", InferWhere},
    {"Cast", "", InferCast, kOpElementwiseUnary},
    {"CastLike", "", InferCastLike},
});

}  // namespace mixtrain
