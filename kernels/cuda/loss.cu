// CUDA SoftmaxCrossEntropyLoss and its gradient (ai.mixtrain.SoftmaxCrossEntropyLossGrad), with
// the CPU kernels' definitions (kernels/cpu/loss.cc, grad_loss.cc): scores viewed as [N, C, D],
// labels as [N, D] items, loss_i = -w[t_i] * logp_i[t_i], ignored items weigh 0, mean divides by
// the summed weights (0/0 = NaN as ONNX's reference). One block per item reduces over C (strided
// by D); the sums over items run in one block in a fixed order, in double, so the loss does not
// vary from run to run. Nothing is read back to the host: a label out of [0, C) cannot fail the
// step from the device, so it makes its item's loss and gradient NaN, which the step's finite
// check then reports as a skipped step.
#include <cmath>

#include "kernels/common/reduce.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

template <typename L>
__device__ __forceinline__ int64_t LabelAt(const L* labels, int64_t i) { return static_cast<int64_t>(labels[i]); }

// The item's class weight (1 without weights), 0 when ignored, NaN for a label out of range.
template <typename L>
__device__ float ItemWeight(const CrossEntropyArgs& a, const L* labels, int64_t it, int64_t* t) {
  *t = LabelAt(labels, it);
  if (a.has_ignore && *t == a.ignore_index) return 0.0f;
  if (*t < 0 || *t >= a.C) return NAN;
  return a.weights != nullptr ? LoadParam(a.weights, a.weights_dtype, *t) : 1.0f;
}

// Max and log-sum-exp over C of the item at `base` (stride D), shared by the block.
template <typename Io>
__device__ void MaxLse(const typename Io::T* x, int64_t base, int64_t C, int64_t D, float* scratch, float* m,
                       float* lse) {
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) mx = NanMax(mx, Io::Load(x[base + c * D]));
  mx = BlockReduce(mx, NanMaxOp{}, scratch);
  float s = 0;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) s += red::FastExp(Io::Load(x[base + c * D]) - mx);
  s = BlockReduce(s, SumOp{}, scratch);
  *m = mx;
  *lse = logf(s);
}

// Per item: log_prob (when asked), and the loss and weight into item_loss / item_weight (or, for
// reduction none, the loss straight into out).
template <typename Io, typename L>
__global__ void LossItemsKernel(CrossEntropyArgs a, const typename Io::T* x, const L* labels, typename Io::T* out,
                                typename Io::T* log_prob, float* item_loss, float* item_weight) {
  __shared__ float scratch[kThreads / 32];
  const int64_t items = a.N * a.D;
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    const int64_t n = it / a.D, d = it % a.D, base = n * a.C * a.D + d;
    float m, lse;
    MaxLse<Io>(x, base, a.C, a.D, scratch, &m, &lse);
    if (log_prob != nullptr)
      for (int64_t c = threadIdx.x; c < a.C; c += kThreads)
        log_prob[base + c * a.D] = Io::Store((Io::Load(x[base + c * a.D]) - m) - lse);
    if (threadIdx.x != 0) continue;
    int64_t t;
    const float w = ItemWeight(a, labels, it, &t);
    float l = 0;
    if (w != w) l = NAN;
    else if (!(a.has_ignore && t == a.ignore_index)) l = -((Io::Load(x[base + t * a.D]) - m) - lse) * w;
    if (a.reduction == CrossEntropyArgs::kNone) {
      out[it] = Io::Store(l);
    } else {
      item_loss[it] = l;
      item_weight[it] = w;
    }
  }
}

// One block: out[0] = sum of the item losses (divided by the summed weights for mean).
template <typename Io>
__global__ void FinishLossKernel(CrossEntropyArgs a, const float* item_loss, const float* item_weight,
                                 typename Io::T* out) {
  __shared__ double scratch[kThreads / 32];
  const int64_t items = a.N * a.D;
  double l = 0, w = 0;
  for (int64_t i = threadIdx.x; i < items; i += kThreads) {
    l += item_loss[i];
    w += item_weight[i];
  }
  l = BlockReduce(l, SumOp{}, scratch);
  w = BlockReduce(w, SumOp{}, scratch);
  if (threadIdx.x == 0) out[0] = Io::Store(static_cast<float>(a.reduction == CrossEntropyArgs::kMean ? l / w : l));
}

// One block: *wsum = the summed weights of the items (mean's divisor).
template <typename L>
__global__ void WeightSumKernel(CrossEntropyArgs a, const L* labels, double* wsum) {
  __shared__ double scratch[kThreads / 32];
  double w = 0;
  for (int64_t i = threadIdx.x; i < a.N * a.D; i += kThreads) {
    int64_t t;
    w += ItemWeight(a, labels, i, &t);
  }
  w = BlockReduce(w, SumOp{}, scratch);
  if (threadIdx.x == 0) *wsum = w;
}

// d scores = coef * (softmax - onehot(t)), coef = w[t] * (dL_i | dL | dL / wsum).
template <typename Io, typename L>
__global__ void LossGradKernel(CrossEntropyArgs a, const void* dl, DType dl_dtype, const typename Io::T* x,
                               const L* labels, const double* wsum, typename Io::T* dx) {
  __shared__ float scratch[kThreads / 32];
  const int64_t items = a.N * a.D;
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    const int64_t n = it / a.D, d = it % a.D, base = n * a.C * a.D + d;
    float m, lse;
    MaxLse<Io>(x, base, a.C, a.D, scratch, &m, &lse);
    int64_t t;
    const float w = ItemWeight(a, labels, it, &t);
    float coef;
    if (a.reduction == CrossEntropyArgs::kNone) coef = w * LoadParam(dl, dl_dtype, it);
    else if (a.reduction == CrossEntropyArgs::kSum) coef = w * LoadParam(dl, dl_dtype, 0);
    else coef = *wsum == 0 ? 0.0f : static_cast<float>(w * LoadParam(dl, dl_dtype, 0) / *wsum);
    if (w != w) coef = NAN;
    for (int64_t c = threadIdx.x; c < a.C; c += kThreads) {
      const float p = red::FastExp((Io::Load(x[base + c * a.D]) - m) - lse);
      dx[base + c * a.D] = Io::Store(coef * (p - (c == t ? 1.0f : 0.0f)));
    }
  }
}


template <typename Fn>
void ForLabels(DType t, Fn&& fn) {
  if (t == DType::kI64) fn(int64_t{});
  else if (t == DType::kI32) fn(int32_t{});
  else MT_CHECK(false) << "CUDA cross-entropy: labels must be i32 or i64, got " << DTypeName(t);
}

}  // namespace

size_t CrossEntropyScratchBytes(const CrossEntropyArgs& a) {
  return static_cast<size_t>(a.N * a.D) * 2 * sizeof(float) + sizeof(double);
}

void LaunchSoftmaxCrossEntropy(const CrossEntropyArgs& a, DType dtype, const void* scores, DType label_dtype,
                               const void* labels, void* out, void* log_prob, void* scratch, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t items = a.N * a.D;
  float* item_loss = static_cast<float*>(scratch);
  float* item_weight = item_loss + items;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    ForLabels(label_dtype, [&](auto label) {
      using L = decltype(label);
      if (items > 0)
        LossItemsKernel<Io, L><<<GridFor(items), kThreads, 0, s>>>(a, static_cast<const T*>(scores),
                                                                     static_cast<const L*>(labels), static_cast<T*>(out),
                                                                     static_cast<T*>(log_prob), item_loss, item_weight);
    });
    if (a.reduction != CrossEntropyArgs::kNone)
      FinishLossKernel<Io><<<1, kThreads, 0, s>>>(a, item_loss, item_weight, static_cast<T*>(out));
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchSoftmaxCrossEntropyGrad(const CrossEntropyArgs& a, DType dtype, const void* dl, DType dl_dtype,
                                   const void* scores, DType label_dtype, const void* labels, void* dx,
                                   void* scratch, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t items = a.N * a.D;
  if (items == 0) return;
  double* wsum = static_cast<double*>(scratch);
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    ForLabels(label_dtype, [&](auto label) {
      using L = decltype(label);
      if (a.reduction == CrossEntropyArgs::kMean)
        WeightSumKernel<L><<<1, kThreads, 0, s>>>(a, static_cast<const L*>(labels), wsum);
      LossGradKernel<Io, L><<<GridFor(items), kThreads, 0, s>>>(a, dl, dl_dtype, static_cast<const T*>(scores),
                                                                 static_cast<const L*>(labels), wsum,
                                                                 static_cast<T*>(dx));
    });
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
