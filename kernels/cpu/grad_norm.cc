// CPU kernels of ai.mixtrain.LayerNormalizationGrad(dY, X, scale) and
// BatchNormalizationGrad(dY, X, scale, mean, var) -> (dX, dScale, dBias). Statistics are
// recomputed from X (the forward's saved mean/inv-std are optional outputs that a model may not
// produce; LayerNorm's per row in float, BatchNorm's per channel in double), then with
// xhat = (x - mean) * inv:
//   dScale = sum dY * xhat, dBias = sum dY over the reduced elements, and
//   LayerNorm / training BatchNorm: dX = inv * (g - mean(g) - xhat * mean(g * xhat)), g = dY*scale
//   inference BatchNorm (running stats are constants): dX = dY * scale * inv.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

// Rows [rb, rb + K) of n elements, K at a time: each pass runs over the K rows one after the
// other, so the K rows' reductions (sum, variance, the two gradient sums: a chain of horizontal
// adds each, with a division and a square root between) overlap in the core instead of running
// back to back; the rows sit in L1 between the passes. ps/pt: the chunk's dScale/dBias partials
// (accumulated). gpt_mini's rows of 64, one thread, 4096 rows: 0.38 ms one row at a time, 0.21
// ms eight at a time, bit for bit the same (each row's arithmetic is unchanged). Each loop is a
// float loop without calls, so the compiler vectorizes it (GCC leaves a loop that both reduces
// and accumulates into ps/pt scalar: they are apart).
template <typename Io, int K>
[[gnu::always_inline]] inline void LayerNormGradRows(const typename Io::T* x, const typename Io::T* dy,
                                                     const float* scale, typename Io::T* dx, int64_t rb,
                                                     int64_t n, float eps, float* ps, float* pt) {
  using T = typename Io::T;
  const T* xs = x + rb * n;
  const T* gs = dy + rb * n;
  float mean[K], inv[K], sg[K], sgx[K];
  for (int k = 0; k < K; ++k) {
    const T* xk = xs + k * n;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += Io::Load(xk[i]);
    mean[k] = sum / static_cast<float>(n);
  }
  for (int k = 0; k < K; ++k) {  // two passes: no cancellation
    const T* xk = xs + k * n;
    const float m = mean[k];
    float var = 0;
#pragma omp simd reduction(+ : var)
    for (int64_t i = 0; i < n; ++i) var += (Io::Load(xk[i]) - m) * (Io::Load(xk[i]) - m);
    inv[k] = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
  }
  for (int k = 0; k < K; ++k) {
    const T* xk = xs + k * n;
    const T* gk = gs + k * n;
    const float m = mean[k], iv = inv[k];
    float a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (int64_t i = 0; i < n; ++i) {
      const float h = (Io::Load(xk[i]) - m) * iv;
      const float g = Io::Load(gk[i]) * scale[i];
      a += g;
      b += g * h;
    }
    sg[k] = a / static_cast<float>(n);
    sgx[k] = b / static_cast<float>(n);
  }
  for (int k = 0; k < K; ++k) {
    const T* xk = xs + k * n;
    const T* gk = gs + k * n;
    const float m = mean[k], iv = inv[k], a = sg[k], b = sgx[k];
    if (dx == nullptr) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float g = Io::Load(gk[i]);
        ps[i] += g * ((Io::Load(xk[i]) - m) * iv);
        pt[i] += g;
      }
      continue;
    }
    T* d = dx + (rb + k) * n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float h = (Io::Load(xk[i]) - m) * iv;
      const float g = Io::Load(gk[i]);
      ps[i] += g * h;
      pt[i] += g;
      d[i] = Io::Store(iv * (g * scale[i] - a - h * b));
    }
  }
}

template <typename Io>
[[gnu::always_inline]] inline void LayerNormGradRange(const typename Io::T* x, const typename Io::T* dy,
                                                      const float* scale, typename Io::T* dx, int64_t rb,
                                                      int64_t re, int64_t n, float eps, float* ps, float* pt) {
  constexpr int kRows = 8;
  int64_t r = rb;
  for (; r + kRows <= re; r += kRows) LayerNormGradRows<Io, kRows>(x, dy, scale, dx, r, n, eps, ps, pt);
  for (; r < re; ++r) LayerNormGradRows<Io, 1>(x, dy, scale, dx, r, n, eps, ps, pt);
}
template <typename Io>
MT_TARGET_AVX512 void LayerNormGradRangeAvx512(const typename Io::T* x, const typename Io::T* dy,
                                               const float* scale, typename Io::T* dx, int64_t rb,
                                               int64_t re, int64_t n, float eps, float* ps, float* pt) {
  LayerNormGradRange<Io>(x, dy, scale, dx, rb, re, n, eps, ps, pt);
}

// LayerNorm's rows are short (a transformer's d = 256) and many: every loop over a row is a
// float loop reading the storage type (statistics in two passes, so no cancellation); the float
// row error is a few ulp of a 256-term sum. dScale/dBias: per-chunk float partials over a fixed
// number of row chunks (the result does not depend on the thread count), added up in double by
// the caller.
template <typename Io>
void LayerNormGradAllRows(const TensorView& dy_v, const TensorView& x_v, const float* scale,
                          TensorView* dx_v, int64_t rows, int64_t n, float eps, float* part,
                          int64_t chunks) {
  using T = typename Io::T;
  const T* dy = dy_v.as<T>();
  const T* x = x_v.as<T>();
  T* dx = dx_v ? dx_v->as<T>() : nullptr;
  const bool avx512 = Avx512Enabled();
  ParallelFor(chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      float* ps = part + c * 2 * n;
      float* pt = ps + n;
      std::fill(ps, ps + 2 * n, 0.0f);
      const int64_t rb = rows * c / chunks, re = rows * (c + 1) / chunks;
      if (avx512)
        LayerNormGradRangeAvx512<Io>(x, dy, scale, dx, rb, re, n, eps, ps, pt);
      else
        LayerNormGradRange<Io>(x, dy, scale, dx, rb, re, n, eps, ps, pt);
    }
  });
}

// scale as float, the chunks' partial dScale/dBias rows and their sums live in buffers the kernel
// keeps: after a plan's first step the kernel makes no heap allocation.
class LayerNormGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override;

 private:
  std::vector<float> scale_, part_, ds_, db_;
};

absl::Status LayerNormGradKernel::Compute(KernelContext& ctx) {
  const TensorView* dy_v = ctx.input(0);
  const TensorView* x_v = ctx.input(1);
  const TensorView* s_v = ctx.input(2);
  if (!dy_v || !x_v || !s_v) return ctx.Error("needs inputs dY, X and scale");
  if (!AllFloat({dy_v, x_v, s_v, ctx.output(0), ctx.output(1), ctx.output(2)}))
    return ctx.Error("expects float tensors");
  if (dy_v->dtype != x_v->dtype || (ctx.output(0) && ctx.output(0)->dtype != x_v->dtype))
    return ctx.Error("dY, X and dX dtypes differ");
  if (dy_v->numel() != x_v->numel()) return ctx.Error("dY and X differ in size");
  int64_t axis = ctx.node().attr_int("axis", -1);
  if (axis < 0) axis += x_v->rank();
  if (axis < 0 || axis >= x_v->rank()) return ctx.Error("axis out of range");
  const float eps = ctx.node().attr_float("epsilon", 1e-5f);
  int64_t rows = 1, n = 1;
  for (int64_t i = 0; i < x_v->rank(); ++i) (i < axis ? rows : n) *= x_v->dims[i];
  if (s_v->numel() != n) return ctx.Error("scale must have the normalized shape");
  ToFloats(*s_v, scale_);
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(rows, 16));
  part_.assign(static_cast<size_t>(chunks * 2 * n), 0.0f);
  MT_RETURN_IF_ERROR(DispatchFloat(ctx, x_v->dtype, [&](auto io) {
    LayerNormGradAllRows<decltype(io)>(*dy_v, *x_v, scale_.data(), ctx.output(0), rows, n, eps,
                                       part_.data(), chunks);
  }));
  if (ctx.output(1) || ctx.output(2)) {
    ds_.resize(static_cast<size_t>(n));
    db_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double s = 0, t = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        s += part_[c * 2 * n + i];
        t += part_[c * 2 * n + n + i];
      }
      ds_[i] = static_cast<float>(s);
      db_[i] = static_cast<float>(t);
    }
    if (TensorView* o = ctx.output(1)) StoreFloats(*o, ds_);
    if (TensorView* o = ctx.output(2)) StoreFloats(*o, db_);
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
              ClassKernel<LayerNormGradKernel>()});
  r.Register({"BatchNormalizationGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(BatchNormGradKernel)});
}

}  // namespace mixtrain::cpu
