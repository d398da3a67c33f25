// CPU kernels for the unary elementwise ops: activations and math (float types), Neg/Abs/Relu
// (also on ints), Clip in both opset forms, Not. The math is in kernels/common/elementwise.h.
#include <limits>

#include "kernels/cpu/elementwise_loops.h"

namespace mixtrain::cpu_ew {
namespace {

// Transcendental ops cost ~10-40x an add per element, so they go parallel sooner.
constexpr int64_t kMathGrain = 4096;

absl::Status CheckUnary(const KernelContext& ctx) {
  if (ctx.input(0) == nullptr || ctx.output(0) == nullptr) return ctx.Error("missing input 0");
  if (ctx.input(0)->numel() != ctx.output(0)->numel())
    return ctx.Error("output size differs from the input's");
  return absl::OkStatus();
}

template <typename Op, typename Types>
absl::Status Unary(KernelContext& ctx, const Op& op, int64_t grain) {
  MT_RETURN_IF_ERROR(CheckUnary(ctx));
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  return Dispatch(Types{}, x.dtype, ctx, [&](auto tag) {
    using S = typename decltype(tag)::type;
    UnaryMap(x.as<S>(), y.as<S>(), x.numel(), op, grain);
  });
}

template <typename Op>
absl::Status FloatMath(KernelContext& ctx) {
  return Unary<Op, FloatStorage>(ctx, Op{}, kMathGrain);
}

template <typename Op, typename Types>
absl::Status Cheap(KernelContext& ctx) {
  return Unary<Op, Types>(ctx, Op{}, kElementwiseGrain);
}

absl::Status LeakyReluKernel(KernelContext& ctx) {
  ew::LeakyRelu op{ctx.node().attr_float("alpha", 0.01f)};
  return Unary<ew::LeakyRelu, FloatStorage>(ctx, op, kElementwiseGrain);
}

absl::Status GeluKernel(KernelContext& ctx) {
  std::string approx = ctx.node().attr_string("approximate", "none");
  if (approx == "tanh") return FloatMath<ew::GeluTanh>(ctx);
  if (approx != "none")
    return ctx.Error(absl::StrCat("approximate must be 'none' or 'tanh', got '", approx, "'"));
  return FloatMath<ew::Gelu>(ctx);
}

absl::Status NotKernel(KernelContext& ctx) {
  return Unary<ew::Not, TypeList<bool>>(ctx, ew::Not{}, kElementwiseGrain);
}

// Clip: opset < 11 has float attributes min/max; opset >= 11 optional scalar inputs 1 and 2 of
// the input's type. The kernel does not know the opset, so it reads whichever form is present.
absl::Status ClipKernel(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckUnary(ctx));
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  const Node& node = ctx.node();
  for (int i = 1; i <= 2; ++i) {
    const TensorView* b = ctx.input(i);
    if (b != nullptr && (b->numel() != 1 || b->dtype != x.dtype))
      return ctx.Error(absl::StrCat(i == 1 ? "min" : "max", " must be a scalar of the input's ",
                                    "dtype ", DTypeName(x.dtype)));
  }
  return Dispatch(NumericStorage{}, x.dtype, ctx, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using C = typename Io<S>::C;
    C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if constexpr (std::is_floating_point_v<C>) {
      lo = -std::numeric_limits<C>::infinity();
      hi = std::numeric_limits<C>::infinity();
    }
    if (node.has_attr("min")) lo = static_cast<C>(node.attr_float("min", 0));
    if (node.has_attr("max")) hi = static_cast<C>(node.attr_float("max", 0));
    if (const TensorView* b = ctx.input(1)) lo = Io<S>::Load(b->as<S>()[0]);
    if (const TensorView* b = ctx.input(2)) hi = Io<S>::Load(b->as<S>()[0]);
    UnaryMap(x.as<S>(), y.as<S>(), x.numel(), ew::Clip<C>{lo, hi});
  });
}

}  // namespace

absl::StatusOr<BroadcastLayout> LayoutOf(const KernelContext& ctx,
                                         std::initializer_list<const TensorView*> ins,
                                         const TensorView& out) {
  std::span<const int64_t> dims[kMaxBroadcastInputs];
  size_t n = 0;
  for (const TensorView* t : ins) {
    if (t == nullptr) return ctx.Error("missing input");
    if (n == kMaxBroadcastInputs) return ctx.Error("too many inputs to broadcast");
    dims[n++] = t->dims;
  }
  auto l = MakeBroadcastLayout(std::span<const std::span<const int64_t>>(dims, n), out.dims);
  if (!l.ok()) return ctx.Error(l.status().message());
  return l;
}

MT_REGISTER_KERNELS(cpu_elementwise_unary) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> f = DTypes(FloatStorage{});
  const std::vector<DType> s = DTypes(SignedStorage{});
  r.Register({"Sqrt", "", cpu, f, 0, FnKernel(FloatMath<ew::Sqrt>)});
  r.Register({"Reciprocal", "", cpu, f, 0, FnKernel(FloatMath<ew::Reciprocal>)});
  r.Register({"Exp", "", cpu, f, 0, FnKernel(FloatMath<ew::Exp>)});
  r.Register({"Log", "", cpu, f, 0, FnKernel(FloatMath<ew::Log>)});
  r.Register({"Erf", "", cpu, f, 0, FnKernel(FloatMath<ew::Erf>)});
  r.Register({"Tanh", "", cpu, f, 0, FnKernel(FloatMath<ew::Tanh>)});
  r.Register({"Sigmoid", "", cpu, f, 0, FnKernel(FloatMath<ew::Sigmoid>)});
  r.Register({"Softplus", "", cpu, f, 0, FnKernel(FloatMath<ew::Softplus>)});
  r.Register({"Gelu", "", cpu, f, 0, FnKernel(GeluKernel)});
  // fuse_gelu's Gelu for graphs older than opset 20 (graph/ops/fused_eltwise_ops.cc).
  r.Register({"Gelu", "ai.mixtrain", cpu, f, 0, FnKernel(GeluKernel)});
  r.Register({"LeakyRelu", "", cpu, f, 0, FnKernel(LeakyReluKernel)});
  r.Register({"Relu", "", cpu, s, 0, FnKernel(Cheap<ew::Relu, SignedStorage>)});
  r.Register({"Neg", "", cpu, s, 0, FnKernel(Cheap<ew::Neg, SignedStorage>)});
  r.Register({"Abs", "", cpu, DTypes(NumericStorage{}), 0, FnKernel(Cheap<ew::Abs, NumericStorage>)});
  r.Register({"Clip", "", cpu, DTypes(NumericStorage{}), 0, FnKernel(ClipKernel)});
  r.Register({"Not", "", cpu, {DType::kBool}, 0, FnKernel(NotKernel)});
}

}  // namespace mixtrain::cpu_ew
