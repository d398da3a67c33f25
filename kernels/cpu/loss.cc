// CPU kernels for SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss in fp32/fp16/bf16 with
// int32/int64 labels. Both view scores as [N, C, D] (D = product of the extra dims d1...) and
// labels as [N, D]. Per element: loss = -w[t] * logp[n, t, d] where logp is the input itself (NLL)
// or its log-softmax over C (SCE), and w[t] = weights[t] (1 without weights), 0 where
// t == ignore_index. reduction: none keeps [N, d1...], sum adds, mean divides the sum by the sum
// of the applied weights (so ignored elements count neither in the numerator nor the count).
// Partial sums are per sample in double, added in a fixed order: results are deterministic.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"
#include "kernels/cpu/simd_target.h"

namespace mixtrain::cpu {
namespace {

constexpr int64_t kGrain = 8192;

struct LossParams {
  int64_t N = 0, C = 0, D = 1;
  const float* weights = nullptr;  // [C] or null
  std::optional<int64_t> ignore_index;
  enum class Reduction { kNone, kSum, kMean } reduction = Reduction::kMean;
};

// The max and log-sum-exp of one contiguous row of C logits (classes last, D = 1: a language
// model's [tokens, vocab]), in float loops that vectorize; the strided loops below run along d,
// which for D = 1 left them scalar (3 ms per step on gpt_mini's [2048, 256] logits). A NaN logit
// makes the sum, and so the loss, NaN, as the strided loops do.
template <typename Io>
[[gnu::always_inline]] inline void MaxLogSumExpRow(const typename Io::T* xs, int64_t C, float* max,
                                                   float* lse) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < C; ++c) {  // not std::max, which GCC does not vectorize here
    const float v = Io::Load(xs[c]);
    m = v > m ? v : m;
  }
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += red::FastExp(Io::Load(xs[c]) - m);
  *max = m;
  *lse = std::log(s);
}
template <typename Io>
MT_TARGET_AVX512 void MaxLogSumExpRowAvx512(const typename Io::T* xs, int64_t C, float* max, float* lse) {
  MaxLogSumExpRow<Io>(xs, C, max, lse);
}

// kSoftmax: scores are logits (SCE, log_prob optionally written); else they are log-probs (NLL).
// The loss is stored as OutIo: the scores' type (ONNX), or fp32 (ai.mixtrain's form).
template <typename Io, bool kSoftmax, typename OutIo = Io>
absl::Status LossImpl(KernelContext& ctx, const LossParams& p) {
  using T = typename Io::T;
  const T* x = ctx.input(0)->as<T>();
  const TensorView& labels = *ctx.input(1);
  typename OutIo::T* out = ctx.output(0)->as<typename OutIo::T>();
  TensorView* log_prob = kSoftmax ? ctx.output(1) : nullptr;
  T* lp = log_prob != nullptr ? log_prob->as<T>() : nullptr;
  const int64_t N = p.N, C = p.C, D = p.D;
  std::vector<double> sample_loss(N, 0.0), sample_weight(N, 0.0);
  std::atomic<bool> has_bad_label{false};
  std::atomic<int64_t> bad_label{0};
  const bool avx512 = Avx512Enabled();
  ParallelFor(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(C * D, 1)),
              [&](int64_t b, int64_t e) {
                std::vector<float> mx(kSoftmax ? D : 0), lse(kSoftmax ? D : 0);
                for (int64_t n = b; n < e; ++n) {
                  const T* xs = x + n * C * D;
                  if constexpr (kSoftmax) {
                    if (D == 1) {
                      if (avx512)
                        MaxLogSumExpRowAvx512<Io>(xs, C, &mx[0], &lse[0]);
                      else
                        MaxLogSumExpRow<Io>(xs, C, &mx[0], &lse[0]);
                    } else {
                      // log-sum-exp over C for every d at once: inner loops run along d.
                      std::fill(mx.begin(), mx.end(), -INFINITY);
                      std::fill(lse.begin(), lse.end(), 0.0f);
                      for (int64_t c = 0; c < C; ++c)
                        for (int64_t d = 0; d < D; ++d) {
                          float v = Io::Load(xs[c * D + d]);
                          mx[d] = (v > mx[d] || v != v) ? v : mx[d];
                        }
                      for (int64_t c = 0; c < C; ++c)
                        for (int64_t d = 0; d < D; ++d)
                          lse[d] += red::FastExp(Io::Load(xs[c * D + d]) - mx[d]);
                      for (int64_t d = 0; d < D; ++d) lse[d] = std::log(lse[d]);
                    }
                    // logp = (x - max) - log(sum(exp(x - max))), kept as two terms so large
                    // logits lose no digits.
                    if (lp != nullptr)
                      for (int64_t c = 0; c < C; ++c)
                        for (int64_t d = 0; d < D; ++d)
                          lp[n * C * D + c * D + d] =
                              Io::Store((Io::Load(xs[c * D + d]) - mx[d]) - lse[d]);
                  }
                  double loss_sum = 0, weight_sum = 0;
                  for (int64_t d = 0; d < D; ++d) {
                    const int64_t t = IntAt(labels, n * D + d);
                    float l = 0, w = 0;
                    if (!(p.ignore_index && t == *p.ignore_index)) {
                      if (t < 0 || t >= C) {
                        bad_label.store(t);
                        has_bad_label.store(true);
                        continue;
                      }
                      w = p.weights != nullptr ? p.weights[t] : 1.0f;
                      float logp = Io::Load(xs[t * D + d]);
                      if constexpr (kSoftmax) logp = (logp - mx[d]) - lse[d];
                      l = -logp * w;
                    }
                    if (p.reduction == LossParams::Reduction::kNone)
                      out[n * D + d] = OutIo::Store(l);
                    loss_sum += l;
                    weight_sum += w;
                  }
                  sample_loss[n] = loss_sum;
                  sample_weight[n] = weight_sum;
                }
              });
  if (has_bad_label.load())
    return ctx.Error(absl::StrCat("label ", bad_label.load(), " is out of range [0, ", C, ")"));
  if (p.reduction == LossParams::Reduction::kNone) return absl::OkStatus();
  double total = 0, total_weight = 0;
  for (int64_t n = 0; n < N; ++n) total += sample_loss[n], total_weight += sample_weight[n];
  // mean over zero applied weight is 0/0 = NaN, as ONNX's reference computes it.
  if (p.reduction == LossParams::Reduction::kMean) total /= total_weight;
  out[0] = OutIo::Store(static_cast<float>(total));
  return absl::OkStatus();
}

template <bool kSoftmax>
absl::Status LossKernel(KernelContext& ctx) {
  const TensorView& scores = *ctx.input(0);
  const TensorView* labels = ctx.input(1);
  const TensorView* weights = ctx.input(2);
  if (labels == nullptr) return ctx.Error("needs input labels");
  if (labels->dtype != DType::kI32 && labels->dtype != DType::kI64)
    return ctx.Error(absl::StrCat("labels must be int32 or int64, got ", DTypeName(labels->dtype)));
  if (scores.rank() < 2) return ctx.Error("scores must be [N, C, ...]");
  LossParams p;
  p.N = scores.dims[0];
  p.C = scores.dims[1];
  for (int64_t i = 2; i < scores.rank(); ++i) p.D *= scores.dims[i];
  if (labels->numel() != p.N * p.D)
    return ctx.Error("labels must have the shape of scores without dim 1");
  std::vector<float> w;
  if (weights != nullptr) {
    if (!IsFloat(weights->dtype) || weights->numel() != p.C)
      return ctx.Error(absl::StrCat("weights must be a float tensor of C=", p.C, " elements"));
    w = ToFloatVector(*weights);
    p.weights = w.data();
  }
  if (ctx.node().has_attr("ignore_index")) p.ignore_index = ctx.node().attr_int("ignore_index", 0);
  const std::string reduction = ctx.node().attr_string("reduction", "mean");
  if (reduction == "none") p.reduction = LossParams::Reduction::kNone;
  else if (reduction == "sum") p.reduction = LossParams::Reduction::kSum;
  else if (reduction == "mean") p.reduction = LossParams::Reduction::kMean;
  else return ctx.Error(absl::StrCat("unknown reduction '", reduction, "'"));
  absl::Status st;
  const bool f32_out = ctx.output(0) != nullptr && ctx.output(0)->dtype == DType::kF32;
  MT_RETURN_IF_ERROR(DispatchFloat(ctx, scores.dtype, [&](auto io) {
    using Io = decltype(io);
    if (f32_out && !std::is_same_v<typename Io::T, float>) {
      st = LossImpl<Io, kSoftmax, red::F32Io>(ctx, p);
    } else {
      st = LossImpl<Io, kSoftmax>(ctx, p);
    }
  }));
  return st;
}

}  // namespace

MT_REGISTER_KERNELS(cpu_loss) {
  r.Register({"SoftmaxCrossEntropyLoss", "", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(LossKernel<true>)});
  // The loss in fp32 from scores of any float type (loss_reads_low).
  r.Register({"SoftmaxCrossEntropyLoss", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(LossKernel<true>)});
  r.Register({"NegativeLogLikelihoodLoss", "", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(LossKernel<false>)});
}

}  // namespace mixtrain::cpu
