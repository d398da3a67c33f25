// CPU kernels of GroupNormalization and its gradient:
//   GroupNormalization(X, scale, bias) -> Y              (ai.onnx, opsets 18 and 21)
//   ai.mixtrain.GroupNormalizationGrad(dY, X, scale) -> dX, dScale, dBias
// Statistics are per (sample, group of C / num_groups channels) over the group's channels and
// spatial dims (biased variance); scale and bias hold one entry per channel (opset 21) or per
// group (opset 18), told apart by their size. InstanceNormalization's gradient is this one with
// one group per channel. Loads as float, sums and statistics in double (at least the precision
// any stash_type asks for), stores the storage type.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {
namespace {

// X seen as [n, groups, k channels, spatial]; `affine` is C (per channel) or groups.
struct GroupView {
  int64_t n = 0, c = 0, groups = 0, k = 0, spatial = 0, affine = 0;
  int64_t size() const { return k * spatial; }  // elements per (sample, group)
  // The scale/bias entry of channel ch.
  int64_t param(int64_t ch) const { return affine == c ? ch : ch / k; }
};

absl::StatusOr<GroupView> ViewOf(const KernelContext& ctx, const TensorView& x,
                                 const TensorView& scale, int64_t groups) {
  if (x.rank() < 2) return ctx.Error("X must be [N, C, ...]");
  GroupView v;
  v.n = x.dims[0];
  v.c = x.dims[1];
  v.groups = groups;
  if (groups <= 0 || v.c % groups != 0)
    return ctx.Error(absl::StrCat("num_groups ", groups, " does not divide C=", v.c));
  v.k = v.c / groups;
  v.spatial = 1;
  for (int64_t d = 2; d < x.rank(); ++d) v.spatial *= x.dims[d];
  v.affine = scale.numel();
  if (v.affine != v.c && v.affine != groups)
    return ctx.Error(absl::StrCat("scale has ", v.affine, " entries, expected C=", v.c,
                                  " or num_groups=", groups));
  return v;
}

// Mean and 1 / sqrt(var + eps) of one group's elements.
void Stats(const float* x, int64_t m, double eps, double* mean, double* rstd) {
  double s = 0;
  for (int64_t i = 0; i < m; ++i) s += x[i];
  const double mu = m > 0 ? s / static_cast<double>(m) : 0;
  double q = 0;
  for (int64_t i = 0; i < m; ++i) q += (x[i] - mu) * (x[i] - mu);
  *mean = mu;
  *rstd = 1.0 / std::sqrt((m > 0 ? q / static_cast<double>(m) : 0) + eps);
}

absl::Status GroupNormKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* scale = ctx.input(1);
  const TensorView* bias = ctx.input(2);
  TensorView* y = ctx.output(0);
  if (!x || !scale || !bias || !y) return ctx.Error("needs inputs X, scale and bias");
  if (!AllFloat({x, scale, bias, y})) return ctx.Error("expects float tensors");
  MT_ASSIGN_OR_RETURN(GroupView v, ViewOf(ctx, *x, *scale, ctx.node().attr_int("num_groups", 0)));
  if (bias->numel() != v.affine) return ctx.Error("bias and scale differ in size");
  const double eps = ctx.node().attr_float("epsilon", 1e-5f);
  const std::vector<float> xs = ToFloatVector(*x), gamma = ToFloatVector(*scale),
                           beta = ToFloatVector(*bias);
  std::vector<float> out(xs.size());
  ParallelFor(v.n * v.groups, 1, [&](int64_t b, int64_t e) {
    for (int64_t ng = b; ng < e; ++ng) {
      const int64_t base = ng * v.size(), g = ng % v.groups;
      double mean, rstd;
      Stats(xs.data() + base, v.size(), eps, &mean, &rstd);
      for (int64_t j = 0; j < v.k; ++j) {
        const int64_t p = v.param(g * v.k + j), off = base + j * v.spatial;
        for (int64_t s = 0; s < v.spatial; ++s)
          out[off + s] = static_cast<float>((xs[off + s] - mean) * rstd * gamma[p] + beta[p]);
      }
    }
  });
  StoreFloats(*y, out);
  return absl::OkStatus();
}

// With xh = (x - mean) * rstd and g = dY * scale over one group of m elements:
//   dX = rstd * (g - mean(g) - xh * mean(g * xh)),  dScale = sum dY * xh,  dBias = sum dY.
absl::Status GroupNormGradKernel(KernelContext& ctx) {
  const TensorView* dy = ctx.input(0);
  const TensorView* x = ctx.input(1);
  const TensorView* scale = ctx.input(2);
  if (!dy || !x || !scale) return ctx.Error("needs inputs dY, X and scale");
  if (!AllFloat({dy, x, scale, ctx.output(0), ctx.output(1), ctx.output(2)}))
    return ctx.Error("expects float tensors");
  if (dy->numel() != x->numel()) return ctx.Error("dY and X differ in size");
  MT_ASSIGN_OR_RETURN(GroupView v, ViewOf(ctx, *x, *scale, ctx.node().attr_int("num_groups", 0)));
  const double eps = ctx.node().attr_float("epsilon", 1e-5f);
  const std::vector<float> xs = ToFloatVector(*x), dys = ToFloatVector(*dy),
                           gamma = ToFloatVector(*scale);
  std::vector<float> dx(xs.size());
  // Per (sample, channel) partial sums of dY * xh and dY, reduced over samples below.
  std::vector<double> dscale_nc(v.n * v.c, 0.0), dbias_nc(v.n * v.c, 0.0);
  const double m = static_cast<double>(v.size());
  ParallelFor(v.n * v.groups, 1, [&](int64_t b, int64_t e) {
    for (int64_t ng = b; ng < e; ++ng) {
      const int64_t base = ng * v.size(), g = ng % v.groups, n = ng / v.groups;
      double mean, rstd;
      Stats(xs.data() + base, v.size(), eps, &mean, &rstd);
      double sum_g = 0, sum_gxh = 0;
      for (int64_t j = 0; j < v.k; ++j) {
        const int64_t ch = g * v.k + j, off = base + j * v.spatial;
        const double gm = gamma[v.param(ch)];
        double ds = 0, db = 0;
        for (int64_t s = 0; s < v.spatial; ++s) {
          const double xh = (xs[off + s] - mean) * rstd, d = dys[off + s];
          sum_g += d * gm;
          sum_gxh += d * gm * xh;
          ds += d * xh;
          db += d;
        }
        dscale_nc[n * v.c + ch] = ds;
        dbias_nc[n * v.c + ch] = db;
      }
      const double mg = m > 0 ? sum_g / m : 0, mgxh = m > 0 ? sum_gxh / m : 0;
      for (int64_t j = 0; j < v.k; ++j) {
        const int64_t off = base + j * v.spatial;
        const double gm = gamma[v.param(g * v.k + j)];
        for (int64_t s = 0; s < v.spatial; ++s) {
          const double xh = (xs[off + s] - mean) * rstd;
          dx[off + s] = static_cast<float>(rstd * (dys[off + s] * gm - mg - xh * mgxh));
        }
      }
    }
  });
  if (TensorView* o = ctx.output(0)) StoreFloats(*o, dx);
  std::vector<double> dscale(v.affine, 0.0), dbias(v.affine, 0.0);
  for (int64_t n = 0; n < v.n; ++n)
    for (int64_t ch = 0; ch < v.c; ++ch) {
      dscale[v.param(ch)] += dscale_nc[n * v.c + ch];
      dbias[v.param(ch)] += dbias_nc[n * v.c + ch];
    }
  if (TensorView* o = ctx.output(1)) StoreFloats(*o, std::vector<float>(dscale.begin(), dscale.end()));
  if (TensorView* o = ctx.output(2)) StoreFloats(*o, std::vector<float>(dbias.begin(), dbias.end()));
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_group_norm) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> f = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
  r.Register({"GroupNormalization", "", cpu, f, 0, FnKernel(GroupNormKernel)});
  r.Register({"GroupNormalizationGrad", "ai.mixtrain", cpu, f, 1, FnKernel(GroupNormGradKernel)});
}

}  // namespace mixtrain::cpu
