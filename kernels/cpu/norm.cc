// CPU kernels for LayerNormalization (opset 17) and BatchNormalization (inference form; training
// forms of opset 9-13, five outputs, and 14+, training_mode=1) in fp32/fp16/bf16. Statistics are
// two-pass in double (kernels/common/reduce.h); the normalization itself is a per-row
// y = x * a + b with precomputed float a, b so the hot loop is one multiply-add per element.
// Parameters (scale, bias, running stats) may have a different float dtype from X (opset 15).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"
#include "kernels/cpu/rows_avx512.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

constexpr int64_t kGrain = 16384;

// A parameter tensor broadcast (numpy rules, right-aligned) to `dims`, as float. Fails when it
// does not broadcast.
absl::StatusOr<std::vector<float>> BroadcastParam(const TensorView& p,
                                                  const std::vector<int64_t>& dims) {
  std::vector<float> src = ToFloatVector(p);
  const int64_t n = NumElements(dims);
  const int64_t r = static_cast<int64_t>(dims.size());
  for (int64_t i = 0; i < p.rank() - r; ++i)
    if (p.dims[i] != 1) return absl::InvalidArgumentError("parameter does not broadcast");
  std::vector<int64_t> pdims(r, 1);
  for (int64_t i = 0; i < std::min(r, p.rank()); ++i) pdims[r - 1 - i] = p.dims[p.rank() - 1 - i];
  for (int64_t i = 0; i < r; ++i)
    if (pdims[i] != 1 && pdims[i] != dims[i])
      return absl::InvalidArgumentError("parameter does not broadcast");
  if (pdims == dims) return src;  // the common case: exactly the normalized shape
  std::vector<float> out(n);
  std::vector<int64_t> idx(r, 0);
  for (int64_t q = 0; q < n; ++q) {
    int64_t off = 0;
    for (int64_t i = 0; i < r; ++i) off = off * pdims[i] + (pdims[i] == 1 ? 0 : idx[i]);
    out[q] = src[off];
    for (int64_t i = r - 1; i >= 0; --i) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

// Rows [b, e) of LayerNormalization, compiled for the baseline and for AVX-512 (where the double
// sums and the float affine of a transformer's rows of 64 are a few 8- and 16-lane operations).
template <typename Io>
[[gnu::always_inline]] inline void LayerNormRows(const typename Io::T* x, typename Io::T* y,
                                                 int64_t b, int64_t e, int64_t n, const float* scale,
                                                 const float* bias, float eps, float* mean_out,
                                                 float* inv_out) {
  for (int64_t r = b; r < e; ++r) {
    const typename Io::T* row = x + r * n;
    double mean, var;
    red::MeanVar<Io>(row, n, &mean, &var);
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mean);
    typename Io::T* out = y + r * n;
    if (bias != nullptr) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        out[i] = Io::Store((Io::Load(row[i]) - m) * inv * scale[i] + bias[i]);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = Io::Store((Io::Load(row[i]) - m) * inv * scale[i]);
    }
    mean_out[r - b] = m;
    inv_out[r - b] = inv;
  }
}
template <typename Io>
MT_TARGET_AVX512 void LayerNormRowsAvx512(const typename Io::T* x, typename Io::T* y, int64_t b,
                                          int64_t e, int64_t n, const float* scale,
                                          const float* bias, float eps, float* mean_out,
                                          float* inv_out) {
  LayerNormRows<Io>(x, y, b, e, n, scale, bias, eps, mean_out, inv_out);
}

template <typename Io>
void LayerNormImpl(const typename Io::T* x, typename Io::T* y, int64_t rows, int64_t n,
                   const float* scale, const float* bias, float eps, TensorView* mean_out,
                   TensorView* inv_out) {
  ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
              [&](int64_t b, int64_t e) {
                // Per-row statistics in buffers of the thread's that only grow.
                thread_local std::vector<float> mean, inv;
                mean.resize(static_cast<size_t>(e - b));
                inv.resize(static_cast<size_t>(e - b));
                bool short_rows = false;
                if constexpr (std::is_same_v<Io, red::F32Io> || std::is_same_v<Io, red::BF16Io>) {
                  short_rows = Avx512Enabled() && n <= avx512::kMaxNormRow;
                  if (short_rows)
                    avx512::LayerNormRows(x + b * n, y + b * n, e - b, n, scale, bias, eps,
                                          mean.data(), inv.data());
                }
                if (!short_rows && Avx512Enabled())
                  LayerNormRowsAvx512<Io>(x, y, b, e, n, scale, bias, eps, mean.data(),
                                          inv.data());
                else if (!short_rows)
                  LayerNormRows<Io>(x, y, b, e, n, scale, bias, eps, mean.data(), inv.data());
                for (int64_t r = b; r < e; ++r) {
                  if (mean_out != nullptr) StoreFloatAt(*mean_out, r, mean[r - b]);
                  if (inv_out != nullptr) StoreFloatAt(*inv_out, r, inv[r - b]);
                }
              });
}

// Whether parameter `p` has exactly the normalized dims x.dims[axis:] (leading 1s allowed): then
// its elements are used as they are, without BroadcastParam's index walk.
bool ExactParam(const TensorView& p, const std::vector<int64_t>& xd, int64_t axis) {
  const int64_t r = static_cast<int64_t>(xd.size()) - axis;
  if (p.rank() < r) return false;
  for (int64_t i = 0; i < p.rank() - r; ++i)
    if (p.dims[i] != 1) return false;
  for (int64_t i = 0; i < r; ++i)
    if (p.dims[p.rank() - r + i] != xd[axis + i]) return false;
  return true;
}

// Scale and B as float in buffers the kernel keeps: after the first call of a plan the step
// makes no heap allocation.
class LayerNormKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView& x = *ctx.input(0);
    const TensorView* scale = ctx.input(1);
    const TensorView* bias = ctx.input(2);
    if (scale == nullptr) return ctx.Error("needs input Scale");
    if (!AllFloat({scale, bias, ctx.output(1), ctx.output(2)}))
      return ctx.Error("Scale, B, Mean and InvStdDev must be float tensors");
    auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", -1), x.rank());
    if (!axis.ok()) return ctx.Error(axis.status().message());
    int64_t n = 1, rows = 1;
    for (int64_t i = 0; i < x.rank(); ++i) (i < *axis ? rows : n) *= x.dims[i];
    MT_RETURN_IF_ERROR(Param(ctx, *scale, x.dims, *axis, "Scale", scale_));
    if (bias != nullptr) MT_RETURN_IF_ERROR(Param(ctx, *bias, x.dims, *axis, "B", bias_));
    const float eps = ctx.node().attr_float("epsilon", 1e-5f);
    return DispatchFloat(ctx, x.dtype, [&](auto io) {
      using Io = decltype(io);
      LayerNormImpl<Io>(x.as<typename Io::T>(), ctx.output(0)->as<typename Io::T>(), rows, n, scale_.data(),
                        bias ? bias_.data() : nullptr, eps, ctx.output(1), ctx.output(2));
    });
  }

 private:
  static absl::Status Param(const KernelContext& ctx, const TensorView& p, const std::vector<int64_t>& xd,
                            int64_t axis, const char* what, std::vector<float>& out) {
    if (ExactParam(p, xd, axis)) {
      ToFloats(p, out);
      return absl::OkStatus();
    }
    auto b = BroadcastParam(p, std::vector<int64_t>(xd.begin() + axis, xd.end()));
    if (!b.ok()) return ctx.Error(absl::StrCat(what, ": ", b.status().message()));
    out = std::move(*b);
    return absl::OkStatus();
  }

  std::vector<float> scale_, bias_;
};


// Per-channel batch mean and biased variance of X viewed as [N, C, S], two-pass in double.
template <typename Io>
void ChannelStats(const typename Io::T* x, int64_t N, int64_t C, int64_t S,
                  std::vector<double>* mean, std::vector<double>* var) {
  mean->assign(C, 0.0);
  var->assign(C, 0.0);
  ParallelFor(C, std::max<int64_t>(1, kGrain / std::max<int64_t>(N * S, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t c = b; c < e; ++c) {
                  double s = 0;
                  for (int64_t n = 0; n < N; ++n) {
                    const typename Io::T* row = x + (n * C + c) * S;
                    MT_SIMD_SUM(s)
                    for (int64_t i = 0; i < S; ++i) s += Io::Load(row[i]);
                  }
                  const double count = static_cast<double>(N * S);
                  const double m = count > 0 ? s / count : 0.0;
                  double q = 0;
                  for (int64_t n = 0; n < N; ++n) {
                    const typename Io::T* row = x + (n * C + c) * S;
                    MT_SIMD_SUM(q)
                    for (int64_t i = 0; i < S; ++i) {
                      double d = Io::Load(row[i]) - m;
                      q += d * d;
                    }
                  }
                  (*mean)[c] = m;
                  (*var)[c] = count > 0 ? q / count : 0.0;
                }
              });
}

// y = x * a[c] + b[c] over X viewed as [N, C, S].
template <typename Io>
void ChannelAffine(const typename Io::T* x, typename Io::T* y, int64_t N, int64_t C, int64_t S,
                   const std::vector<float>& a, const std::vector<float>& b) {
  ParallelFor(N * C, std::max<int64_t>(1, kGrain / std::max<int64_t>(S, 1)),
              [&](int64_t lo, int64_t hi) {
                for (int64_t nc = lo; nc < hi; ++nc) {
                  const int64_t c = nc % C;
                  const float ac = a[c], bc = b[c];
                  const typename Io::T* src = x + nc * S;
                  typename Io::T* dst = y + nc * S;
#pragma omp simd
                  for (int64_t i = 0; i < S; ++i) dst[i] = Io::Store(Io::Load(src[i]) * ac + bc);
                }
              });
}

absl::Status BatchNormKernel(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  for (int i = 1; i < 5; ++i)
    if (ctx.input(i) == nullptr) return ctx.Error("needs inputs X, scale, B, input_mean, input_var");
  if (!AllFloat({ctx.input(1), ctx.input(2), ctx.input(3), ctx.input(4), ctx.output(1),
                 ctx.output(2), ctx.output(3), ctx.output(4)}))
    return ctx.Error("scale, B, mean and var must be float tensors");
  if (ctx.node().attr_int("spatial", 1) == 0)
    return ctx.Error("spatial=0 (per-activation statistics) is not supported");
  if (x.rank() < 2) return ctx.Error("X must be [N, C, ...]");
  const int64_t N = x.dims[0], C = x.dims[1];
  const int64_t S = C > 0 && N > 0 ? x.numel() / (N * C) : 0;
  for (int i = 1; i < 5; ++i)
    if (ctx.input(i)->numel() != C)
      return ctx.Error(absl::StrCat("input ", i, " must have C=", C, " elements"));
  // training_mode decides from opset 14; before, asking for the statistics outputs meant training.
  int present = 0;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) present += ctx.output(i) != nullptr;
  const bool training = ctx.node().has_attr("training_mode")
                            ? ctx.node().attr_int("training_mode", 0) != 0
                            : (ctx.opset() == 0 || ctx.opset() < 14) && present > 1;
  const float eps = ctx.node().attr_float("epsilon", 1e-5f);
  const float momentum = ctx.node().attr_float("momentum", 0.9f);
  std::vector<float> scale = ToFloatVector(*ctx.input(1)), bias = ToFloatVector(*ctx.input(2));
  std::vector<float> run_mean = ToFloatVector(*ctx.input(3)),
                     run_var = ToFloatVector(*ctx.input(4));
  std::vector<double> mean(C), var(C);
  if (training) {
    MT_RETURN_IF_ERROR(DispatchFloat(ctx, x.dtype, [&](auto io) {
      using Io = decltype(io);
      ChannelStats<Io>(x.as<typename Io::T>(), N, C, S, &mean, &var);
    }));
  } else {
    for (int64_t c = 0; c < C; ++c) mean[c] = run_mean[c], var[c] = run_var[c];
  }
  std::vector<float> a(C), b(C);
  for (int64_t c = 0; c < C; ++c) {
    const double inv = 1.0 / std::sqrt(var[c] + eps);
    a[c] = static_cast<float>(scale[c] * inv);
    b[c] = static_cast<float>(bias[c] - mean[c] * scale[c] * inv);
  }
  MT_RETURN_IF_ERROR(DispatchFloat(ctx, x.dtype, [&](auto io) {
    using Io = decltype(io);
    ChannelAffine<Io>(x.as<typename Io::T>(), ctx.output(0)->as<typename Io::T>(), N, C, S, a, b);
  }));
  if (!training) return absl::OkStatus();
  // running = input * momentum + batch * (1 - momentum); outputs 3, 4 (opset < 14) are the batch
  // statistics themselves. Variance is the biased (population) one, as ONNX's reference.
  for (int64_t c = 0; c < C; ++c) {
    if (TensorView* o = ctx.output(1))
      StoreFloatAt(*o, c, static_cast<float>(run_mean[c] * momentum + mean[c] * (1 - momentum)));
    if (TensorView* o = ctx.output(2))
      StoreFloatAt(*o, c, static_cast<float>(run_var[c] * momentum + var[c] * (1 - momentum)));
    if (TensorView* o = ctx.output(3)) StoreFloatAt(*o, c, static_cast<float>(mean[c]));
    if (TensorView* o = ctx.output(4)) StoreFloatAt(*o, c, static_cast<float>(var[c]));
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_norm) {
  r.Register({"LayerNormalization", "", DeviceType::kCPU, kFloatTypes, 0,
              ClassKernel<LayerNormKernel>()});
  r.Register({"BatchNormalization", "", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(BatchNormKernel)});
}

}  // namespace mixtrain::cpu
