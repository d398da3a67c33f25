// CPU kernels for linear quantization: QuantizeLinear (per tensor or per axis, uint8/int8),
// DequantizeLinear, DynamicQuantizeLinear, MatMulInteger and QLinearMatMul. Rounding is half to even and results saturate to
// the integer type's range, as ONNX defines them. Values pass through double (CastBuffer).
#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/ops/movement_params.h"
#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

absl::StatusOr<std::vector<double>> Doubles(const KernelContext& ctx, const TensorView* t) {
  std::vector<double> v;
  if (t == nullptr) return v;
  v.resize(t->numel());
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, t->dtype, t->data, DType::kF64, v.data(), t->numel()));
  return v;
}

// The index into a per-axis parameter (scale, zero point) of element i, or 0 when per tensor.
struct ParamIndex {
  int64_t inner = 1, n = 1;
  bool per_axis = false;
  int64_t operator()(int64_t i) const { return per_axis ? (i / inner) % n : 0; }
};

absl::StatusOr<ParamIndex> ParamIndexOf(const KernelContext& ctx, const TensorView& x,
                                        const TensorView& scale) {
  ParamIndex p;
  if (scale.numel() == 1 && scale.rank() <= 1) return p;
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", 1), x.rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  const AxisView v = ViewAroundAxis(x.dims, *axis);
  if (scale.rank() != 1 || scale.numel() != v.n)
    return ctx.Error(absl::StrCat("scale must be a scalar or have ", v.n, " elements (axis ", *axis, ")"));
  p = {v.inner, v.n, true};
  return p;
}

double RoundHalfEven(double v) { return std::nearbyint(v); }

absl::Status QuantizeKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* scale = ctx.input(1);
  const TensorView* zp = ctx.input(2);
  TensorView* y = ctx.output(0);
  if (x == nullptr || scale == nullptr || y == nullptr) return ctx.Error("needs x and y_scale");
  if (y->dtype != DType::kU8 && y->dtype != DType::kI8) return ctx.Error("output must be uint8 or int8");
  MT_ASSIGN_OR_RETURN(ParamIndex at, ParamIndexOf(ctx, *x, *scale));
  if (zp != nullptr && zp->numel() != scale->numel()) return ctx.Error("zero point must match the scale");
  MT_ASSIGN_OR_RETURN(std::vector<double> xv, Doubles(ctx, x));
  MT_ASSIGN_OR_RETURN(std::vector<double> sv, Doubles(ctx, scale));
  MT_ASSIGN_OR_RETURN(std::vector<double> zv, Doubles(ctx, zp));
  const double lo = y->dtype == DType::kU8 ? 0 : -128, hi = y->dtype == DType::kU8 ? 255 : 127;
  // Float inputs divide in float, as ONNX's reference does: the quotient's rounding decides
  // ties of the final round-half-even.
  const bool in_float = IsFloat(x->dtype);
  std::vector<double> out(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t k = at(i);
    const double q = in_float ? static_cast<float>(xv[i]) / static_cast<float>(sv[k]) : xv[i] / sv[k];
    out[i] = std::clamp(RoundHalfEven(q) + (zv.empty() ? 0 : zv[k]), lo, hi);
  }
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), y->dtype, y->data, y->numel());
}

absl::Status DequantizeKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* scale = ctx.input(1);
  const TensorView* zp = ctx.input(2);
  TensorView* y = ctx.output(0);
  if (x == nullptr || scale == nullptr || y == nullptr) return ctx.Error("needs x and x_scale");
  MT_ASSIGN_OR_RETURN(ParamIndex at, ParamIndexOf(ctx, *x, *scale));
  if (zp != nullptr && zp->numel() != scale->numel()) return ctx.Error("zero point must match the scale");
  MT_ASSIGN_OR_RETURN(std::vector<double> xv, Doubles(ctx, x));
  MT_ASSIGN_OR_RETURN(std::vector<double> sv, Doubles(ctx, scale));
  MT_ASSIGN_OR_RETURN(std::vector<double> zv, Doubles(ctx, zp));
  std::vector<double> out(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t k = at(i);
    out[i] = (xv[i] - (zv.empty() ? 0 : zv[k])) * sv[k];
  }
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), y->dtype, y->data, y->numel());
}

// DynamicQuantizeLinear: uint8 with the range [min(x, 0), max(x, 0)] mapped onto [0, 255].
absl::Status DynamicQuantizeKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  TensorView* y_scale = ctx.output(1);
  TensorView* y_zp = ctx.output(2);
  if (x == nullptr || y == nullptr || y_scale == nullptr || y_zp == nullptr)
    return ctx.Error("needs x and outputs y, y_scale, y_zero_point");
  MT_ASSIGN_OR_RETURN(std::vector<double> xv, Doubles(ctx, x));
  // The reference computes in float32; so does this, to round the same way.
  float mn = 0, mx = 0;
  for (double v : xv) {
    mn = std::min(mn, static_cast<float>(v));
    mx = std::max(mx, static_cast<float>(v));
  }
  const float scale = (mx - mn) / 255.0f;
  const double zp = scale == 0 ? 0 : std::clamp(RoundHalfEven(0 - mn / scale), 0.0, 255.0);
  std::vector<double> out(xv.size());
  for (size_t i = 0; i < xv.size(); ++i)
    out[i] = std::clamp(RoundHalfEven(scale == 0 ? 0 : static_cast<float>(xv[i]) / scale) + zp, 0.0, 255.0);
  const double scale_d = scale;
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), DType::kU8, y->data, y->numel()));
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, DType::kF64, &scale_d, y_scale->dtype, y_scale->data, 1));
  return cpu_ew::CastBuffer(ctx, DType::kF64, &zp, DType::kU8, y_zp->data, 1);
}

// Integer matrix products: out[b, m, n] = sum_k (a[b, m, k] - a_zp[m]) * (b[b, k, n] - b_zp[n]),
// zero points per tensor or per row of A / column of B; batch dims equal, or one side 2-D.
// QLinearMatMul then requantizes with a_scale * b_scale / y_scale (each per tensor or per
// row/column) and y's zero point.
absl::Status QuantizedMatMul(KernelContext& ctx, bool qlinear) {
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(qlinear ? 3 : 1);
  TensorView* y = ctx.output(0);
  if (a == nullptr || b == nullptr || y == nullptr || a->rank() < 2 || b->rank() < 2)
    return ctx.Error("needs A and B of rank >= 2");
  const int64_t m = a->dims[a->rank() - 2], k = a->dims.back(), n = b->dims.back();
  if (b->dims[b->rank() - 2] != k) return ctx.Error("A's columns must match B's rows");
  const int64_t ba = a->numel() / (m * k), bb = b->numel() / (k * n), batches = std::max(ba, bb);
  if ((ba != bb && ba != 1 && bb != 1) || y->numel() != batches * m * n)
    return ctx.Error("batch dims must be equal or one side 2-D");
  MT_ASSIGN_OR_RETURN(std::vector<double> av, Doubles(ctx, a));
  MT_ASSIGN_OR_RETURN(std::vector<double> bv, Doubles(ctx, b));
  MT_ASSIGN_OR_RETURN(std::vector<double> azp, Doubles(ctx, ctx.input(2)));
  MT_ASSIGN_OR_RETURN(std::vector<double> bzp, Doubles(ctx, ctx.input(qlinear ? 5 : 3)));
  std::vector<double> as, bs, ys, yzp;
  if (qlinear) {
    MT_ASSIGN_OR_RETURN(as, Doubles(ctx, ctx.input(1)));
    MT_ASSIGN_OR_RETURN(bs, Doubles(ctx, ctx.input(4)));
    MT_ASSIGN_OR_RETURN(ys, Doubles(ctx, ctx.input(6)));
    MT_ASSIGN_OR_RETURN(yzp, Doubles(ctx, ctx.input(7)));
    if (as.empty() || bs.empty() || ys.size() != 1) return ctx.Error("needs a_scale, b_scale and a scalar y_scale");
  }
  auto pick = [](const std::vector<double>& v, int64_t i) { return v.empty() ? 0.0 : v[v.size() == 1 ? 0 : i]; };
  const double lo = y->dtype == DType::kI8 ? -128 : 0, hi = y->dtype == DType::kI8 ? 127 : 255;
  std::vector<double> out(y->numel());
  for (int64_t t = 0; t < batches; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q)
          acc += (av[((ba == 1 ? 0 : t) * m + i) * k + q] - pick(azp, i)) *
                 (bv[((bb == 1 ? 0 : t) * k + q) * n + j] - pick(bzp, j));
        if (qlinear)
          acc = std::clamp(RoundHalfEven(acc * pick(as, i) * pick(bs, j) / ys[0]) + pick(yzp, 0), lo, hi);
        out[(t * m + i) * n + j] = acc;
      }
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), y->dtype, y->data, y->numel());
}

absl::Status MatMulIntegerKernel(KernelContext& ctx) { return QuantizedMatMul(ctx, false); }
absl::Status QLinearMatMulKernel(KernelContext& ctx) { return QuantizedMatMul(ctx, true); }

}  // namespace

MT_REGISTER_KERNELS(cpu_quantize) {
  const auto cpu = DeviceType::kCPU;
  r.Register({"QuantizeLinear", "", cpu, {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}, 0,
              FnKernel(QuantizeKernel)});
  r.Register({"DequantizeLinear", "", cpu, {DType::kU8, DType::kI8, DType::kI32}, 0,
              FnKernel(DequantizeKernel)});
  r.Register({"DynamicQuantizeLinear", "", cpu, {DType::kF32}, 0, FnKernel(DynamicQuantizeKernel)});
  r.Register({"MatMulInteger", "", cpu, {DType::kU8, DType::kI8}, 0, FnKernel(MatMulIntegerKernel)});
  r.Register({"QLinearMatMul", "", cpu, {DType::kU8, DType::kI8}, 0, FnKernel(QLinearMatMulKernel)});
}

}  // namespace mixtrain::cpu
