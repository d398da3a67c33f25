// CPU kernels for the broadcasting elementwise ops: arithmetic, Pow, variadic Max/Min,
// comparisons (bool out), And/Or/Xor and Where. Loops are in elementwise_loops.h.
#include <cmath>
#include <vector>

#include "kernels/cpu/elementwise_loops.h"

namespace mixtrain::cpu_ew {
namespace {

absl::Status CheckSameDtype(const KernelContext& ctx, const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype)
    return ctx.Error(absl::StrCat("input dtypes differ: ", DTypeName(a.dtype), " and ",
                                  DTypeName(b.dtype)));
  return absl::OkStatus();
}

// out = op(a, b) with numpy broadcasting; the output is bool for comparisons, else a's type.
template <typename Op, typename Types, bool kBoolOut>
absl::Status Binary(KernelContext& ctx) {
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(1);
  TensorView* o = ctx.output(0);
  if (a == nullptr || b == nullptr || o == nullptr) return ctx.Error("needs two inputs");
  MT_RETURN_IF_ERROR(CheckSameDtype(ctx, *a, *b));
  MT_ASSIGN_OR_RETURN(BroadcastLayout l, LayoutOf(ctx, {a, b}, *o));
  return Dispatch(Types{}, a->dtype, ctx, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using SO = std::conditional_t<kBoolOut, bool, S>;
    BinaryMap(l, a->as<S>(), b->as<S>(), o->as<SO>(), Op{});
  });
}

// Max/Min over 1..N inputs: out = op(in0, in1), then out = op(out, in_k) for the rest (exact:
// max/min never round, so the intermediate stores lose nothing).
template <typename Op>
absl::Status Variadic(KernelContext& ctx) {
  TensorView* o = ctx.output(0);
  if (ctx.num_inputs() == 0 || ctx.input(0) == nullptr || o == nullptr)
    return ctx.Error("needs at least one input");
  const TensorView& first = *ctx.input(0);
  for (size_t k = 1; k < ctx.num_inputs(); ++k) {
    if (ctx.input(k) == nullptr) return ctx.Error("missing input");
    MT_RETURN_IF_ERROR(CheckSameDtype(ctx, first, *ctx.input(k)));
  }
  if (ctx.num_inputs() == 1) {
    MT_ASSIGN_OR_RETURN(BroadcastLayout l, LayoutOf(ctx, {&first, &first}, *o));
    return Dispatch(NumericStorage{}, first.dtype, ctx, [&](auto tag) {
      using S = typename decltype(tag)::type;
      BinaryMap(l, first.as<S>(), first.as<S>(), o->as<S>(), Op{});
    });
  }
  for (size_t k = 1; k < ctx.num_inputs(); ++k) {
    const TensorView& acc = k == 1 ? first : *o;
    const TensorView& in = *ctx.input(k);
    MT_ASSIGN_OR_RETURN(BroadcastLayout l, LayoutOf(ctx, {&acc, &in}, *o));
    MT_RETURN_IF_ERROR(Dispatch(NumericStorage{}, first.dtype, ctx, [&](auto tag) {
      using S = typename decltype(tag)::type;
      BinaryMap(l, acc.as<S>(), in.as<S>(), o->as<S>(), Op{});
    }));
  }
  return absl::OkStatus();
}

// The value of a one-element tensor as double, or NaN for anything else.
double ScalarValue(const TensorView& t) {
  if (t.numel() != 1) return std::nan("");
  switch (t.dtype) {
    case DType::kF32: return t.as<float>()[0];
    case DType::kF16: return HalfToFloat(t.as<uint16_t>()[0]);
    case DType::kBF16: return BFloat16ToFloat(t.as<uint16_t>()[0]);
    case DType::kF64: return t.as<double>()[0];
    case DType::kI32: return t.as<int32_t>()[0];
    case DType::kI64: return static_cast<double>(t.as<int64_t>()[0]);
    default: return std::nan("");
  }
}

// Pow(base, exponent): the output has the base's dtype; the exponent may have another numeric
// dtype. Same-dtype pairs run the functor directly, x^2 (LayerNorm decompositions) and x^3 are
// multiplies, and mixed pairs (rare, small) are computed in double and cast to the base's dtype,
// which is what ONNX's reference does (numpy promotes int ** float to float64).
absl::Status PowKernel(KernelContext& ctx) {
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(1);
  TensorView* o = ctx.output(0);
  if (a == nullptr || b == nullptr || o == nullptr) return ctx.Error("needs two inputs");
  const bool float_base = IsFloat(a->dtype) && a->dtype != DType::kF64;
  // x^2 (LayerNorm decompositions) and x^3 (tanh-GELU's: a scalar powf per element was 9% of a
  // GPT-2 step) as products, as PyTorch's pow does for these scalar exponents.
  if (const double e = float_base && a->numel() == o->numel() ? ScalarValue(*b) : 0; e == 2.0 || e == 3.0) {
    return Dispatch(FloatStorage{}, a->dtype, ctx, [&](auto tag) {
      using S = typename decltype(tag)::type;
      if (e == 2.0) UnaryMap(a->as<S>(), o->as<S>(), a->numel(), ew::Square{});
      else UnaryMap(a->as<S>(), o->as<S>(), a->numel(), ew::Cube{});
    });
  }
  MT_ASSIGN_OR_RETURN(BroadcastLayout l, LayoutOf(ctx, {a, b}, *o));
  if (a->dtype == b->dtype) {
    if (float_base) {
      return Dispatch(FloatStorage{}, a->dtype, ctx, [&](auto tag) {
        using S = typename decltype(tag)::type;
        BinaryMap(l, a->as<S>(), b->as<S>(), o->as<S>(), ew::Pow{}, 4096);
      });
    }
    if (a->dtype == DType::kF64) {
      BinaryMap(l, a->as<double>(), b->as<double>(), o->as<double>(), ew::Pow{}, 4096);
      return absl::OkStatus();
    }
    return Dispatch(TypeList<int32_t, int64_t>{}, a->dtype, ctx, [&](auto tag) {
      using S = typename decltype(tag)::type;
      BinaryMap(l, a->as<S>(), b->as<S>(), o->as<S>(), ew::IntPow{});
    });
  }
  std::vector<double> da(a->numel()), db(b->numel()), out(o->numel());
  MT_RETURN_IF_ERROR(CastBuffer(ctx, a->dtype, a->data, DType::kF64, da.data(), a->numel()));
  MT_RETURN_IF_ERROR(CastBuffer(ctx, b->dtype, b->data, DType::kF64, db.data(), b->numel()));
  BinaryMap(l, da.data(), db.data(), out.data(), ew::Pow{});
  return CastBuffer(ctx, DType::kF64, out.data(), o->dtype, o->data, o->numel());
}

// Where(cond, x, y): x where cond else y, all three broadcast.
// One row of Where with inner strides (0 or 1) fixed at compile time. The select is a blend on
// the bit patterns, with the condition read as bytes: `c ? x : y` on loaded values does not
// vectorize (GCC has no vector type for bool and sinks the loads into branches).
template <size_t N>
struct UIntOf;
template <>
struct UIntOf<1> { using T = uint8_t; };
template <>
struct UIntOf<2> { using T = uint16_t; };
template <>
struct UIntOf<4> { using T = uint32_t; };
template <>
struct UIntOf<8> { using T = uint64_t; };

template <typename S, int64_t SC, int64_t SX, int64_t SY>
void WhereRow(const bool* c, const S* x, const S* y, S* o, int64_t n) {
  using U = typename UIntOf<sizeof(S)>::T;
  const auto* cb = reinterpret_cast<const uint8_t*>(c);  // a bool's byte is 0 or 1
  const auto* xu = reinterpret_cast<const U*>(x);
  const auto* yu = reinterpret_cast<const U*>(y);
  auto* ou = reinterpret_cast<U*>(o);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const U m = U(0) - static_cast<U>(cb[i * SC]);
    ou[i] = (xu[i * SX] & m) | (yu[i * SY] & static_cast<U>(~m));
  }
}

// Picks the WhereRow instance for strides in {0, 1}; false for any other stride.
template <typename S>
bool WhereRowDispatch(int64_t sc, int64_t sx, int64_t sy, const bool* c, const S* x, const S* y,
                      S* o, int64_t n) {
  if ((sc | sx | sy) & ~int64_t{1}) return false;
  switch (sc * 4 + sx * 2 + sy) {
    case 0: WhereRow<S, 0, 0, 0>(c, x, y, o, n); break;
    case 1: WhereRow<S, 0, 0, 1>(c, x, y, o, n); break;
    case 2: WhereRow<S, 0, 1, 0>(c, x, y, o, n); break;
    case 3: WhereRow<S, 0, 1, 1>(c, x, y, o, n); break;
    case 4: WhereRow<S, 1, 0, 0>(c, x, y, o, n); break;
    case 5: WhereRow<S, 1, 0, 1>(c, x, y, o, n); break;
    case 6: WhereRow<S, 1, 1, 0>(c, x, y, o, n); break;
    default: WhereRow<S, 1, 1, 1>(c, x, y, o, n); break;
  }
  return true;
}

absl::Status WhereKernel(KernelContext& ctx) {
  const TensorView* c = ctx.input(0);
  const TensorView* x = ctx.input(1);
  const TensorView* y = ctx.input(2);
  TensorView* o = ctx.output(0);
  if (c == nullptr || x == nullptr || y == nullptr || o == nullptr)
    return ctx.Error("needs three inputs");
  if (c->dtype != DType::kBool) return ctx.Error("condition must be bool");
  MT_RETURN_IF_ERROR(CheckSameDtype(ctx, *x, *y));
  MT_ASSIGN_OR_RETURN(BroadcastLayout l, LayoutOf(ctx, {c, x, y}, *o));
  const int64_t sc = l.inner_stride(0), sx = l.inner_stride(1), sy = l.inner_stride(2);
  return Dispatch(AllStorage{}, x->dtype, ctx, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const bool* cp = c->as<bool>();
    const S* xp = x->as<S>();
    const S* yp = y->as<S>();
    S* op = o->as<S>();
    ParallelFor(l.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      ForEachRow(l, begin, end, [&](int64_t out, const int64_t* in, int64_t len) {
        const bool* cr = cp + in[0];
        const S* xr = xp + in[1];
        const S* yr = yp + in[2];
        S* orow = op + out;
        if (!WhereRowDispatch(sc, sx, sy, cr, xr, yr, orow, len)) {
          for (int64_t i = 0; i < len; ++i) orow[i] = cr[i * sc] ? xr[i * sx] : yr[i * sy];
        }
      });
    });
  });
}

// ai.mixtrain.GeluGrad(dY, X) -> dX: exact (erf) or tanh form per `approximate`.
absl::Status GeluGradKernel(KernelContext& ctx) {
  if (ctx.node().attr_string("approximate", "none") == "tanh")
    return Binary<ew::GeluTanhGrad, FloatStorage, false>(ctx);
  return Binary<ew::GeluGrad, FloatStorage, false>(ctx);
}

}  // namespace

MT_REGISTER_KERNELS(cpu_elementwise_binary) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> num = DTypes(NumericStorage{});
  const std::vector<DType> bools = {DType::kBool};
  using Num = NumericStorage;
  r.Register({"Add", "", cpu, num, 0, FnKernel(Binary<ew::Add, Num, false>)});
  r.Register({"ReluGrad", "ai.mixtrain", cpu, DTypes(FloatStorage{}), 0,
              FnKernel(Binary<ew::ReluGrad, FloatStorage, false>)});
  r.Register({"GeluGrad", "ai.mixtrain", cpu, DTypes(FloatStorage{}), 0, FnKernel(GeluGradKernel)});
  r.Register({"Sub", "", cpu, num, 0, FnKernel(Binary<ew::Sub, Num, false>)});
  r.Register({"Mul", "", cpu, num, 0, FnKernel(Binary<ew::Mul, Num, false>)});
  r.Register({"Div", "", cpu, num, 0, FnKernel(Binary<ew::Div, Num, false>)});
  r.Register({"Max", "", cpu, num, 0, FnKernel(Variadic<ew::Max>)});
  r.Register({"Min", "", cpu, num, 0, FnKernel(Variadic<ew::Min>)});
  r.Register({"Pow", "", cpu, DTypes(TypeList<float, ew::f16, ew::bf16, double, int32_t, int64_t>{}),
              0, FnKernel(PowKernel)});
  r.Register({"Equal", "", cpu, DTypes(AllStorage{}), 0,
              FnKernel(Binary<ew::Equal, AllStorage, true>)});
  r.Register({"Less", "", cpu, num, 0, FnKernel(Binary<ew::Less, Num, true>)});
  r.Register({"LessOrEqual", "", cpu, num, 0, FnKernel(Binary<ew::LessOrEqual, Num, true>)});
  r.Register({"Greater", "", cpu, num, 0, FnKernel(Binary<ew::Greater, Num, true>)});
  r.Register({"GreaterOrEqual", "", cpu, num, 0,
              FnKernel(Binary<ew::GreaterOrEqual, Num, true>)});
  using Bool = TypeList<bool>;
  r.Register({"And", "", cpu, bools, 0, FnKernel(Binary<ew::And, Bool, true>)});
  r.Register({"Or", "", cpu, bools, 0, FnKernel(Binary<ew::Or, Bool, true>)});
  r.Register({"Xor", "", cpu, bools, 0, FnKernel(Binary<ew::Xor, Bool, true>)});
  r.Register({"Where", "", cpu, DTypes(AllStorage{}), 1, FnKernel(WhereKernel)});
}

}  // namespace mixtrain::cpu_ew
