// CPU kernels of ai.mixtrain.SoftmaxCrossEntropyLossGrad(dL, scores, labels[, weights]) and
// NegativeLogLikelihoodLossGrad(dL, input, target[, weight]): the gradients of ONNX's two
// classification losses w.r.t. scores / input, for N x C [x d...] layouts, class weights,
// ignore_index and every reduction. With loss_i = -w[y_i] * logp_i[y_i]:
//   d scores_i = coef_i * (softmax_i - onehot(y_i)),  d input_i = -coef_i * onehot(y_i)
// where coef_i = w[y_i] * (dL / sum of w over non-ignored items | dL | dL_i) for
// reduction mean | sum | none, and 0 for ignored items.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/elementwise.h"
#include "kernels/common/fastmath.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

struct LossArgs {
  int64_t N = 0, C = 0, D = 1;  // scores viewed as N x C x D
  std::vector<float> coef;      // per item (N x D)
  std::vector<int64_t> label;   // per item; -1 when ignored
};

absl::StatusOr<LossArgs> ReadLoss(KernelContext& ctx) {
  const TensorView* dl = ctx.input(0);
  const TensorView* x = ctx.input(1);
  const TensorView* t = ctx.input(2);
  const TensorView* w = ctx.input(3);
  if (!dl || !x || !t || !ctx.output(0)) return ctx.Error("needs inputs dL, scores, labels");
  if (!AllFloat({dl, x, w, ctx.output(0)})) return ctx.Error("expects float tensors");
  if (t->dtype != DType::kI64 && t->dtype != DType::kI32)
    return ctx.Error("labels must be int32 or int64");
  if (x->rank() < 2) return ctx.Error("scores must be N x C [x d...]");
  LossArgs a;
  a.N = x->dims[0];
  a.C = x->dims[1];
  a.D = x->numel() / std::max<int64_t>(a.N * a.C, 1);
  const int64_t items = a.N * a.D;
  if (t->numel() != items) return ctx.Error("labels must be N [x d...]");
  const std::string reduction = ctx.node().attr_string("reduction", "mean");
  const bool has_ignore = ctx.node().has_attr("ignore_index");
  const int64_t ignore = ctx.node().attr_int("ignore_index", 0);
  const std::vector<float> weights = w ? ToFloatVector(*w) : std::vector<float>();
  if (w && static_cast<int64_t>(weights.size()) != a.C) return ctx.Error("weights must have C elements");
  const std::vector<float> g = ToFloatVector(*dl);
  if (reduction == "none" ? static_cast<int64_t>(g.size()) != items : g.size() != 1)
    return ctx.Error("dL's shape does not match the reduction");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return ctx.Error(absl::StrCat("unknown reduction '", reduction, "'"));
  a.coef.resize(items);
  a.label.resize(items);
  double wsum = 0;
  for (int64_t i = 0; i < items; ++i) {
    int64_t y = IntAt(*t, i);
    if (has_ignore && y == ignore) {
      a.label[i] = -1;
      a.coef[i] = 0;
      continue;
    }
    if (y < 0 || y >= a.C) return ctx.Error(absl::StrCat("label ", y, " out of range [0, ", a.C, ")"));
    a.label[i] = y;
    a.coef[i] = w ? weights[y] : 1.0f;
    wsum += a.coef[i];
  }
  for (int64_t i = 0; i < items; ++i) {
    if (reduction == "none") a.coef[i] *= g[i];
    else if (reduction == "sum") a.coef[i] *= g[0];
    else a.coef[i] = wsum == 0 ? 0.0f : static_cast<float>(a.coef[i] * g[0] / wsum);
  }
  return a;
}

// Rows with the classes contiguous (N x C, what the loss pass makes of a language model's
// N x T x V logits): softmax in float with the vectorizable fm::Exp, then dX stored in its type.
// The scores may be bf16/fp16 (the CPU's loss_reads_low pass lets the loss read AMP's logits
// where they are, instead of an fp32 copy kept for the backward): they load exactly into float,
// and the same float arithmetic as for fp32 scores follows, so dX is what the fp32 kernel and a
// Cast to dX's type give. `row` is C floats of scratch (dX itself when dX is fp32).
// Compiled for AVX2 and for AVX-512 (simd_target.h): the exp polynomial is most of the work.
// dX may be x's own buffer (the planner writes the gradient over the dying logits,
// kOpOverwritesInput1): a row is read whole before any of it is written, and where dX is fp32
// (dp is dX's row) each element is read before it is written; so no __restrict on x and dX.
template <typename In, typename Out>
[[gnu::always_inline]] inline void SoftmaxCrossEntropyGradRange(const LossArgs& a, const In* x, Out* dx,
                                                                float* row, int64_t b, int64_t e) {
  for (int64_t n = b; n < e; ++n) {
    const In* xp = x + n * a.C;
    float* dp = std::is_same_v<Out, float> ? reinterpret_cast<float*>(dx + n * a.C) : row;
    float mx = ew::Io<In>::Load(xp[0]);
    // `v > mx ? v : mx`, not std::max(mx, v): GCC leaves std::max's form of the reduction scalar
    // (a 3-cycle dependency per class; 0.60 -> 0.38 ms on [2048, 256] logits, one thread).
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < a.C; ++c) {
      const float v = ew::Io<In>::Load(xp[c]);
      mx = v > mx ? v : mx;
    }
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < a.C; ++c) {
      dp[c] = fm::Exp(ew::Io<In>::Load(xp[c]) - mx);
      s += dp[c];
    }
    const float k = a.coef[n] / s;
#pragma omp simd
    for (int64_t c = 0; c < a.C; ++c) dp[c] *= k;
    if (a.label[n] >= 0) dp[a.label[n]] -= a.coef[n];
    if constexpr (!std::is_same_v<Out, float>) {
      Out* op = dx + n * a.C;
      for (int64_t c = 0; c < a.C; ++c) op[c] = ew::Io<Out>::Store(dp[c]);
    }
  }
}
template <typename In, typename Out>
MT_TARGET_AVX512 void SoftmaxCrossEntropyGradRangeAvx512(const LossArgs& a, const In* x, Out* dx, float* row,
                                                         int64_t b, int64_t e) {
  SoftmaxCrossEntropyGradRange(a, x, dx, row, b, e);
}

template <typename In, typename Out>
void SoftmaxCrossEntropyGradRows(const LossArgs& a, const In* x, Out* dx) {
  const bool avx512 = Avx512Enabled();
  ParallelFor(a.N, 4, [&](int64_t b, int64_t e) {
    std::vector<float> row(std::is_same_v<Out, float> ? 0 : a.C);
    if (avx512) {
      SoftmaxCrossEntropyGradRangeAvx512(a, x, dx, row.data(), b, e);
    } else {
      SoftmaxCrossEntropyGradRange(a, x, dx, row.data(), b, e);
    }
  });
}

// The contiguous-rows path for these scores and dX types, or false.
bool GradRows(const LossArgs& a, const TensorView& x, TensorView& dx) {
  if (a.D != 1) return false;
  const DType in = x.dtype, out = dx.dtype;
  if (in == DType::kF32 && out == DType::kF32) {
    SoftmaxCrossEntropyGradRows(a, x.as<float>(), dx.as<float>());
  } else if (in == DType::kBF16 && out == DType::kBF16) {
    SoftmaxCrossEntropyGradRows(a, x.as<ew::bf16>(), dx.as<ew::bf16>());
  } else if (in == DType::kBF16 && out == DType::kF32) {
    SoftmaxCrossEntropyGradRows(a, x.as<ew::bf16>(), dx.as<float>());
  } else if (in == DType::kF16 && out == DType::kF16) {
    SoftmaxCrossEntropyGradRows(a, x.as<ew::f16>(), dx.as<ew::f16>());
  } else if (in == DType::kF16 && out == DType::kF32) {
    SoftmaxCrossEntropyGradRows(a, x.as<ew::f16>(), dx.as<float>());
  } else {
    return false;
  }
  return true;
}

absl::Status SoftmaxCrossEntropyGradKernel(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(LossArgs a, ReadLoss(ctx));
  if (GradRows(a, *ctx.input(1), *ctx.output(0))) return absl::OkStatus();
  const std::vector<float> x = ToFloatVector(*ctx.input(1));
  std::vector<float> dx(x.size());
  ParallelFor(a.N * a.D, 16, [&](int64_t b, int64_t e) {
    std::vector<double> ex(a.C);  // exp(x - max) of one item, computed once
    for (int64_t it = b; it < e; ++it) {
      const int64_t n = it / a.D, d = it % a.D;
      const float* xp = x.data() + n * a.C * a.D + d;
      float* dp = dx.data() + n * a.C * a.D + d;
      float mx = xp[0];
      for (int64_t c = 1; c < a.C; ++c) mx = std::max(mx, xp[c * a.D]);
      double s = 0;
      for (int64_t c = 0; c < a.C; ++c) s += ex[c] = std::exp(static_cast<double>(xp[c * a.D] - mx));
      const double inv = 1.0 / s;
      for (int64_t c = 0; c < a.C; ++c)
        dp[c * a.D] = static_cast<float>(a.coef[it] * (ex[c] * inv - (c == a.label[it] ? 1.0 : 0.0)));
    }
  });
  StoreFloats(*ctx.output(0), dx);
  return absl::OkStatus();
}

absl::Status NllLossGradKernel(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(LossArgs a, ReadLoss(ctx));
  std::vector<float> dx(static_cast<size_t>(a.N * a.C * a.D), 0.0f);
  for (int64_t it = 0; it < a.N * a.D; ++it) {
    if (a.label[it] < 0) continue;
    const int64_t n = it / a.D, d = it % a.D;
    dx[(n * a.C + a.label[it]) * a.D + d] = -a.coef[it];
  }
  StoreFloats(*ctx.output(0), dx);
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_loss) {
  r.Register({"SoftmaxCrossEntropyLossGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 1,
              FnKernel(SoftmaxCrossEntropyGradKernel)});
  r.Register({"NegativeLogLikelihoodLossGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 1,
              FnKernel(NllLossGradKernel)});
}

}  // namespace mixtrain::cpu
