// The CUDA elementwise ops as one table, a row per op: launch.h's UnaryOp and BinaryOp,
// elementwise.cu's kernels and kernels.cc's registrations are all expanded from the two lists
// below, so an op's name, domains, dtypes, formula and attributes are written once. (ai.mixtrain
// holds our passes' ops: the gradients, and fuse_gelu's Gelu for opsets before ONNX's, 20.)
#pragma once

#include <cstdint>

#include "kernels/common/elementwise.h"

namespace mixtrain::cuda {

// The dtypes a row registers for: f32, f16 and bf16; or those and i32, i64 (the step counter).
enum class EwTypes : uint8_t { kFloat, kNumber };

// What kernels.cc reads from a row's node: up to two float attributes, by name with their ONNX
// defaults, which a unary formula gets as `alpha` and `beta`; and for Gelu and GeluGrad
// `approximate` (default "none"), whose "tanh" runs the row `tanh_form` (an enumerator) instead:
// a kernel of its own, not a branch per element.
struct EwAttrs {
  const char* alpha = nullptr;
  float alpha_default = 0;
  const char* beta = nullptr;
  float beta_default = 0;
  int tanh_form = -1;
};
constexpr EwAttrs kNoAttrs{};
constexpr EwAttrs Floats(const char* alpha, float alpha_default, const char* beta = nullptr,
                         float beta_default = 0) {
  return {alpha, alpha_default, beta, beta_default};
}
template <typename Op>
constexpr EwAttrs TanhForm(Op op) {
  EwAttrs a;
  a.tanh_form = static_cast<int>(op);
  return a;
}

// --- formulas only this backend has (the CPU's are in kernels/cpu/elementwise_unary_math.cc
// until issue 3 moves them into kernels/common/elementwise.h) -------------------------------------
// max(0, min(1, alpha x + beta)), times x for HardSwish (alpha 1/6, beta 1/2): one kernel for both.
struct HardSigmoid {
  float alpha, beta;
  bool times_x = false;
  MT_HD float operator()(float x) const {
    const float h = fminf(fmaxf(alpha * x + beta, 0.0f), 1.0f);
    return times_x ? x * h : h;
  }
};
// x < 0 ? alpha (e^x - 1) : x, as kernels/cpu/elementwise_unary_math.cc's Elu.
struct Elu {
  float alpha;
  MT_HD float operator()(float x) const { return x < 0.0f ? alpha * (expf(x) - 1.0f) : x; }
};

// To add an op, add a row X(Name, domains, dtypes, formula, attributes). Name: the ONNX op type;
// domains: where it registers ("" is ONNX's; () for a row kernels.cc registers by hand, PRelu, or
// another row's tanh form); dtypes: kFloat, or kNumber (the formula then a template); formula: the
// functor, from kernels/common/elementwise.h where the CPU shares it, else above (a unary one may
// use `alpha`, `beta`); attributes: kNoAttrs, Floats("alpha", 0.2f[, "beta", 0.5f]), TanhForm(op).
// Then add it to tests/cuda/cuda_kernels_test.cc (its registry test fails until you do).
#define MT_CUDA_UNARY_OPS(X)                                                                                    \
  X(Sqrt,        (""),                kFloat, ew::Sqrt{},                  kNoAttrs)                            \
  X(Reciprocal,  (""),                kFloat, ew::Reciprocal{},            kNoAttrs)                            \
  X(Exp,         (""),                kFloat, ew::Exp{},                   kNoAttrs)                            \
  X(Log,         (""),                kFloat, ew::Log{},                   kNoAttrs)                            \
  X(Erf,         (""),                kFloat, ew::Erf{},                   kNoAttrs)                            \
  X(Tanh,        (""),                kFloat, ew::Tanh{},                  kNoAttrs)                            \
  X(Sigmoid,     (""),                kFloat, ew::Sigmoid{},               kNoAttrs)                            \
  X(Softplus,    (""),                kFloat, ew::Softplus{},              kNoAttrs)                            \
  X(Gelu,        ("", "ai.mixtrain"), kFloat, ew::Gelu{},                  TanhForm(UnaryOp::kGeluTanh))        \
  X(GeluTanh,    (),                  kFloat, ew::GeluTanh{},              kNoAttrs)                            \
  X(LeakyRelu,   (""),                kFloat, ew::LeakyRelu{alpha},        Floats("alpha", 0.01f))              \
  X(Relu,        (""),                kFloat, ew::Relu{},                  kNoAttrs)                            \
  X(Neg,         (""),                kFloat, ew::Neg{},                   kNoAttrs)                            \
  X(Abs,         (""),                kFloat, ew::Abs{},                   kNoAttrs)                            \
  X(HardSigmoid, (""),                kFloat, (HardSigmoid{alpha, beta}),  Floats("alpha", 0.2f, "beta", 0.5f)) \
  X(HardSwish,   (""),                kFloat, (HardSigmoid{1.0f / 6, 0.5f, true}), kNoAttrs)                    \
  X(Elu,         (""),                kFloat, Elu{alpha},                  Floats("alpha", 1.0f))

#define MT_CUDA_BINARY_OPS(X)                                                                                   \
  X(Add,          (""),            kNumber, ew::Add{},          kNoAttrs)                                       \
  X(Sub,          (""),            kNumber, ew::Sub{},          kNoAttrs)                                       \
  X(Mul,          (""),            kNumber, ew::Mul{},          kNoAttrs)                                       \
  X(Div,          (""),            kFloat,  ew::Div{},          kNoAttrs)                                       \
  X(Max,          (""),            kNumber, ew::Max{},          kNoAttrs)                                       \
  X(Min,          (""),            kNumber, ew::Min{},          kNoAttrs)                                       \
  X(Pow,          (""),            kFloat,  ew::Pow{},          kNoAttrs)                                       \
  X(ReluGrad,     ("ai.mixtrain"), kFloat,  ew::ReluGrad{},     kNoAttrs)                                       \
  X(GeluGrad,     ("ai.mixtrain"), kFloat,  ew::GeluGrad{},     TanhForm(BinaryOp::kGeluTanhGrad))              \
  X(GeluTanhGrad, (),              kFloat,  ew::GeluTanhGrad{}, kNoAttrs)                                       \
  X(PRelu,        (),              kFloat,  ew::PRelu{},        kNoAttrs)

}  // namespace mixtrain::cuda
