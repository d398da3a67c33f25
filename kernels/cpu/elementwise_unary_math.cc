// CPU kernels for the less common unary ops: trigonometric and hyperbolic functions, the Elu
// family and other activations, Floor/Ceil/Round, Sign, Shrink, IsNaN/IsInf. Each functor is a
// template on the compute type, so fp32/fp16/bf16 compute in float and f64 in double; the loops
// are the shared ones of elementwise_loops.h.
//
// TODO(issue 3): these functors belong in kernels/common/elementwise.h beside the other unary
// ones once its owner is done optimizing it, so the CUDA backend instantiates them too.
#include <cmath>

#include "kernels/cpu/elementwise_loops.h"

namespace mixtrain::cpu_ew {
namespace {

using std::acos, std::acosh, std::asin, std::asinh, std::atan, std::atanh, std::ceil,
    std::cos, std::cosh, std::exp, std::fabs, std::floor, std::log1p, std::nearbyint, std::sin,
    std::sinh, std::tan, std::tanh;

// Transcendental ops cost ~10-40x an add per element, so they go parallel sooner.
constexpr int64_t kMathGrain = 4096;

#define MT_MATH_FUNCTOR(Name, expr)            \
  struct Name {                                \
    template <typename T>                      \
    T operator()(T x) const { return expr; }   \
  };
MT_MATH_FUNCTOR(Sin, sin(x))
MT_MATH_FUNCTOR(Cos, cos(x))
MT_MATH_FUNCTOR(Tan, tan(x))
MT_MATH_FUNCTOR(Asin, asin(x))
MT_MATH_FUNCTOR(Acos, acos(x))
MT_MATH_FUNCTOR(Atan, atan(x))
MT_MATH_FUNCTOR(Sinh, sinh(x))
MT_MATH_FUNCTOR(Cosh, cosh(x))
MT_MATH_FUNCTOR(Asinh, asinh(x))
MT_MATH_FUNCTOR(Acosh, acosh(x))
MT_MATH_FUNCTOR(Atanh, atanh(x))
MT_MATH_FUNCTOR(Floor, floor(x))
MT_MATH_FUNCTOR(Ceil, ceil(x))
// Round halves to even, which is what nearbyint does in the default rounding mode.
MT_MATH_FUNCTOR(Round, nearbyint(x))
MT_MATH_FUNCTOR(Softsign, x / (T(1) + fabs(x)))
// x * tanh(softplus(x)), softplus written overflow-free as in kernels/common/elementwise.h.
MT_MATH_FUNCTOR(Mish, x * tanh((x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)))))
#undef MT_MATH_FUNCTOR

// x * HardSigmoid(x) with alpha 1/6 and beta 1/2, fixed by the op.
struct HardSwish {
  template <typename T>
  T operator()(T x) const {
    T y = x / T(6) + T(0.5);
    return x * (y < T(0) ? T(0) : (y > T(1) ? T(1) : y));
  }
};

struct Elu {
  float alpha;
  template <typename T>
  T operator()(T x) const { return x < T(0) ? T(alpha) * (exp(x) - T(1)) : x; }
};
struct Selu {
  float alpha, gamma;
  template <typename T>
  T operator()(T x) const { return T(gamma) * (x <= T(0) ? T(alpha) * (exp(x) - T(1)) : x); }
};
// max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
struct Celu {
  float alpha;
  template <typename T>
  T operator()(T x) const { return x > T(0) ? x : T(alpha) * (exp(x / T(alpha)) - T(1)); }
};
struct HardSigmoid {
  float alpha, beta;
  template <typename T>
  T operator()(T x) const {
    T y = T(alpha) * x + T(beta);
    return y < T(0) ? T(0) : (y > T(1) ? T(1) : y);
  }
};
struct ThresholdedRelu {
  float alpha;
  template <typename T>
  T operator()(T x) const { return x > T(alpha) ? x : T(0); }
};
// Shrink also runs on integer tensors; bias and lambd are compared and applied in the compute type.
struct Shrink {
  float bias, lambd;
  template <typename T>
  T operator()(T x) const {
    if (static_cast<double>(x) < -lambd) return static_cast<T>(static_cast<double>(x) + bias);
    if (static_cast<double>(x) > lambd) return static_cast<T>(static_cast<double>(x) - bias);
    return T(0);
  }
};
struct Sign {
  template <typename T>
  T operator()(T x) const { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }
};
struct IsNaN {
  template <typename T>
  bool operator()(T x) const { return x != x; }
};
struct IsInf {
  bool positive, negative;
  template <typename T>
  bool operator()(T x) const {
    return (positive && x == std::numeric_limits<T>::infinity()) ||
           (negative && x == -std::numeric_limits<T>::infinity());
  }
};

using FloatAndF64 = TypeList<float, ew::f16, ew::bf16, double>;

// y = op(x) with y of x's storage type (kBoolOut: bool).
template <typename Types, bool kBoolOut = false, typename Op>
absl::Status Unary(KernelContext& ctx, const Op& op, int64_t grain = kMathGrain) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("missing input 0");
  if (x->numel() != y->numel()) return ctx.Error("output size differs from the input's");
  return Dispatch(Types{}, x->dtype, ctx, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using SO = std::conditional_t<kBoolOut, bool, S>;
    UnaryMap(x->as<S>(), y->as<SO>(), x->numel(), op, grain);
  });
}

template <typename Op>
absl::Status Math(KernelContext& ctx) {
  return Unary<FloatAndF64>(ctx, Op{});
}

absl::Status EluKernel(KernelContext& ctx) {
  return Unary<FloatAndF64>(ctx, Elu{ctx.node().attr_float("alpha", 1.0f)});
}
absl::Status SeluKernel(KernelContext& ctx) {
  return Unary<FloatAndF64>(ctx, Selu{ctx.node().attr_float("alpha", 1.67326319217681884765625f),
                                      ctx.node().attr_float("gamma", 1.05070102214813232421875f)});
}
absl::Status CeluKernel(KernelContext& ctx) {
  float alpha = ctx.node().attr_float("alpha", 1.0f);
  if (alpha == 0.0f) return ctx.Error("alpha must not be 0");
  return Unary<FloatAndF64>(ctx, Celu{alpha});
}
absl::Status HardSigmoidKernel(KernelContext& ctx) {
  return Unary<FloatAndF64>(ctx, HardSigmoid{ctx.node().attr_float("alpha", 0.2f),
                                             ctx.node().attr_float("beta", 0.5f)});
}
absl::Status ThresholdedReluKernel(KernelContext& ctx) {
  return Unary<FloatAndF64>(ctx, ThresholdedRelu{ctx.node().attr_float("alpha", 1.0f)});
}
absl::Status ShrinkKernel(KernelContext& ctx) {
  return Unary<NumericStorage>(ctx, Shrink{ctx.node().attr_float("bias", 0.0f),
                                           ctx.node().attr_float("lambd", 0.5f)},
                               kElementwiseGrain);
}
absl::Status SignKernel(KernelContext& ctx) {
  return Unary<NumericStorage>(ctx, Sign{}, kElementwiseGrain);
}
absl::Status IsNaNKernel(KernelContext& ctx) {
  return Unary<FloatAndF64, true>(ctx, IsNaN{}, kElementwiseGrain);
}
absl::Status IsInfKernel(KernelContext& ctx) {
  IsInf op{ctx.node().attr_int("detect_positive", 1) != 0,
           ctx.node().attr_int("detect_negative", 1) != 0};
  return Unary<FloatAndF64, true>(ctx, op, kElementwiseGrain);
}

}  // namespace

MT_REGISTER_KERNELS(cpu_elementwise_unary_math) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> f = DTypes(FloatAndF64{});
  const std::vector<DType> num = DTypes(NumericStorage{});
  const std::pair<const char*, KernelFn> math[] = {
      {"Sin", Math<Sin>},     {"Cos", Math<Cos>},     {"Tan", Math<Tan>},
      {"Asin", Math<Asin>},   {"Acos", Math<Acos>},   {"Atan", Math<Atan>},
      {"Sinh", Math<Sinh>},   {"Cosh", Math<Cosh>},   {"Asinh", Math<Asinh>},
      {"Acosh", Math<Acosh>}, {"Atanh", Math<Atanh>}, {"Floor", Math<Floor>},
      {"Ceil", Math<Ceil>},   {"Round", Math<Round>}, {"Softsign", Math<Softsign>},
      {"Mish", Math<Mish>},   {"HardSwish", Math<HardSwish>},
      {"Elu", EluKernel},     {"Selu", SeluKernel},   {"Celu", CeluKernel},
      {"HardSigmoid", HardSigmoidKernel},
      {"ThresholdedRelu", ThresholdedReluKernel},
      {"IsNaN", IsNaNKernel}, {"IsInf", IsInfKernel},
  };
  for (const auto& [op, fn] : math) r.Register({op, "", cpu, f, 0, FnKernel(fn)});
  r.Register({"Shrink", "", cpu, num, 0, FnKernel(ShrinkKernel)});
  r.Register({"Sign", "", cpu, num, 0, FnKernel(SignKernel)});
}

}  // namespace mixtrain::cpu_ew
