// CPU kernels of ai.mixtrain.LayerNormalizationGrad(dY, X, scale) and
// BatchNormalizationGrad(dY, X, scale, mean, var) -> (dX, dScale, dBias). Statistics are
// recomputed from X in double (the forward's saved mean/inv-std are optional outputs that a
// model may not produce), then with xhat = (x - mean) * inv:
//   dScale = sum dY * xhat, dBias = sum dY over the reduced elements, and
//   LayerNorm / training BatchNorm: dX = inv * (g - mean(g) - xhat * mean(g * xhat)), g = dY*scale
//   inference BatchNorm (running stats are constants): dX = dY * scale * inv.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {
namespace {

void MeanInv(const float* x, int64_t n, int64_t stride, float eps, double* mean, double* inv) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i * stride];
  const double m = s / n;
  double v = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i * stride] - m;
    v += d * d;
  }
  *mean = m;
  *inv = 1.0 / std::sqrt(v / n + eps);
}

absl::Status LayerNormGradKernel(KernelContext& ctx) {
  const TensorView* dy_v = ctx.input(0);
  const TensorView* x_v = ctx.input(1);
  const TensorView* s_v = ctx.input(2);
  if (!dy_v || !x_v || !s_v) return ctx.Error("needs inputs dY, X and scale");
  if (!AllFloat({dy_v, x_v, s_v, ctx.output(0), ctx.output(1), ctx.output(2)}))
    return ctx.Error("expects float tensors");
  int64_t axis = ctx.node().attr_int("axis", -1);
  if (axis < 0) axis += x_v->rank();
  if (axis < 0 || axis >= x_v->rank()) return ctx.Error("axis out of range");
  const float eps = ctx.node().attr_float("epsilon", 1e-5f);
  int64_t rows = 1, n = 1;
  for (int64_t i = 0; i < x_v->rank(); ++i) (i < axis ? rows : n) *= x_v->dims[i];
  if (s_v->numel() != n) return ctx.Error("scale must have the normalized shape");
  const std::vector<float> dy = ToFloatVector(*dy_v), x = ToFloatVector(*x_v);
  const std::vector<float> scale = ToFloatVector(*s_v);
  std::vector<double> mean(rows), inv(rows);
  std::vector<float> dx(ctx.output(0) ? x.size() : 0);
  ParallelFor(rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.data() + r * n;
      const float* gr = dy.data() + r * n;
      MeanInv(xr, n, 1, eps, &mean[r], &inv[r]);
      if (dx.empty()) continue;
      double sg = 0, sgx = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double g = gr[i] * scale[i], xh = (xr[i] - mean[r]) * inv[r];
        sg += g;
        sgx += g * xh;
      }
      sg /= n;
      sgx /= n;
      for (int64_t i = 0; i < n; ++i) {
        const double g = gr[i] * scale[i], xh = (xr[i] - mean[r]) * inv[r];
        dx[r * n + i] = static_cast<float>(inv[r] * (g - sg - xh * sgx));
      }
    }
  });
  if (TensorView* o = ctx.output(0)) StoreFloats(*o, dx);
  if (ctx.output(1) || ctx.output(2)) {
    // dScale and dBias sum over rows. Rows are walked in order (contiguous, vectorizable) in a
    // fixed number of chunks, each with its own partial sums, added up afterwards: the result does
    // not depend on the thread count. (Summing each column down the rows was strided, and a
    // transformer's n = 64 columns made it one single-threaded task.)
    const int64_t chunks = std::min<int64_t>(rows, 16);
    std::vector<double> part(static_cast<size_t>(chunks * 2 * n), 0.0);
    ParallelFor(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        double* ps = part.data() + c * 2 * n;
        double* pt = ps + n;
        for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
          const float* gr = dy.data() + r * n;
          const float* xr = x.data() + r * n;
          const double m = mean[r], iv = inv[r];
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) {
            ps[i] += gr[i] * (xr[i] - m) * iv;
            pt[i] += gr[i];
          }
        }
      }
    });
    std::vector<float> ds(n), db(n);
    for (int64_t i = 0; i < n; ++i) {
      double s = 0, t = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        s += part[c * 2 * n + i];
        t += part[c * 2 * n + n + i];
      }
      ds[i] = static_cast<float>(s);
      db[i] = static_cast<float>(t);
    }
    if (TensorView* o = ctx.output(1)) StoreFloats(*o, ds);
    if (TensorView* o = ctx.output(2)) StoreFloats(*o, db);
  }
  return absl::OkStatus();
}

absl::Status BatchNormGradKernel(KernelContext& ctx) {
  const TensorView* dy_v = ctx.input(0);
  const TensorView* x_v = ctx.input(1);
  const TensorView* s_v = ctx.input(2);
  const TensorView* m_v = ctx.input(3);
  const TensorView* v_v = ctx.input(4);
  if (!dy_v || !x_v || !s_v || !m_v || !v_v)
    return ctx.Error("needs inputs dY, X, scale, mean and var");
  if (!AllFloat({dy_v, x_v, s_v, m_v, v_v, ctx.output(0), ctx.output(1), ctx.output(2)}))
    return ctx.Error("expects float tensors");
  if (x_v->rank() < 2) return ctx.Error("X must be N x C [x ...]");
  const int64_t N = x_v->dims[0], C = x_v->dims[1], S = x_v->numel() / std::max<int64_t>(N * C, 1);
  if (s_v->numel() != C || m_v->numel() != C || v_v->numel() != C)
    return ctx.Error(absl::StrCat("scale, mean and var must have C=", C, " elements"));
  const bool training = ctx.node().attr_int("training_mode", 1) != 0;
  const float eps = ctx.node().attr_float("epsilon", 1e-5f);
  const std::vector<float> dy = ToFloatVector(*dy_v), x = ToFloatVector(*x_v);
  const std::vector<float> scale = ToFloatVector(*s_v), rmean = ToFloatVector(*m_v),
                           rvar = ToFloatVector(*v_v);
  std::vector<float> dx(ctx.output(0) ? x.size() : 0), ds(C), db(C);
  const int64_t M = N * S;
  ParallelFor(C, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      double mean = rmean[c], inv = 1.0 / std::sqrt(static_cast<double>(rvar[c]) + eps);
      if (training) {
        double s = 0, v = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < S; ++i) s += x[(n * C + c) * S + i];
        mean = s / M;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < S; ++i) {
            const double d = x[(n * C + c) * S + i] - mean;
            v += d * d;
          }
        inv = 1.0 / std::sqrt(v / M + eps);
      }
      double sg = 0, sgx = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t k = (n * C + c) * S + i;
          sg += dy[k];
          sgx += dy[k] * (x[k] - mean) * inv;
        }
      ds[c] = static_cast<float>(sgx);
      db[c] = static_cast<float>(sg);
      if (dx.empty()) continue;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t k = (n * C + c) * S + i;
          double g = dy[k];
          if (training) g -= (sg + (x[k] - mean) * inv * sgx) / M;
          dx[k] = static_cast<float>(g * scale[c] * inv);
        }
    }
  });
  if (TensorView* o = ctx.output(0)) StoreFloats(*o, dx);
  if (TensorView* o = ctx.output(1)) StoreFloats(*o, ds);
  if (TensorView* o = ctx.output(2)) StoreFloats(*o, db);
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_norm) {
  r.Register({"LayerNormalizationGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(LayerNormGradKernel)});
  r.Register({"BatchNormalizationGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(BatchNormGradKernel)});
}

}  // namespace mixtrain::cpu
