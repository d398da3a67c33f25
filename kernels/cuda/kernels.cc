// CUDA kernel classes for elementwise ops, Cast, Softmax/LogSoftmax, LayerNormalization and
// ReduceSum/ReduceMean: they check what a user can get wrong (dtypes, shapes, attributes) and
// return a Status naming the node, then call the launchers of kernels/cuda/*.cu on the node's
// stream. Registered for DeviceType::kCUDA in fp32, fp16 and bf16; the elementwise ops (and their
// dtypes) from the rows of kernels/cuda/elementwise_ops.h.
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "graph/ops/reduce_params.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

const auto kCuda = DeviceType::kCUDA;


absl::Status CheckFloat(const KernelContext& ctx, const TensorView* t, const char* what) {
  if (t == nullptr) return ctx.Error(absl::StrCat("missing ", what));
  if (!IsGpuFloat(t->dtype))
    return ctx.Error(absl::StrCat(what, " has dtype ", DTypeName(t->dtype), "; CUDA kernels take f32, f16, bf16"));
  return absl::OkStatus();
}

// The rows of kernels/cuda/elementwise_ops.h as data, indexed by enumerator.
struct EwRow {
  EwTypes types;
  EwAttrs attrs;
};
#define MT_EW_ROW(Name, domains, types, formula, attrs) EwRow{EwTypes::types, attrs},
constexpr EwRow kUnaryRows[] = {MT_CUDA_UNARY_OPS(MT_EW_ROW)};
constexpr EwRow kBinaryRows[] = {MT_CUDA_BINARY_OPS(MT_EW_ROW)};
#undef MT_EW_ROW

// A kNumber row also takes i32 and i64 (the step counter).
bool IsRowInteger(const EwRow& row, DType t) {
  return row.types == EwTypes::kNumber && (t == DType::kI32 || t == DType::kI64);
}

// The row to run: the registered one, or its tanh form when it has one and approximate="tanh".
template <typename Op>
absl::StatusOr<Op> RowToRun(const KernelContext& ctx, Op op, const EwRow& row) {
  if (row.attrs.tanh_form < 0) return op;
  std::string approx = ctx.node().attr_string("approximate", "none");
  if (approx == "tanh") return static_cast<Op>(row.attrs.tanh_form);
  if (approx != "none")
    return ctx.Error(absl::StrCat("approximate must be 'none' or 'tanh', got '", approx, "'"));
  return op;
}

// A unary row's kernel: y = op(x), x and y of one size and one of the row's dtypes.
absl::Status RunUnary(KernelContext& ctx, UnaryOp registered) {
  const EwRow& row = kUnaryRows[static_cast<int>(registered)];
  MT_ASSIGN_OR_RETURN(UnaryOp op, RowToRun(ctx, registered, row));
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || !IsRowInteger(row, x->dtype)) MT_RETURN_IF_ERROR(CheckFloat(ctx, x, "input 0"));
  if (y == nullptr || y->numel() != x->numel() || y->dtype != x->dtype)
    return ctx.Error("output differs from the input in size or dtype");
  const EwAttrs& at = row.attrs;
  const float alpha = at.alpha ? ctx.node().attr_float(at.alpha, at.alpha_default) : 0;
  const float beta = at.beta ? ctx.node().attr_float(at.beta, at.beta_default) : 0;
  LaunchUnary(op, x->dtype, alpha, beta, x->data, y->data, x->numel(), ctx.stream());
  return absl::OkStatus();
}
template <UnaryOp kOp>
absl::Status Unary(KernelContext& ctx) {
  return RunUnary(ctx, kOp);
}

// A binary row's kernel: o = op(a, b) broadcast, all of one of the row's dtypes.
absl::Status RunBinary(KernelContext& ctx, BinaryOp registered) {
  const EwRow& row = kBinaryRows[static_cast<int>(registered)];
  MT_ASSIGN_OR_RETURN(BinaryOp op, RowToRun(ctx, registered, row));
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(1);
  TensorView* o = ctx.output(0);
  if (ctx.num_inputs() != 2) return ctx.Error("the CUDA kernel takes exactly two inputs");
  if (a == nullptr || b == nullptr) return ctx.Error("missing an input");
  if (!IsRowInteger(row, a->dtype)) {
    MT_RETURN_IF_ERROR(CheckFloat(ctx, a, "input 0"));
    MT_RETURN_IF_ERROR(CheckFloat(ctx, b, "input 1"));
  }
  if (a->dtype != b->dtype || o == nullptr || o->dtype != a->dtype)
    return ctx.Error(absl::StrCat("inputs and output must share one dtype (", DTypeName(a->dtype), ", ",
                                  DTypeName(b->dtype), ")"));
  auto l = MakeBroadcastLayout({a->dims, b->dims}, o->dims);
  if (!l.ok()) return ctx.Error(l.status().message());
  LaunchBinary(op, a->dtype, *l, a->data, b->data, o->data, ctx.stream());
  return absl::OkStatus();
}
template <BinaryOp kOp>
absl::Status Binary(KernelContext& ctx) {
  return RunBinary(ctx, kOp);
}

// Registers a row's kernel in each of its domains, for its dtypes.
void RegisterRow(KernelRegistry& r, const char* op, std::initializer_list<const char*> domains, EwTypes types,
                 KernelFn fn) {
  static const std::vector<DType> numbers = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64};
  for (const char* domain : domains)
    r.Register({op, domain, kCuda, types == EwTypes::kNumber ? numbers : kFloatTypes, 0, FnKernel(fn)});
}

// PRelu(X, slope): the slope broadcasts to X's shape (one way). Before opset 7 a 1-D slope of C
// elements applied per channel (dim 1): it is viewed as [C, 1, ..., 1], as on the CPU.
absl::Status PRelu(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* slope = ctx.input(1);
  TensorView* y = ctx.output(0);
  MT_RETURN_IF_ERROR(CheckFloat(ctx, x, "X"));
  MT_RETURN_IF_ERROR(CheckFloat(ctx, slope, "slope"));
  if (slope->dtype != x->dtype || y == nullptr || y->dtype != x->dtype || y->dims != x->dims)
    return ctx.Error("slope and the output must have X's dtype, the output X's shape");
  std::vector<int64_t> slope_dims = slope->dims;
  if (ctx.opset() > 0 && ctx.opset() < 7 && slope->rank() == 1 && x->rank() >= 2 && slope->numel() == x->dims[1]) {
    slope_dims.assign(x->rank() - 1, 1);
    slope_dims[0] = slope->numel();
  }
  auto l = MakeBroadcastLayout({x->dims, slope_dims}, y->dims);
  if (!l.ok()) return ctx.Error(l.status().message());
  LaunchBinary(BinaryOp::kPRelu, x->dtype, *l, x->data, slope->data, y->data, ctx.stream());
  return absl::OkStatus();
}

// Comparisons and logic ops: bool out, operands of one dtype (numeric, or bool for the logic ops).
template <CompareOp kOp>
absl::Status Compare(KernelContext& ctx) {
  const TensorView *a = ctx.input(0), *b = ctx.input(1);
  TensorView* o = ctx.output(0);
  if (a == nullptr || b == nullptr || o == nullptr || ctx.num_inputs() != 2)
    return ctx.Error("needs two inputs and an output");
  const bool logic = kOp == CompareOp::kAnd || kOp == CompareOp::kOr || kOp == CompareOp::kXor;
  const DType t = a->dtype;
  const bool ok = logic ? t == DType::kBool
                        : (IsGpuFloat(t) || t == DType::kI32 || t == DType::kI64 ||
                           (kOp == CompareOp::kEqual && t == DType::kBool));
  if (!ok || b->dtype != t || o->dtype != DType::kBool)
    return ctx.Error(absl::StrCat("the CUDA kernel compares f32, f16, bf16, i32 or i64 (logic: bool) operands of "
                                  "one dtype into bool; got ", DTypeName(a->dtype), " and ", DTypeName(b->dtype)));
  auto l = MakeBroadcastLayout({a->dims, b->dims}, o->dims);
  if (!l.ok()) return ctx.Error(l.status().message());
  LaunchCompare(kOp, t, *l, a->data, b->data, static_cast<uint8_t*>(o->data), ctx.stream());
  return absl::OkStatus();
}

// CumSum(x, axis) with the axis from the host copy of the plan's constants.
absl::Status CumSum(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || ctx.input(1) == nullptr || y == nullptr) return ctx.Error("needs inputs x and axis");
  if (!(IsGpuFloat(x->dtype) || x->dtype == DType::kI32 || x->dtype == DType::kI64) || y->dtype != x->dtype ||
      y->numel() != x->numel())
    return ctx.Error("x and y must be f32, f16, bf16, i32 or i64 tensors of one dtype and size");
  const TensorView* a = ctx.host_input(1);
  if (a == nullptr) return ctx.Error("axis is computed on the GPU at run time; the CUDA CumSum needs it fixed");
  if (a->numel() != 1 || (a->dtype != DType::kI64 && a->dtype != DType::kI32))
    return ctx.Error("axis must be a scalar (or 1-element) int tensor");
  const int64_t raw = a->dtype == DType::kI64 ? *static_cast<const int64_t*>(a->data) : *static_cast<const int32_t*>(a->data);
  auto axis = movement::NormalizeAxis(raw, x->rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t d = 0; d < x->rank(); ++d) (d < *axis ? outer : d == *axis ? n : inner) *= x->dims[d];
  LaunchCumSum(x->dtype, x->data, y->data, outer, n, inner, ctx.node().attr_int("exclusive", 0) != 0,
               ctx.node().attr_int("reverse", 0) != 0, ctx.stream());
  return absl::OkStatus();
}

absl::Status IsNaN(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  MT_RETURN_IF_ERROR(CheckFloat(ctx, x, "input 0"));
  if (y == nullptr || y->dtype != DType::kBool || y->numel() != x->numel())
    return ctx.Error("the output must be bool of the input's shape");
  LaunchIsNaN(x->dtype, x->data, static_cast<uint8_t*>(y->data), x->numel(), ctx.stream());
  return absl::OkStatus();
}

bool Castable(DType t) { return IsGpuFloat(t) || t == DType::kI32 || t == DType::kI64 || t == DType::kBool; }

absl::Status Cast(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("needs an input and an output");
  if (!Castable(x->dtype) || !Castable(y->dtype))
    return ctx.Error(absl::StrCat("the CUDA Cast converts between f32, f16, bf16, i32, i64 and bool, not ",
                                  DTypeName(x->dtype), " to ", DTypeName(y->dtype)));
  if (x->numel() != y->numel()) return ctx.Error("output size differs from the input's");
  if (x->dtype == y->dtype) {
    if (x->data != y->data)
      MT_CUDA_CHECK(cudaMemcpyAsync(y->data, x->data, x->nbytes(), cudaMemcpyDeviceToDevice,
                                    static_cast<cudaStream_t>(ctx.stream())));
    return absl::OkStatus();
  }
  LaunchCast(x->dtype, y->dtype, x->data, y->data, x->numel(), ctx.stream());
  return absl::OkStatus();
}

// [outer, n, inner] around one axis.
struct View {
  int64_t outer = 1, n = 1, inner = 1;
};
View AroundAxis(const std::vector<int64_t>& dims, int64_t axis) {
  View v;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) (i < axis ? v.outer : i == axis ? v.n : v.inner) *= dims[i];
  return v;
}

// As the CPU kernel: opset < 13 coerces to 2-D at axis (default 1); 13+ normalizes one axis.
template <bool kLog>
absl::Status Softmax(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  MT_RETURN_IF_ERROR(CheckFloat(ctx, x, "input 0"));
  const bool coerce_2d = ctx.opset() > 0 && ctx.opset() < 13;
  std::vector<int64_t> dims = x->dims;
  if (dims.empty()) dims.push_back(1);
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", coerce_2d ? 1 : -1), dims.size());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  View v = AroundAxis(dims, *axis);
  if (coerce_2d) v = {v.outer, v.n * v.inner, 1};
  LaunchSoftmax(kLog, x->dtype, x->data, ctx.output(0)->data, v.outer, v.n, v.inner, ctx.stream());
  return absl::OkStatus();
}

absl::Status LayerNorm(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* scale = ctx.input(1);
  const TensorView* bias = ctx.input(2);
  MT_RETURN_IF_ERROR(CheckFloat(ctx, x, "X"));
  MT_RETURN_IF_ERROR(CheckFloat(ctx, scale, "Scale"));
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", -1), x->rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  int64_t rows = 1, n = 1;
  for (int64_t i = 0; i < x->rank(); ++i) (i < *axis ? rows : n) *= x->dims[i];
  // The CPU kernel also broadcasts smaller parameters; the CUDA one takes the usual full shape.
  if (scale->numel() != n || (bias != nullptr && (bias->numel() != n || bias->dtype != scale->dtype)))
    return ctx.Error(absl::StrCat("the CUDA LayerNormalization needs Scale and B of ", n,
                                  " elements and one dtype"));
  for (size_t i = 1; i <= 2; ++i)
    if (ctx.output(i) != nullptr && ctx.output(i)->dtype != DType::kF32)
      return ctx.Error("the CUDA LayerNormalization writes Mean and InvStdDev as f32 (stash_type=1)");
  const float eps = ctx.node().attr_float("epsilon", 1e-5f);
  LaunchLayerNorm(x->dtype, x->data, ctx.output(0)->data, rows, n, scale->dtype, scale->data,
                  bias ? bias->data : nullptr, eps, ctx.output(1) ? ctx.output(1)->as<float>() : nullptr,
                  ctx.output(2) ? ctx.output(2)->as<float>() : nullptr, ctx.stream());
  return absl::OkStatus();
}

// ReduceSum / ReduceMean whose reduced axes form one block once size-1 dims are dropped (bias
// gradients, means over the last axes). The axes come from the host copy of the plan's constants
// (KernelContext::host_input): no read-back, no wait for the device.
template <bool kMean>
absl::Status Reduce(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  MT_RETURN_IF_ERROR(CheckFloat(ctx, x, "input 0"));
  std::vector<int64_t> axes;
  const std::vector<int64_t>* axes_ptr = nullptr;
  if (const TensorView* a = ctx.input(1); a != nullptr && a->numel() > 0) {
    if (a->dtype != DType::kI64) return ctx.Error("axes must be int64");
    const TensorView* h = ctx.host_input(1);
    if (h == nullptr)
      return ctx.Error("axes are computed on the GPU at run time; the CUDA kernel needs them fixed when the plan is "
                       "made (a constant)");
    axes.assign(static_cast<const int64_t*>(h->data), static_cast<const int64_t*>(h->data) + h->numel());
    axes_ptr = &axes;
  } else if (ctx.input(1) != nullptr) {
    axes_ptr = &axes;
  }
  auto mask = reduce::ReduceMask(ctx.node(), axes_ptr, x->rank());
  if (!mask.ok()) return ctx.Error(mask.status().message());
  // Groups of kept / reduced dims, size-1 dims dropped; at most kept-reduced-kept is supported.
  std::vector<std::pair<int64_t, bool>> groups;
  for (int64_t i = 0; i < x->rank(); ++i) {
    if (x->dims[i] == 1) continue;
    if (!groups.empty() && groups.back().second == (*mask)[i]) groups.back().first *= x->dims[i];
    else groups.push_back({x->dims[i], static_cast<bool>((*mask)[i])});
  }
  View v;
  int seen_reduced = 0;
  for (auto [size, reduced] : groups) {
    if (reduced) {
      v.n = size;
      ++seen_reduced;
    } else {
      (seen_reduced ? v.inner : v.outer) *= size;
    }
  }
  if (seen_reduced > 1)
    return ctx.Error("the CUDA kernel reduces one contiguous block of axes; these axes are split");
  LaunchReduceSum(kMean, x->dtype, x->data, ctx.output(0)->data, v.outer, v.n, v.inner, ctx.stream());
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cuda_kernels) {
#define MT_EW_UNPAREN(...) __VA_ARGS__
#define MT_EW_REGISTER_UNARY(Name, domains, types, formula, attrs) \
  RegisterRow(r, #Name, {MT_EW_UNPAREN domains}, EwTypes::types, Unary<UnaryOp::k##Name>);
#define MT_EW_REGISTER_BINARY(Name, domains, types, formula, attrs) \
  RegisterRow(r, #Name, {MT_EW_UNPAREN domains}, EwTypes::types, Binary<BinaryOp::k##Name>);
  MT_CUDA_UNARY_OPS(MT_EW_REGISTER_UNARY)
  MT_CUDA_BINARY_OPS(MT_EW_REGISTER_BINARY)
#undef MT_EW_REGISTER_BINARY
#undef MT_EW_REGISTER_UNARY
#undef MT_EW_UNPAREN
  auto reg = [&](const char* op, KernelFn fn) { r.Register({op, "", kCuda, kFloatTypes, 0, FnKernel(fn)}); };
  reg("IsNaN", IsNaN);
  r.Register({"CumSum", "", kCuda, {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64}, 0,
              FnKernel(CumSum)});
  reg("PRelu", PRelu);  // its row has no domains: the slope broadcasts one way, per channel before opset 7
  r.Register({"Cast", "", kCuda, {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}, 0,
              FnKernel(Cast)});
  reg("Softmax", Softmax<false>);
  reg("LogSoftmax", Softmax<true>);
  reg("LayerNormalization", LayerNorm);
  reg("ReduceSum", Reduce<false>);
  reg("ReduceMean", Reduce<true>);
  auto cmp = [&](const char* op, KernelFn fn) { r.Register({op, "", kCuda, {}, 0, FnKernel(fn)}); };
  cmp("Equal", Compare<CompareOp::kEqual>);
  cmp("Less", Compare<CompareOp::kLess>);
  cmp("LessOrEqual", Compare<CompareOp::kLessOrEqual>);
  cmp("Greater", Compare<CompareOp::kGreater>);
  cmp("GreaterOrEqual", Compare<CompareOp::kGreaterOrEqual>);
  cmp("And", Compare<CompareOp::kAnd>);
  cmp("Or", Compare<CompareOp::kOr>);
  cmp("Xor", Compare<CompareOp::kXor>);
}

}  // namespace mixtrain::cuda
