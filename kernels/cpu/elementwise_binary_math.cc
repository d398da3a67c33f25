// CPU kernels for the less common broadcasting ops: Mod (both sign conventions), BitShift,
// PRelu, and variadic Sum/Mean. Loops and broadcasting are the shared ones of
// elementwise_loops.h; the functors sit here for now (see the TODO in
// elementwise_unary_math.cc).
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/cpu/elementwise_loops.h"

namespace mixtrain::cpu_ew {
namespace {

// fmod = 1: C's fmod, the result has the dividend's sign (required for floats).
// fmod = 0: Python's %, the result has the divisor's sign (integers only). x % 0 is 0 rather than
// a trap, as Div does for integers.
struct FMod {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fmod(a, b);
    } else {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
      }
      return a % b;
    }
  }
};
struct PyMod {
  template <typename T>
  T operator()(T a, T b) const {
    T r = FMod{}(a, b);
    if constexpr (std::is_signed_v<T>) {
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
    }
    return r;
  }
};
struct ShiftLeft {
  template <typename T>
  T operator()(T a, T b) const { return b >= T(sizeof(T) * 8) ? T(0) : T(a << b); }
};
struct ShiftRight {
  template <typename T>
  T operator()(T a, T b) const { return b >= T(sizeof(T) * 8) ? T(0) : T(a >> b); }
};
struct Scale {
  double s;
  template <typename T>
  T operator()(T x) const { return static_cast<T>(x * s); }
};

using FloatAndF64 = TypeList<float, ew::f16, ew::bf16, double>;
using IntStorage = TypeList<int8_t, int32_t, int64_t, uint8_t>;

absl::Status CheckSameDtype(const KernelContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (ctx.input(i) == nullptr) return ctx.Error(absl::StrCat("missing input ", i));
    if (ctx.input(i)->dtype != ctx.input(0)->dtype)
      return ctx.Error(absl::StrCat("input dtypes differ: ", DTypeName(ctx.input(0)->dtype),
                                    " and ", DTypeName(ctx.input(i)->dtype)));
  }
  if (ctx.num_inputs() == 0 || ctx.output(0) == nullptr) return ctx.Error("needs an input");
  return absl::OkStatus();
}

template <typename Types, typename Op>
absl::Status Binary(KernelContext& ctx, const Op& op) {
  if (ctx.num_inputs() != 2) return ctx.Error("needs two inputs");
  MT_RETURN_IF_ERROR(CheckSameDtype(ctx));
  const TensorView& a = *ctx.input(0);
  const TensorView& b = *ctx.input(1);
  TensorView& o = *ctx.output(0);
  MT_ASSIGN_OR_RETURN(BroadcastLayout l, LayoutOf(ctx, {&a, &b}, o));
  return Dispatch(Types{}, a.dtype, ctx, [&](auto tag) {
    using S = typename decltype(tag)::type;
    BinaryMap(l, a.as<S>(), b.as<S>(), o.as<S>(), op);
  });
}

absl::Status ModKernel(KernelContext& ctx) {
  const bool fmod = ctx.node().attr_int("fmod", 0) != 0;
  if (fmod) return Binary<NumericStorage>(ctx, FMod{});
  if (ctx.input(0) != nullptr && IsFloat(ctx.input(0)->dtype))
    return ctx.Error("fmod must be 1 for float inputs");
  return Binary<IntStorage>(ctx, PyMod{});
}

absl::Status BitShiftKernel(KernelContext& ctx) {
  const std::string dir = ctx.node().attr_string("direction", "");
  if (dir == "LEFT") return Binary<TypeList<uint8_t>>(ctx, ShiftLeft{});
  if (dir == "RIGHT") return Binary<TypeList<uint8_t>>(ctx, ShiftRight{});
  return ctx.Error(absl::StrCat("direction must be 'LEFT' or 'RIGHT', got '", dir, "'"));
}

// PRelu's slope broadcasts to X's shape (one way); the output has X's shape. Before opset 7 a
// 1-D slope of C elements applied per channel (dim 1): it is viewed as [C, 1, ..., 1].
absl::Status PReluKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* slope = ctx.input(1);
  TensorView* y = ctx.output(0);
  if (x == nullptr || slope == nullptr || y == nullptr) return ctx.Error("needs X and slope");
  if (x->dims != y->dims) return ctx.Error("slope must broadcast to the shape of X");
  TensorView per_channel = *slope;
  if (ctx.opset() > 0 && ctx.opset() < 7 && slope->rank() == 1 && x->rank() >= 2 &&
      slope->numel() == x->dims[1]) {
    per_channel.dims.assign(x->rank() - 1, 1);
    per_channel.dims[0] = slope->numel();
  }
  MT_ASSIGN_OR_RETURN(BroadcastLayout l, LayoutOf(ctx, {x, &per_channel}, *y));
  if (slope->dtype != x->dtype) return ctx.Error("slope must have X's dtype");
  return Dispatch(TypeList<float, ew::f16, ew::bf16, double, int32_t, int64_t>{}, x->dtype, ctx,
                  [&](auto tag) {
                    using S = typename decltype(tag)::type;
                    BinaryMap(l, x->as<S>(), per_channel.as<S>(), y->as<S>(), ew::PRelu{});
                  });
}

// Sum/Mean over 1..N inputs: out = in0 + in1, then out += in_k; a single input is copied. Mean
// then scales by 1/N (fp16/bf16 round at each step, as the stored intermediate is the output
// tensor; N is small in practice).
absl::Status SumInto(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckSameDtype(ctx));
  const TensorView& first = *ctx.input(0);
  TensorView& o = *ctx.output(0);
  if (ctx.num_inputs() == 1) {
    if (first.dims != o.dims) return ctx.Error("output shape differs from the input's");
    std::memcpy(o.data, first.data, first.nbytes());
    return absl::OkStatus();
  }
  for (size_t k = 1; k < ctx.num_inputs(); ++k) {
    const TensorView& acc = k == 1 ? first : o;
    const TensorView& in = *ctx.input(k);
    MT_ASSIGN_OR_RETURN(BroadcastLayout l, LayoutOf(ctx, {&acc, &in}, o));
    MT_RETURN_IF_ERROR(Dispatch(NumericStorage{}, first.dtype, ctx, [&](auto tag) {
      using S = typename decltype(tag)::type;
      BinaryMap(l, acc.as<S>(), in.as<S>(), o.as<S>(), ew::Add{});
    }));
  }
  return absl::OkStatus();
}

absl::Status SumKernel(KernelContext& ctx) { return SumInto(ctx); }

absl::Status MeanKernel(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(SumInto(ctx));
  TensorView& o = *ctx.output(0);
  const double inv = 1.0 / static_cast<double>(ctx.num_inputs());
  return Dispatch(FloatAndF64{}, o.dtype, ctx, [&](auto tag) {
    using S = typename decltype(tag)::type;
    UnaryMap(o.as<S>(), o.as<S>(), o.numel(), Scale{inv});
  });
}

}  // namespace

MT_REGISTER_KERNELS(cpu_elementwise_binary_math) {
  const auto cpu = DeviceType::kCPU;
  r.Register({"Mod", "", cpu, DTypes(NumericStorage{}), 0, FnKernel(ModKernel)});
  r.Register({"BitShift", "", cpu, {DType::kU8}, 0, FnKernel(BitShiftKernel)});
  r.Register({"PRelu", "", cpu,
              DTypes(TypeList<float, ew::f16, ew::bf16, double, int32_t, int64_t>{}), 0,
              FnKernel(PReluKernel)});
  r.Register({"Sum", "", cpu, DTypes(NumericStorage{}), 0, FnKernel(SumKernel)});
  r.Register({"Mean", "", cpu, DTypes(FloatAndF64{}), 0, FnKernel(MeanKernel)});
}

}  // namespace mixtrain::cpu_ew
