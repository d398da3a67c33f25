// Launchers of the CUDA kernels in kernels/cuda/*.cu, callable from host C++ (the kernel classes
// in kernels/cuda/*.cc). Plain types only, so this header needs no CUDA headers; `stream` is a
// cudaStream_t. Each launcher checks the launch (aborting with file and line on failure, see
// kernels/cuda/cuda_check.h); the kernel classes validate user-visible preconditions first.
#pragma once

#include <cstdint>

#include "graph/dtype.h"
#include "kernels/common/broadcast.h"
#include "kernels/cuda/elementwise_ops.h"

namespace mixtrain::cuda {

// --- elementwise.cu (the rows of kernels/cuda/elementwise_ops.h) -------------------------------
#define MT_EW_ENUMERATOR(Name, ...) k##Name,
enum class UnaryOp : uint8_t { MT_CUDA_UNARY_OPS(MT_EW_ENUMERATOR) };
enum class BinaryOp : uint8_t { MT_CUDA_BINARY_OPS(MT_EW_ENUMERATOR) };
#undef MT_EW_ENUMERATOR

// y = op(x) elementwise, of a dtype the op's row lists; `alpha` and `beta` are the float
// attributes the row reads.
void LaunchUnary(UnaryOp op, DType dtype, float alpha, float beta, const void* x, void* y, int64_t n,
                 void* stream);
// Comparisons (f32, f16, bf16, i32, i64 operands) and logic (bool operands) to bool, over a
// two-input broadcast layout.
enum class CompareOp : uint8_t { kEqual, kLess, kLessOrEqual, kGreater, kGreaterOrEqual, kAnd, kOr, kXor };
void LaunchCompare(CompareOp op, DType dtype, const BroadcastLayout& layout, const void* a, const void* b,
                   uint8_t* o, void* stream);
// CumSum along the middle axis of x viewed as [outer, n, inner] (float dtypes, i32, i64): sums in
// double (int64 for integers), one thread per (outer, inner) line.
void LaunchCumSum(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool exclusive,
                  bool reverse, void* stream);
// y = isnan(x) over n elements of a float dtype.
void LaunchIsNaN(DType dtype, const void* x, uint8_t* y, int64_t n, void* stream);
// o = op(a, b) over a two-input broadcast layout (kernels/common/broadcast.h), of a dtype the op's
// row lists.
void LaunchBinary(BinaryOp op, DType dtype, const BroadcastLayout& layout, const void* a,
                  const void* b, void* o, void* stream);
// y = !x over n bools (ONNX Not).
void LaunchNot(const uint8_t* x, uint8_t* y, int64_t n, void* stream);
// Cast between f32, f16, bf16, i32, i64 and bool (from != to), as ONNX Cast (ew::CastOp).
void LaunchCast(DType from, DType to, const void* x, void* y, int64_t n, void* stream);

// --- reduce.cu (math of kernels/common/reduce.h) -------------------------------------------------
// Softmax / log-softmax over the middle axis of x viewed as [outer, n, inner].
void LaunchSoftmax(bool log, DType dtype, const void* x, void* y, int64_t outer, int64_t n,
                   int64_t inner, void* stream);
// LayerNorm of `rows` contiguous rows of n; scale (and bias, may be null) are n elements of
// `param_dtype` (a float dtype); mean / inv_std (may be null) are `rows` f32 values.
void LaunchLayerNorm(DType dtype, const void* x, void* y, int64_t rows, int64_t n,
                     DType param_dtype, const void* scale, const void* bias, float eps,
                     float* mean, float* inv_std, void* stream);
// Sum (or mean) over the middle axis of [outer, n, inner].
void LaunchReduceSum(bool mean, DType dtype, const void* x, void* y, int64_t outer, int64_t n,
                     int64_t inner, void* stream);

// --- optimizer.cu (kernels/common/optimizer.h); scalars stay on the device ------------------------
struct AdamAttrs {
  float beta1, beta2, eps, weight_decay;
  bool decoupled;
};
// In place on x, m, v (all n f32). lr: f32[1]; step: i32 or i64 [1] (`step_is_i64`); skip:
// bool[1] or null. Bias corrections are computed on the device from `step`.
void LaunchAdam(const AdamAttrs& a, const float* lr, const void* step, bool step_is_i64,
                const uint8_t* skip, float* x, const float* g, float* m, float* v, int64_t n,
                void* stream);
struct SgdAttrs {
  float momentum, weight_decay;
  bool nesterov;
};
void LaunchSgd(const SgdAttrs& a, const float* lr, const uint8_t* skip, float* x, const float* g,
               float* buf, int64_t n, void* stream);
// *all_finite &= every element of x is finite (the caller sets it to 1 first).
void LaunchAllFinite(DType dtype, const void* x, int64_t n, uint8_t* all_finite, void* stream);
struct LossScaleAttrs {
  float growth, backoff, max_scale;
  int64_t interval;
};
// One thread: scale_out, good_out from found_inf (bool[1]), scale (f32[1]), good (i32/i64 [1]).
void LaunchUpdateLossScale(const LossScaleAttrs& a, const uint8_t* found_inf, const float* scale,
                           const void* good, bool good_is_i64, float* scale_out, int64_t* good_out,
                           void* stream);

// --- loss.cu (SoftmaxCrossEntropyLoss and its gradient, as kernels/cpu/loss.cc defines them) -----
struct CrossEntropyArgs {
  int64_t N = 0, C = 0, D = 1;  // scores [N, C, D]; labels [N, D]
  const void* weights = nullptr;  // [C] of weights_dtype, or null
  DType weights_dtype = DType::kF32;
  bool has_ignore = false;
  int64_t ignore_index = 0;
  enum Reduction : uint8_t { kNone, kSum, kMean } reduction = kMean;
};
// Device scratch both launchers need (per-item sums): at most this many bytes.
size_t CrossEntropyScratchBytes(const CrossEntropyArgs& a);
// out: [N, D] (none) or a scalar; log_prob: [N, C, D] or null. A label out of range gives NaN.
void LaunchSoftmaxCrossEntropy(const CrossEntropyArgs& a, DType dtype, const void* scores, DType label_dtype,
                               const void* labels, void* out, void* log_prob, void* scratch, void* stream);
// dx = d loss / d scores given dL (a scalar, or [N, D] for none, of dl_dtype).
void LaunchSoftmaxCrossEntropyGrad(const CrossEntropyArgs& a, DType dtype, const void* dl, DType dl_dtype,
                                   const void* scores, DType label_dtype, const void* labels, void* dx,
                                   void* scratch, void* stream);

// --- conv.cu (what cuDNN's convolutions leave to us, and max pooling) ------------------------------
// FusedConv's epilogue in place on y [N, C, S]: y = act(y + b[c] + z), b ([C], b_dtype) and z
// (like y) may be null. act: 0 none, 1 Relu (NaN -> 0, as oneDNN's post-op on the CPU), 2 Sigmoid,
// 3 Tanh, 4 LeakyRelu(p0), 5 Clip(p0, p1).
enum class ConvAct : uint8_t { kNone, kRelu, kSigmoid, kTanh, kLeakyRelu, kClip };
void LaunchConvEpilogue(DType dtype, void* y, const void* b, DType b_dtype, const void* z, int64_t N,
                        int64_t C, int64_t S, ConvAct act, float p0, float p1, void* stream);
// db[m] = sum over n and s of dy [N, M, S].
void LaunchBiasGrad(DType dtype, const void* dy, void* db, int64_t N, int64_t M, int64_t S, void* stream);
// A pooling window over three spatial dims (fewer are padded with 1s in front), as the CPU's.
struct PoolWindow {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3];
  int64_t pe[3];  // pads_end as ONNX means them (AveragePool's count_include_pad divisor)
};
// MaxPool over `planes` (N*C) planes: each output is its window's first maximum in scan order
// over the taps inside the input (NaN wins only when a window starts with it), as the CPU.
void LaunchMaxPool(DType dtype, const void* x, void* y, int64_t planes, const PoolWindow& w, void* stream);
// MaxPoolGrad: dx[i] = sum of dy over the windows whose first maximum is i (with relu, only
// where that maximum is > 0). Each input element gathers from its windows: no atomics.
void LaunchMaxPoolGrad(DType dtype, const void* dy, const void* x, void* dx, int64_t planes, const PoolWindow& w,
                       bool relu, void* stream);

// --- gemm_epilogue.cu (FusedMatMul after its cuBLASLt product) -----------------------------------
enum class MatMulAct : uint8_t { kNone, kRelu, kGelu, kGeluTanh, kSigmoid, kTanh };
// In place over n elements of y: y[i] = act(y[i] + bias[(i / S) % N]) + z[i]; bias (N values) and
// z (like y) are of y's dtype and may be null. S is the stride of the bias dim in y.
void LaunchMatMulEpilogue(DType dtype, void* y, const void* bias, const void* z, int64_t n, int64_t N, int64_t S,
                          MatMulAct act, void* stream);

// --- transformer.cu (kernels/cpu/softmax.cc, grad_norm.cc, movement_index.cc, grad_gather.cc) ----
// Rows of X's last axis with a bool mask broadcast to X (right-aligned): the mask's offset of row
// r is sum_d index_d(r) * mask_step[d] over X's leading dims; mask_inner (0 or 1) is its stride
// along the row. rank 0: no mask.
struct MaskedRowsArgs {
  int rank = 0;
  int64_t row_dims[8] = {}, mask_step[8] = {};
  int64_t mask_inner = 0;
  int64_t rows = 0, n = 0;
  float scale = 1, fill = 0;
};
// Y = Softmax(Where(mask, scale * X, fill)) over rows of n (ai.mixtrain.MaskedSoftmax).
void LaunchMaskedSoftmax(DType dtype, const MaskedRowsArgs& a, const void* x, const uint8_t* mask, void* y,
                         void* stream);
// dX = scale * Y * (dY - sum(dY * Y)) per row, 0 where the mask (may be null) is false.
void LaunchSoftmaxGrad(DType dtype, const MaskedRowsArgs& a, const void* dy, const void* y, const uint8_t* mask,
                       void* dx, void* stream);
// LayerNormalizationGrad over `rows` rows of n: dx (may be null) per row, and ds / db (may be null,
// of param_dtype) summed over rows in a fixed order. stats: 2 * rows floats of scratch.
void LaunchLayerNormGrad(DType dtype, const void* dy, const void* x, DType param_dtype, const void* scale,
                         float eps, int64_t rows, int64_t n, void* dx, void* ds, void* db, float* stats,
                         void* stream);
// Gather along an axis of data viewed as [outer, n, inner] (elements of esize bytes) with K
// indices (int32 or int64; negative ones count from the end). An index out of range gives zeros
// (NaN for float data when nan_fill) instead of a host read-back.
void LaunchGather(size_t esize, const void* data, int64_t outer, int64_t n, int64_t inner, const void* indices,
                  bool indices_i64, int64_t K, void* out, bool nan_fill, DType dtype, void* stream);
// GatherGrad: dx [outer, n, inner] (dx_dtype) = the sum of dy [outer, K, inner] rows gathered from
// each row, in index order (deterministic, no atomics): the indices are sorted with CUB first.
// Scratch: GatherGradScratchBytes(K) bytes (scratch_bytes). Indices out of range are dropped.
size_t GatherGradScratchBytes(int64_t K);
void LaunchGatherGrad(DType dy_dtype, const void* dy, const void* indices, bool indices_i64, int64_t K,
                      int64_t outer, int64_t n, int64_t inner, DType dx_dtype, void* dx, void* scratch,
                      size_t scratch_bytes, void* stream);

// --- batch_norm.cu (kernels/cpu/norm.cc, grad_norm.cc) and conv.cu's average pooling ------------
// BatchNormalization over x [N, C, S] (ONNX's, spatial): per-channel statistics in double (two
// passes) when training, else the running ones; y = x * a[c] + b[c]. The optional outputs (null
// when absent) are the running mean and var after the momentum update and the batch's own.
struct BatchNormArgs {
  int64_t N = 0, C = 0, S = 0;
  bool training = false;
  float eps = 1e-5f, momentum = 0.9f;
  const void* param[4] = {};  // scale, B, input_mean, input_var
  DType param_dtype[4] = {};
  void* stat_out[4] = {};     // running_mean, running_var, saved mean, saved var
  DType stat_dtype[4] = {};
};
// ab: 2 * C floats of scratch.
void LaunchBatchNorm(DType dtype, const BatchNormArgs& a, const void* x, void* y, float* ab, void* stream);
// BatchNormalizationGrad(dY, X, scale, mean, var) -> dX, dScale, dBias (null when absent): as the
// CPU, statistics recomputed from X in training mode, else the given ones.
struct BatchNormGradArgs {
  int64_t N = 0, C = 0, S = 0;
  bool training = true;
  float eps = 1e-5f;
  const void* param[3] = {};  // scale, mean, var
  DType param_dtype[3] = {};
  void* dscale = nullptr;
  void* dbias = nullptr;
  DType dscale_dtype = DType::kF32, dbias_dtype = DType::kF32;
};
void LaunchBatchNormGrad(DType dtype, const BatchNormGradArgs& a, const void* dy, const void* x, void* dx,
                         void* stream);
// GroupNormalization over x [N, C, S] with `groups` groups of k = C / groups channels; scale and
// bias (param_dtype) hold C entries (opset 21) or `groups` (opset 18). Statistics per (n, group)
// in double, two passes.
struct GroupNormArgs {
  int64_t N = 0, C = 0, S = 0, groups = 1, affine = 0;
  double eps = 1e-5;
  DType param_dtype = DType::kF32;
};
void LaunchGroupNorm(DType dtype, const GroupNormArgs& a, const void* x, const void* scale, const void* bias, void* y,
                     void* stream);
// GroupNormalizationGrad(dY, X, scale) -> dX, dScale, dBias (each may be null; dScale/dBias of
// ds_dtype): partial sums per (n, channel) in `partial` (2 * N * C doubles of scratch), then
// reduced per scale entry in a fixed order.
void LaunchGroupNormGrad(DType dtype, const GroupNormArgs& a, const void* dy, const void* x, const void* scale,
                         void* dx, void* dscale, void* dbias, DType ds_dtype, double* partial, void* stream);
// AveragePool: each output the mean of its window's taps inside the input, divided by the taps
// inside the input or (include_pad) inside the padded input [-pb, in + pe).
void LaunchAveragePool(DType dtype, const void* x, void* y, int64_t planes, const PoolWindow& w, bool include_pad,
                       void* stream);
// AveragePoolGrad: each input element gathers dy / divisor from the windows that cover it.
void LaunchAveragePoolGrad(DType dtype, const void* dy, void* dx, int64_t planes, const PoolWindow& w,
                           bool include_pad, void* stream);

// --- movement.cu (byte-generic: any dtype of 1, 2, 4 or 8 bytes) ---------------------------------
// y = x read through a one-input broadcast layout (Expand; a dense copy when nothing broadcasts).
void LaunchBroadcastCopy(size_t esize, const BroadcastLayout& l, const void* x, void* y, void* stream);
// o = cond ? a : b through a three-input layout (cond: bool).
void LaunchWhere(size_t esize, const BroadcastLayout& l, const uint8_t* cond, const void* a, const void* b, void* o,
                 void* stream);
// Transpose: y[j] = x at the offset the permuted strides give; rank <= 8.
struct TransposeArgs {
  int rank = 0;
  int64_t out_dims[8] = {};
  int64_t in_strides[8] = {};  // x's stride (elements) of each output dim
};
void LaunchTranspose(size_t esize, const TransposeArgs& a, int64_t n, const void* x, void* y, void* stream);
// Its inverse: y[offset of j] = x[j], j dense over a.out_dims (distinct offsets: SliceGrad's).
void LaunchStridedScatter(size_t esize, const TransposeArgs& a, int64_t n, const void* x, void* y, void* stream);

// --- pad_slice.cu (Pad, and the separable maps of Resize, PadGrad and ResizeGrad) ---------------
// Pad: each output element reads the input element pad::Source gives per dim (mode: pad::Mode,
// kernels/common/pad_source.h), or `fill` (esize bytes) where a constant pad has none.
struct PadArgs {
  int rank = 0;
  int mode = 0;
  int64_t out_dims[8] = {}, in_dims[8] = {}, begin[8] = {};
  uint64_t fill = 0;
};
void LaunchPad(size_t esize, const PadArgs& a, const void* x, void* y, void* stream);
// The adjoint of a separable map (PadGrad, ResizeGrad): dx[i] = sum over the output positions o
// that read i, per dim, of prod_d w_d * dy[o]. Per dim d, the positions reading input index k are
// lists[offsets[base[d] + k] .. offsets[base[d] + k + 1]), with weights[...] at the same places
// (null: all 1).
struct AdjointArgs {
  int rank = 0;
  int64_t dy_dims[8] = {}, dx_dims[8] = {}, base[8] = {};
  const int64_t* offsets = nullptr;  // device
  const int64_t* lists = nullptr;    // device
  const float* weights = nullptr;    // device, or null
};
void LaunchSeparableAdjoint(DType dtype, const AdjointArgs& a, const void* dy, void* dx, void* stream);
// The forward of such a map (Resize): y[o] = sum over the product of the dims' taps of
// prod_d w_d * x[idx], or `fill` where a dim's coordinate is outside (tf_crop_and_resize). Per
// dim d, output coordinate c reads taps idx[base[d] + c * width[d] + k], k < width[d], with
// weights w[...]; outside[ob[d] + c] != 0 marks the coordinates outside.
struct SeparableArgs {
  int rank = 0;
  int64_t x_dims[8] = {}, y_dims[8] = {}, base[8] = {}, ob[8] = {};
  int width[8] = {};
  const int64_t* idx = nullptr;     // device
  const float* w = nullptr;         // device
  const uint8_t* outside = nullptr; // device
  float fill = 0;
};
void LaunchSeparableMap(DType dtype, const SeparableArgs& a, const void* x, void* y, void* stream);

}  // namespace mixtrain::cuda
