// Gradient rules of the elementwise ops: arithmetic (with numpy broadcasting, undone by
// SetGradSumTo), unary math, activations, Where/Max/Min, Cast, Identity and Dropout.
// Each rule: (node, dY) -> dX, in the notation of the rule comments (Y = forward output).
#include <cmath>

#include "passes/autodiff.h"

namespace mixtrain {
namespace {

using V = Value*;

const Shape& OutShape(GradContext& c) { return c.Y(0)->shape; }

// dA = dY, dB = dY
absl::Status AddGrad(GradContext& c) {
  if (c.needs(0)) MT_RETURN_IF_ERROR(c.SetGradSumTo(0, c.dY(0), OutShape(c)));
  if (c.needs(1)) MT_RETURN_IF_ERROR(c.SetGradSumTo(1, c.dY(0), OutShape(c)));
  return absl::OkStatus();
}

// dA = dY, dB = -dY
absl::Status SubGrad(GradContext& c) {
  if (c.needs(0)) MT_RETURN_IF_ERROR(c.SetGradSumTo(0, c.dY(0), OutShape(c)));
  if (c.needs(1)) MT_RETURN_IF_ERROR(c.SetGradSumTo(1, c.b().Neg(c.dY(0)), OutShape(c)));
  return absl::OkStatus();
}

// dA = dY * B, dB = dY * A
absl::Status MulGrad(GradContext& c) {
  auto& b = c.b();
  if (c.needs(0)) MT_RETURN_IF_ERROR(c.SetGradSumTo(0, b.Mul(c.dY(0), c.X(1)), OutShape(c)));
  if (c.needs(1)) MT_RETURN_IF_ERROR(c.SetGradSumTo(1, b.Mul(c.dY(0), c.X(0)), OutShape(c)));
  return absl::OkStatus();
}

// dA = dY / B, dB = -dY * Y / B
absl::Status DivGrad(GradContext& c) {
  auto& b = c.b();
  if (c.needs(0)) MT_RETURN_IF_ERROR(c.SetGradSumTo(0, b.Div(c.dY(0), c.X(1)), OutShape(c)));
  if (c.needs(1))
    MT_RETURN_IF_ERROR(
        c.SetGradSumTo(1, b.Neg(b.Div(b.Mul(c.dY(0), c.Y(0)), c.X(1))), OutShape(c)));
  return absl::OkStatus();
}

// dA = dY * B * A^(B-1), dB = dY * Y * log(A). B may have another float type than A.
absl::Status PowGrad(GradContext& c) {
  auto& b = c.b();
  V a = c.X(0), e = c.b().Cast(c.X(1), c.X(0)->dtype);
  if (c.needs(0)) {
    V pw = b.Op("Pow", {a, b.Sub(e, b.Scalar(1, e->dtype))});
    MT_RETURN_IF_ERROR(c.SetGradSumTo(0, b.Mul(b.Mul(c.dY(0), e), pw), OutShape(c)));
  }
  if (c.needs(1)) {
    V g = b.Mul(b.Mul(c.dY(0), c.Y(0)), b.Op("Log", {a}));
    MT_ASSIGN_OR_RETURN(V s, b.SumTo(g, OutShape(c), c.X(1)));
    c.SetGrad(1, b.Cast(s, c.X(1)->dtype));
  }
  return absl::OkStatus();
}

// dX = dY * 0.5 / Y
absl::Status SqrtGrad(GradContext& c) {
  auto& b = c.b();
  c.SetGrad(0, b.Div(b.Mul(c.dY(0), b.Scalar(0.5, c.Y(0)->dtype)), c.Y(0)));
  return absl::OkStatus();
}

// dX = -dY * Y * Y
absl::Status ReciprocalGrad(GradContext& c) {
  auto& b = c.b();
  c.SetGrad(0, b.Neg(b.Mul(c.dY(0), b.Mul(c.Y(0), c.Y(0)))));
  return absl::OkStatus();
}

// dX = -dY
absl::Status NegGrad(GradContext& c) {
  c.SetGrad(0, c.b().Neg(c.dY(0)));
  return absl::OkStatus();
}

// dX = dY * sign(X) (0 at X == 0, as PyTorch)
absl::Status AbsGrad(GradContext& c) {
  auto& b = c.b();
  V zero = b.Scalar(0, c.X(0)->dtype);
  V pos = b.MaskKeep(b.Op("Greater", {c.X(0), zero}), c.dY(0));
  V neg = b.MaskKeep(b.Op("Less", {c.X(0), zero}), c.dY(0));
  c.SetGrad(0, b.Sub(pos, neg));
  return absl::OkStatus();
}

// dX = dY * Y
absl::Status ExpGrad(GradContext& c) {
  c.SetGrad(0, c.b().Mul(c.dY(0), c.Y(0)));
  return absl::OkStatus();
}

// dX = dY / X
absl::Status LogGrad(GradContext& c) {
  c.SetGrad(0, c.b().Div(c.dY(0), c.X(0)));
  return absl::OkStatus();
}

// dX = dY * 2/sqrt(pi) * exp(-X^2)
absl::Status ErfGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0);
  V e = b.Op("Exp", {b.Neg(b.Mul(x, x))});
  c.SetGrad(0, b.Mul(c.dY(0), b.Mul(e, b.Scalar(2.0 / std::sqrt(M_PI), x->dtype))));
  return absl::OkStatus();
}

// dX = dY where Y > 0: one ai.mixtrain.ReluGrad(dY, Y) pass, no mask tensor (as PyTorch's
// threshold_backward). The training-step fusions fold it into a MaxPoolGrad that reads Y.
absl::Status ReluGrad(GradContext& c) {
  c.SetGrad(0, c.b().Op("ReluGrad", {c.dY(0), c.Y(0)}, {}, "ai.mixtrain"));
  return absl::OkStatus();
}

// dX = dY where X > 0, else alpha * dY
absl::Status LeakyReluGrad(GradContext& c) {
  auto& b = c.b();
  V x = c.X(0);
  float alpha = c.node().attr_float("alpha", 0.01f);
  V pos = b.Op("Greater", {x, b.Scalar(0, x->dtype)});
  c.SetGrad(0, b.Op("Where", {pos, c.dY(0), b.Mul(c.dY(0), b.Scalar(alpha, x->dtype))}));
  return absl::OkStatus();
}

// dX = dY * Y * (1 - Y)
absl::Status SigmoidGrad(GradContext& c) {
  auto& b = c.b();
  V y = c.Y(0);
  c.SetGrad(0, b.Mul(c.dY(0), b.Mul(y, b.Sub(b.Scalar(1, y->dtype), y))));
  return absl::OkStatus();
}

// dX = dY * (1 - Y^2)
absl::Status TanhGrad(GradContext& c) {
  auto& b = c.b();
  V y = c.Y(0);
  c.SetGrad(0, b.Mul(c.dY(0), b.Sub(b.Scalar(1, y->dtype), b.Mul(y, y))));
  return absl::OkStatus();
}

// dX = GeluGrad(dY, X) (ai.mixtrain; exact erf form or tanh approximation, per `approximate`)
absl::Status GeluGrad(GradContext& c) {
  c.SetGrad(0, c.b().Op("GeluGrad", {c.dY(0), c.X(0)},
                        {Attribute::String("approximate",
                                           c.node().attr_string("approximate", "none"))},
                        "ai.mixtrain"));
  return absl::OkStatus();
}

// dX = dY * sigmoid(X)
absl::Status SoftplusGrad(GradContext& c) {
  c.SetGrad(0, c.b().Mul(c.dY(0), c.b().Op("Sigmoid", {c.X(0)})));
  return absl::OkStatus();
}

// dX = dY where min <= X <= max (as PyTorch's clamp). The bounds are inputs 1 and 2 from opset
// 11 (either may be omitted), float attributes before.
absl::Status ClipGrad(GradContext& c) {
  auto& b = c.b();
  const Node& n = c.node();
  V x = c.X(0), lo = c.X(1), hi = c.X(2);
  if (lo == nullptr && n.has_attr("min")) lo = b.Scalar(n.attr_float("min", 0), x->dtype);
  if (hi == nullptr && n.has_attr("max")) hi = b.Scalar(n.attr_float("max", 0), x->dtype);
  V g = c.dY(0);
  if (lo) g = b.MaskDrop(b.Op("Less", {x, lo}), g);
  if (hi) g = b.MaskDrop(b.Op("Greater", {x, hi}), g);
  c.SetGrad(0, g);
  return absl::OkStatus();
}

// dX_i = dY where X_i == Y (Max and Min alike)
absl::Status MaxMinGrad(GradContext& c) {
  auto& b = c.b();
  for (size_t i = 0; i < c.node().num_inputs(); ++i) {
    if (!c.needs(i)) continue;
    V g = b.MaskKeep(b.Op("Equal", {c.X(i), c.Y(0)}), c.dY(0));
    MT_RETURN_IF_ERROR(c.SetGradSumTo(i, g, OutShape(c)));
  }
  return absl::OkStatus();
}

// dA = dY where C, dB = dY where !C
absl::Status WhereGrad(GradContext& c) {
  auto& b = c.b();
  if (c.needs(1)) MT_RETURN_IF_ERROR(c.SetGradSumTo(1, b.MaskKeep(c.X(0), c.dY(0)), OutShape(c)));
  if (c.needs(2)) MT_RETURN_IF_ERROR(c.SetGradSumTo(2, b.MaskDrop(c.X(0), c.dY(0)), OutShape(c)));
  return absl::OkStatus();
}

// dX = Cast(dY, X's type): gradients of fp32 master weights arrive in fp32.
absl::Status CastGrad(GradContext& c) {
  c.SetGrad(0, c.b().Cast(c.dY(0), c.X(0)->dtype));
  return absl::OkStatus();
}

// dX = dY
absl::Status IdentityGrad(GradContext& c) {
  c.SetGrad(0, c.dY(0));
  return absl::OkStatus();
}

// Training Dropout: dX = dY * mask / (1 - ratio). Without a mask output it is the identity.
absl::Status DropoutGrad(GradContext& c) {
  auto& b = c.b();
  V mask = c.Y(1);
  if (mask == nullptr) {
    c.SetGrad(0, c.dY(0));
    return absl::OkStatus();
  }
  double ratio = c.node().attr_float("ratio", 0.5f);
  if (c.X(1)) {
    if (!c.X(1)->is_initializer())
      return c.Error("the ratio input must be a constant (initializer)");
    ratio = c.X(1)->initializer->GetDouble(0);
  }
  if (ratio >= 1.0) return c.Error("ratio must be < 1");
  DType t = c.X(0)->dtype;
  V scaled = b.Mul(c.dY(0), b.Scalar(1.0 / (1.0 - ratio), t));
  c.SetGrad(0, b.MaskKeep(mask, scaled));
  return absl::OkStatus();
}

MT_REGISTER_GRAD_RULES(elementwise, {
    {"Add", "", AddGrad},
    {"Sub", "", SubGrad},
    {"Mul", "", MulGrad},
    {"Div", "", DivGrad},
    {"Pow", "", PowGrad},
    {"Sqrt", "", SqrtGrad},
    {"Reciprocal", "", ReciprocalGrad},
    {"Neg", "", NegGrad},
    {"Abs", "", AbsGrad},
    {"Exp", "", ExpGrad},
    {"Log", "", LogGrad},
    {"Erf", "", ErfGrad},
    {"Relu", "", ReluGrad},
    {"LeakyRelu", "", LeakyReluGrad},
    {"Sigmoid", "", SigmoidGrad},
    {"Tanh", "", TanhGrad},
    {"Gelu", "", GeluGrad},
    {"Gelu", "ai.mixtrain", GeluGrad},  // fuse_gelu's, below opset 20
    {"Softplus", "", SoftplusGrad},
    {"Clip", "", ClipGrad, Inputs({0})},
    {"Max", "", MaxMinGrad},
    {"Min", "", MaxMinGrad},
    {"Where", "", WhereGrad, Inputs({1, 2})},
    {"Cast", "", CastGrad},
    {"Identity", "", IdentityGrad},
    {"Dropout", "", DropoutGrad, Inputs({0})},
});

}  // namespace
}  // namespace mixtrain
