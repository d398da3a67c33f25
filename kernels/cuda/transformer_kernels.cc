// CUDA kernel classes of MaskedSoftmax, SoftmaxGrad, LayerNormalizationGrad, Gather and GatherGrad
// (kernels/cuda/transformer.cu): the checks of their CPU twins, then the launchers on the node's
// stream. Scratch (LayerNorm's row statistics, GatherGrad's sorted indices) is kept per kernel.
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/owned_buffer.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {


// Rows of X's last axis, with the bool mask (may be null) broadcast to X, right-aligned.
absl::StatusOr<MaskedRowsArgs> Rows(const KernelContext& ctx, const TensorView& x, const TensorView* mask) {
  if (x.rank() < 1) return ctx.Error("X must have rank >= 1");
  if (x.rank() > 9) return ctx.Error("the CUDA kernel takes rank <= 9");
  MaskedRowsArgs a;
  a.n = x.dims.back();
  a.rows = a.n > 0 ? x.numel() / a.n : 0;
  if (mask == nullptr) return a;
  if (mask->dtype != DType::kBool) return ctx.Error("mask must be bool");
  if (mask->rank() > x.rank()) return ctx.Error("the mask has a higher rank than X");
  const int64_t r = x.rank(), lead = r - mask->rank();
  std::vector<int64_t> step(r, 0);
  for (int64_t d = r - 1, stride = 1; d >= lead; --d) {
    const int64_t md = mask->dims[d - lead];
    if (md != 1 && md != x.dims[d])
      return ctx.Error(absl::StrCat("mask dim ", d - lead, " (", md, ") does not broadcast to X"));
    step[d] = md == 1 ? 0 : stride;
    stride *= md;
  }
  a.mask_inner = step[r - 1];
  a.rank = static_cast<int>(r - 1);
  for (int64_t d = 0; d + 1 < r; ++d) {
    a.row_dims[d] = x.dims[d];
    a.mask_step[d] = step[d];
  }
  return a;
}

absl::Status MaskedSoftmax(KernelContext& ctx) {
  const TensorView *x = ctx.input(0), *mask = ctx.input(1);
  TensorView* y = ctx.output(0);
  if (x == nullptr || mask == nullptr || y == nullptr) return ctx.Error("needs inputs X and mask");
  if (!IsGpuFloat(x->dtype) || y->dtype != x->dtype || y->numel() != x->numel())
    return ctx.Error("X and Y must be float tensors of one dtype and size");
  MT_ASSIGN_OR_RETURN(MaskedRowsArgs a, Rows(ctx, *x, mask));
  a.scale = ctx.node().attr_float("scale", 1.0f);
  a.fill = ctx.node().attr_float("fill", 0.0f);
  LaunchMaskedSoftmax(x->dtype, a, x->data, static_cast<const uint8_t*>(mask->data), y->data, ctx.stream());
  return absl::OkStatus();
}

absl::Status SoftmaxGrad(KernelContext& ctx) {
  const TensorView *dy = ctx.input(0), *y = ctx.input(1);
  const TensorView* mask = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
  TensorView* dx = ctx.output(0);
  if (dy == nullptr || y == nullptr || dx == nullptr) return ctx.Error("needs inputs dY and Y");
  if (dy->dims != y->dims || dy->dtype != y->dtype || !IsGpuFloat(y->dtype) || dx->dtype != y->dtype)
    return ctx.Error("dY, Y and dX must be float tensors of one shape and dtype");
  MT_ASSIGN_OR_RETURN(MaskedRowsArgs a, Rows(ctx, *y, mask));
  a.scale = ctx.node().attr_float("scale", 1.0f);
  LaunchSoftmaxGrad(y->dtype, a, dy->data, y->data, mask ? static_cast<const uint8_t*>(mask->data) : nullptr,
                    dx->data, ctx.stream());
  return absl::OkStatus();
}

class LayerNormGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView *dy = ctx.input(0), *x = ctx.input(1), *scale = ctx.input(2);
    TensorView *dx = ctx.output(0), *ds = ctx.output(1), *db = ctx.output(2);
    if (dy == nullptr || x == nullptr || scale == nullptr) return ctx.Error("needs inputs dY, X and scale");
    if (!IsGpuFloat(x->dtype) || dy->dtype != x->dtype || (dx != nullptr && dx->dtype != x->dtype))
      return ctx.Error("dY, X and dX must be float tensors of one dtype");
    if (!IsGpuFloat(scale->dtype) || (ds != nullptr && ds->dtype != scale->dtype) ||
        (db != nullptr && db->dtype != scale->dtype))
      return ctx.Error("scale, dScale and dBias must be float tensors of one dtype");
    if (dy->numel() != x->numel()) return ctx.Error("dY and X differ in size");
    auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", -1), x->rank());
    if (!axis.ok()) return ctx.Error(axis.status().message());
    int64_t rows = 1, n = 1;
    for (int64_t i = 0; i < x->rank(); ++i) (i < *axis ? rows : n) *= x->dims[i];
    if (scale->numel() != n) return ctx.Error("scale must have the normalized shape");
    auto* stats = static_cast<float*>(stats_.Get(static_cast<size_t>(2 * std::max<int64_t>(rows, 1)) * sizeof(float)));
    LaunchLayerNormGrad(x->dtype, dy->data, x->data, scale->dtype, scale->data,
                        ctx.node().attr_float("epsilon", 1e-5f), rows, n, dx ? dx->data : nullptr,
                        ds ? ds->data : nullptr, db ? db->data : nullptr, stats, ctx.stream());
    return absl::OkStatus();
  }

 private:
  OwnedBuffer stats_;
};

struct AxisParts {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisParts Around(const std::vector<int64_t>& dims, int64_t axis) {
  AxisParts p;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i)
    (i < axis ? p.outer : i == axis ? p.n : p.inner) *= dims[i];
  return p;
}

absl::Status CheckIndices(const KernelContext& ctx, const TensorView* idx) {
  if (idx == nullptr || (idx->dtype != DType::kI64 && idx->dtype != DType::kI32))
    return ctx.Error("indices must be int32 or int64");
  return absl::OkStatus();
}

absl::Status Gather(KernelContext& ctx) {
  const TensorView *data = ctx.input(0), *idx = ctx.input(1);
  TensorView* out = ctx.output(0);
  if (data == nullptr || out == nullptr) return ctx.Error("needs data, indices and an output");
  MT_RETURN_IF_ERROR(CheckIndices(ctx, idx));
  const size_t es = DTypeSize(data->dtype);
  if ((es != 1 && es != 2 && es != 4 && es != 8) || out->dtype != data->dtype)
    return ctx.Error(absl::StrCat("cannot gather ", DTypeName(data->dtype), " tensors on the GPU"));
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", 0), data->rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  const AxisParts p = Around(data->dims, *axis);
  if (out->numel() != p.outer * idx->numel() * p.inner) return ctx.Error("output size does not match");
  LaunchGather(es, data->data, p.outer, p.n, p.inner, idx->data, idx->dtype == DType::kI64, idx->numel(), out->data,
               IsFloat(data->dtype), data->dtype, ctx.stream());
  return absl::OkStatus();
}

class GatherGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView *dy = ctx.input(0), *idx = ctx.input(1), *x = ctx.input(2);
    TensorView* dx = ctx.output(0);
    if (dy == nullptr || x == nullptr || dx == nullptr) return ctx.Error("needs inputs dY, indices, X");
    MT_RETURN_IF_ERROR(CheckIndices(ctx, idx));
    if (!IsGpuFloat(dy->dtype) || !IsGpuFloat(dx->dtype)) return ctx.Error("dY and dX must be float tensors");
    auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", 0), x->rank());
    if (!axis.ok()) return ctx.Error(axis.status().message());
    const AxisParts p = Around(x->dims, *axis);
    const int64_t K = idx->numel();
    if (dy->numel() != p.outer * K * p.inner) return ctx.Error("dY's size does not match");
    if (dx->numel() != x->numel()) return ctx.Error("dX must have X's shape");
    if (p.n >= (int64_t{1} << 30) || K >= (int64_t{1} << 31))
      return ctx.Error("the CUDA GatherGrad takes an axis under 2^30 rows and under 2^31 indices");
    if (K != scratch_k_) {
      scratch_bytes_ = GatherGradScratchBytes(K);
      scratch_k_ = K;
    }
    LaunchGatherGrad(dy->dtype, dy->data, idx->data, idx->dtype == DType::kI64, K, p.outer, p.n, p.inner, dx->dtype,
                     dx->data, scratch_.Get(scratch_bytes_), scratch_bytes_, ctx.stream());
    return absl::OkStatus();
  }

 private:
  OwnedBuffer scratch_;
  int64_t scratch_k_ = -1;
  size_t scratch_bytes_ = 0;
};

}  // namespace

MT_REGISTER_KERNELS(cuda_transformer) {
  const auto cuda = DeviceType::kCUDA;
  r.Register({"MaskedSoftmax", "ai.mixtrain", cuda, kFloatTypes, 0, FnKernel(MaskedSoftmax)});
  r.Register({"SoftmaxGrad", "ai.mixtrain", cuda, kFloatTypes, 0, FnKernel(SoftmaxGrad)});
  r.Register({"LayerNormalizationGrad", "ai.mixtrain", cuda, kFloatTypes, 0, ClassKernel<LayerNormGradKernel>()});
  r.Register({"Gather", "", cuda, {}, 0, FnKernel(Gather)});
  r.Register({"GatherGrad", "ai.mixtrain", cuda, kFloatTypes, 0, ClassKernel<GatherGradKernel>()});
}

}  // namespace mixtrain::cuda
