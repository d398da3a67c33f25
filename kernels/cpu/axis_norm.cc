// CPU kernels for the less common per-axis normalizations: Hardmax, LpNormalization,
// InstanceNormalization, LRN and MeanVarianceNormalization. Float tensors are read and written through reduce_util.h's
// float helpers; statistics accumulate in double. Rare in training graphs, so plain loops.
#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/ops/movement_params.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

absl::Status CheckFloatSameSize(const KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("needs input 0");
  if (!AllFloat({x, y})) return ctx.Error(absl::StrCat("unsupported dtype ", DTypeName(x->dtype)));
  if (x->numel() != y->numel()) return ctx.Error("output size differs from the input's");
  return absl::OkStatus();
}

// The [outer, n, inner] view of x for an `axis` attribute. Before opset 13, Hardmax (like
// Softmax) coerced the input to 2-D at `axis` (default 1): [prod(dims[:axis]), prod(dims[axis:])].
absl::StatusOr<AxisView> AxisOf(const KernelContext& ctx, int64_t dflt, bool coerce_2d) {
  const TensorView& x = *ctx.input(0);
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", dflt), x.rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  AxisView v = ViewAroundAxis(x.dims, *axis);
  if (coerce_2d) {
    v.n *= v.inner;
    v.inner = 1;
  }
  return v;
}

// 1 at the first maximum along the axis, 0 elsewhere.
absl::Status HardmaxKernel(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckFloatSameSize(ctx));
  const bool old = ctx.opset() > 0 && ctx.opset() < 13;
  MT_ASSIGN_OR_RETURN(AxisView v, AxisOf(ctx, old ? 1 : -1, old));
  const std::vector<float> x = ToFloatVector(*ctx.input(0));
  TensorView& y = *ctx.output(0);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t base = o * v.n * v.inner + i;
      int64_t best = 0;
      for (int64_t j = 1; j < v.n; ++j)
        if (x[base + j * v.inner] > x[base + best * v.inner]) best = j;
      for (int64_t j = 0; j < v.n; ++j) StoreFloatAt(y, base + j * v.inner, j == best ? 1.0f : 0.0f);
    }
  }
  return absl::OkStatus();
}

// x / ||x||_p along the axis, p in {1, 2}.
absl::Status LpNormalizationKernel(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckFloatSameSize(ctx));
  const int64_t p = ctx.node().attr_int("p", 2);
  if (p != 1 && p != 2) return ctx.Error(absl::StrCat("p must be 1 or 2, got ", p));
  MT_ASSIGN_OR_RETURN(AxisView v, AxisOf(ctx, -1, false));
  const std::vector<float> x = ToFloatVector(*ctx.input(0));
  TensorView& y = *ctx.output(0);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t base = o * v.n * v.inner + i;
      double norm = 0;
      for (int64_t j = 0; j < v.n; ++j) {
        const double e = x[base + j * v.inner];
        norm += p == 1 ? std::fabs(e) : e * e;
      }
      if (p == 2) norm = std::sqrt(norm);
      for (int64_t j = 0; j < v.n; ++j)
        StoreFloatAt(y, base + j * v.inner, static_cast<float>(x[base + j * v.inner] / norm));
    }
  }
  return absl::OkStatus();
}

// y = scale[c] * (x - mean) / sqrt(var + epsilon) + B[c], statistics per (n, c) over the
// spatial dims (biased variance).
absl::Status InstanceNormKernel(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckFloatSameSize(ctx));
  const TensorView& xt = *ctx.input(0);
  const TensorView* scale_t = ctx.input(1);
  const TensorView* bias_t = ctx.input(2);
  if (xt.rank() < 2 || scale_t == nullptr || bias_t == nullptr)
    return ctx.Error("needs X of rank >= 2, scale and B");
  const int64_t n = xt.dims[0], c = xt.dims[1], spatial = xt.numel() / std::max<int64_t>(n * c, 1);
  if (scale_t->numel() != c || bias_t->numel() != c || !AllFloat({scale_t, bias_t}))
    return ctx.Error(absl::StrCat("scale and B must be float tensors of C=", c, " elements"));
  const double eps = ctx.node().attr_float("epsilon", 1e-5f);
  const std::vector<float> x = ToFloatVector(xt), scale = ToFloatVector(*scale_t),
                           bias = ToFloatVector(*bias_t);
  TensorView& y = *ctx.output(0);
  ParallelFor(n * c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const float* row = x.data() + nc * spatial;
      double mean = 0, var = 0;
      for (int64_t s = 0; s < spatial; ++s) mean += row[s];
      mean /= static_cast<double>(spatial);
      for (int64_t s = 0; s < spatial; ++s) var += (row[s] - mean) * (row[s] - mean);
      var /= static_cast<double>(spatial);
      const double k = scale[nc % c] / std::sqrt(var + eps), b = bias[nc % c];
      for (int64_t s = 0; s < spatial; ++s)
        StoreFloatAt(y, nc * spatial + s, static_cast<float>((row[s] - mean) * k + b));
    }
  });
  return absl::OkStatus();
}

// LRN across channels: y = x / (bias + alpha / size * sum of x^2 over the channel window)^beta,
// the window [c - floor((size-1)/2), c + ceil((size-1)/2)].
absl::Status LrnKernel(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckFloatSameSize(ctx));
  const TensorView& xt = *ctx.input(0);
  if (xt.rank() < 2) return ctx.Error("X must have rank >= 2 (N, C, ...)");
  const Node& node = ctx.node();
  const int64_t size = node.attr_int("size", 0);
  if (size <= 0) return ctx.Error("needs a positive 'size' attribute");
  const double alpha = node.attr_float("alpha", 1e-4f), beta = node.attr_float("beta", 0.75f),
               bias = node.attr_float("bias", 1.0f);
  const int64_t n = xt.dims[0], c = xt.dims[1], spatial = xt.numel() / std::max<int64_t>(n * c, 1);
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  const std::vector<float> x = ToFloatVector(xt);
  TensorView& y = *ctx.output(0);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t s = 0; s < spatial; ++s) {
        double sq = 0;
        for (int64_t k = std::max<int64_t>(0, ch - lo); k <= std::min(c - 1, ch + hi); ++k) {
          const double e = x[(b * c + k) * spatial + s];
          sq += e * e;
        }
        const int64_t at = (b * c + ch) * spatial + s;
        StoreFloatAt(y, at, static_cast<float>(x[at] / std::pow(bias + alpha / size * sq, beta)));
      }
    }
  }
  return absl::OkStatus();
}

// MeanVarianceNormalization: (x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9) over `axes` (default
// [0, 2, 3]), the formula of ONNX's function body.
absl::Status MvnKernel(KernelContext& ctx) {
  MT_RETURN_IF_ERROR(CheckFloatSameSize(ctx));
  const TensorView& xt = *ctx.input(0);
  auto axes = movement::NormalizeAxes(ctx.node().attr_ints("axes", {0, 2, 3}), xt.rank());
  if (!axes.ok()) return ctx.Error(axes.status().message());
  std::vector<bool> reduced(xt.rank(), false);
  for (int64_t a : *axes) reduced[a] = true;
  // Output-group offset of every element: the index over the kept dims.
  std::vector<int64_t> group(xt.numel());
  int64_t groups = 1;
  {
    std::vector<int64_t> stride(xt.rank(), 0);
    for (int64_t d = xt.rank() - 1; d >= 0; --d)
      if (!reduced[d]) {
        stride[d] = groups;
        groups *= xt.dims[d];
      }
    std::vector<int64_t> c(xt.rank(), 0);
    for (int64_t i = 0; i < xt.numel(); ++i) {
      int64_t g = 0;
      for (int64_t d = 0; d < xt.rank(); ++d) g += c[d] * stride[d];
      group[i] = g;
      for (int64_t d = xt.rank() - 1; d >= 0; --d) {
        if (++c[d] < xt.dims[d]) break;
        c[d] = 0;
      }
    }
  }
  const std::vector<float> x = ToFloatVector(xt);
  std::vector<double> sum(groups, 0), sq(groups, 0), count(groups, 0);
  for (int64_t i = 0; i < xt.numel(); ++i) {
    sum[group[i]] += x[i];
    sq[group[i]] += static_cast<double>(x[i]) * x[i];
    count[group[i]] += 1;
  }
  TensorView& y = *ctx.output(0);
  for (int64_t i = 0; i < xt.numel(); ++i) {
    const int64_t g = group[i];
    const double mean = sum[g] / count[g];
    const double sd = std::sqrt(std::max(sq[g] / count[g] - mean * mean, 0.0));
    StoreFloatAt(y, i, static_cast<float>((x[i] - mean) / (sd + 1e-9)));
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_axis_norm) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> f = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
  r.Register({"Hardmax", "", cpu, f, 0, FnKernel(HardmaxKernel)});
  r.Register({"LpNormalization", "", cpu, f, 0, FnKernel(LpNormalizationKernel)});
  r.Register({"InstanceNormalization", "", cpu, f, 0, FnKernel(InstanceNormKernel)});
  r.Register({"LRN", "", cpu, f, 0, FnKernel(LrnKernel)});
  r.Register({"MeanVarianceNormalization", "", cpu, f, 0, FnKernel(MvnKernel)});
}

}  // namespace mixtrain::cpu
