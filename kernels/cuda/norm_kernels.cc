// CUDA kernel classes of BatchNormalization, BatchNormalizationGrad, GroupNormalization,
// GroupNormalizationGrad (kernels/cuda/batch_norm.cu) and GlobalAveragePool (a mean over each
// plane, reduce.cu): the checks of their CPU twins (kernels/cpu/norm.cc, grad_norm.cc,
// group_norm.cc, dnnl_pool.cc), then the launchers on the node's stream.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/owned_buffer.h"
#include "kernels/registry.h"

namespace mixtrain::cuda {
namespace {


class BatchNormKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* x = ctx.input(0);
    TensorView* y = ctx.output(0);
    for (int i = 1; i < 5; ++i)
      if (ctx.input(i) == nullptr) return ctx.Error("needs inputs X, scale, B, input_mean, input_var");
    if (x == nullptr || y == nullptr || !IsGpuFloat(x->dtype) || y->dtype != x->dtype || y->numel() != x->numel())
      return ctx.Error("needs a float X and Y of its dtype and shape");
    const Node& node = ctx.node();
    if (node.attr_int("spatial", 1) == 0) return ctx.Error("spatial=0 (per-activation statistics) is not supported");
    if (x->rank() < 2) return ctx.Error("X must be [N, C, ...]");
    BatchNormArgs a;
    a.N = x->dims[0];
    a.C = x->dims[1];
    a.S = a.N > 0 && a.C > 0 ? x->numel() / (a.N * a.C) : 0;
    for (int i = 0; i < 4; ++i) {
      const TensorView* p = ctx.input(i + 1);
      if (!IsGpuFloat(p->dtype) || p->numel() != a.C)
        return ctx.Error(absl::StrCat("input ", i + 1, " must be a float tensor of C=", a.C, " elements"));
      a.param[i] = p->data;
      a.param_dtype[i] = p->dtype;
    }
    int present = 0;
    for (size_t i = 0; i < ctx.num_outputs(); ++i) present += ctx.output(i) != nullptr;
    // As the CPU: training_mode decides from opset 14; before, asking for statistics meant training.
    a.training = node.has_attr("training_mode") ? node.attr_int("training_mode", 0) != 0
                                                : (ctx.opset() == 0 || ctx.opset() < 14) && present > 1;
    a.eps = node.attr_float("epsilon", 1e-5f);
    a.momentum = node.attr_float("momentum", 0.9f);
    for (int i = 0; i < 4; ++i) {
      TensorView* o = ctx.output(i + 1);
      if (o == nullptr || !a.training) continue;
      if (!IsGpuFloat(o->dtype) || o->numel() != a.C)
        return ctx.Error(absl::StrCat("output ", i + 1, " must be a float tensor of C=", a.C, " elements"));
      a.stat_out[i] = o->data;
      a.stat_dtype[i] = o->dtype;
    }
    auto* ab = static_cast<float*>(ab_.Get(static_cast<size_t>(2 * std::max<int64_t>(a.C, 1)) * sizeof(float)));
    LaunchBatchNorm(x->dtype, a, x->data, y->data, ab, ctx.stream());
    return absl::OkStatus();
  }

 private:
  OwnedBuffer ab_;
};

absl::Status BatchNormGrad(KernelContext& ctx) {
  const TensorView *dy = ctx.input(0), *x = ctx.input(1);
  for (int i = 0; i < 5; ++i)
    if (ctx.input(i) == nullptr) return ctx.Error("needs inputs dY, X, scale, mean and var");
  TensorView* dx = ctx.output(0);
  if (!IsGpuFloat(x->dtype) || dy->dtype != x->dtype || dy->numel() != x->numel() ||
      (dx != nullptr && (dx->dtype != x->dtype || dx->numel() != x->numel())))
    return ctx.Error("dY, X and dX must be float tensors of one dtype and shape");
  if (x->rank() < 2) return ctx.Error("X must be N x C [x ...]");
  BatchNormGradArgs a;
  a.N = x->dims[0];
  a.C = x->dims[1];
  a.S = a.N > 0 && a.C > 0 ? x->numel() / (a.N * a.C) : 0;
  for (int i = 0; i < 3; ++i) {
    const TensorView* p = ctx.input(i + 2);
    if (!IsGpuFloat(p->dtype) || p->numel() != a.C)
      return ctx.Error(absl::StrCat("scale, mean and var must be float tensors of C=", a.C, " elements"));
    a.param[i] = p->data;
    a.param_dtype[i] = p->dtype;
  }
  for (int i = 1; i <= 2; ++i) {
    TensorView* o = ctx.output(i);
    if (o == nullptr) continue;
    if (!IsGpuFloat(o->dtype) || o->numel() != a.C)
      return ctx.Error(absl::StrCat("dScale and dBias must be float tensors of C=", a.C, " elements"));
    (i == 1 ? a.dscale : a.dbias) = o->data;
    (i == 1 ? a.dscale_dtype : a.dbias_dtype) = o->dtype;
  }
  a.training = ctx.node().attr_int("training_mode", 1) != 0;
  a.eps = ctx.node().attr_float("epsilon", 1e-5f);
  LaunchBatchNormGrad(x->dtype, a, dy->data, x->data, dx != nullptr ? dx->data : nullptr, ctx.stream());
  return absl::OkStatus();
}

// X [N, C, ...] in groups of C / groups channels (groups < 0: the num_groups attribute); scale
// (and bias) of C or groups entries.
absl::StatusOr<GroupNormArgs> GroupView(const KernelContext& ctx, const TensorView& x, const TensorView& scale,
                                        int64_t groups = -1) {
  if (x.rank() < 2) return ctx.Error("X must be [N, C, ...]");
  GroupNormArgs a;
  a.N = x.dims[0];
  a.C = x.dims[1];
  a.groups = groups >= 0 ? groups : ctx.node().attr_int("num_groups", 0);
  if (a.groups <= 0 || a.C % a.groups != 0)
    return ctx.Error(absl::StrCat("num_groups ", a.groups, " does not divide C=", a.C));
  a.S = 1;
  for (int64_t d = 2; d < x.rank(); ++d) a.S *= x.dims[d];
  a.affine = scale.numel();
  if (a.affine != a.C && a.affine != a.groups)
    return ctx.Error(absl::StrCat("scale has ", a.affine, " entries, expected C=", a.C, " or num_groups=", a.groups));
  if (!IsGpuFloat(scale.dtype)) return ctx.Error("scale must be a float tensor");
  a.param_dtype = scale.dtype;
  a.eps = ctx.node().attr_float("epsilon", 1e-5f);
  return a;
}

// GroupNormalization, and InstanceNormalization as its case of one group per channel.
template <bool kInstance>
absl::Status GroupNorm(KernelContext& ctx) {
  const TensorView *x = ctx.input(0), *scale = ctx.input(1), *bias = ctx.input(2);
  TensorView* y = ctx.output(0);
  if (x == nullptr || scale == nullptr || bias == nullptr || y == nullptr)
    return ctx.Error("needs inputs X, scale and bias");
  if (!IsGpuFloat(x->dtype) || y->dtype != x->dtype || y->numel() != x->numel() || x->rank() < 2)
    return ctx.Error("X (rank >= 2) and Y must be float tensors of one dtype and shape");
  if (kInstance && x->dims[1] == 0) return absl::OkStatus();  // no channels, nothing to normalize
  MT_ASSIGN_OR_RETURN(GroupNormArgs a, GroupView(ctx, *x, *scale, kInstance ? x->dims[1] : -1));
  if (bias->numel() != a.affine || bias->dtype != scale->dtype) return ctx.Error("bias and scale differ");
  if (a.C > 0) LaunchGroupNorm(x->dtype, a, x->data, scale->data, bias->data, y->data, ctx.stream());
  return absl::OkStatus();
}

class GroupNormGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView *dy = ctx.input(0), *x = ctx.input(1), *scale = ctx.input(2);
    TensorView *dx = ctx.output(0), *ds = ctx.output(1), *db = ctx.output(2);
    if (dy == nullptr || x == nullptr || scale == nullptr) return ctx.Error("needs inputs dY, X and scale");
    if (!IsGpuFloat(x->dtype) || dy->dtype != x->dtype || dy->numel() != x->numel() ||
        (dx != nullptr && (dx->dtype != x->dtype || dx->numel() != x->numel())))
      return ctx.Error("dY, X and dX must be float tensors of one dtype and shape");
    MT_ASSIGN_OR_RETURN(GroupNormArgs a, GroupView(ctx, *x, *scale));
    for (const TensorView* o : {ds, db})
      if (o != nullptr && (o->dtype != scale->dtype || o->numel() != a.affine))
        return ctx.Error("dScale and dBias must have the scale's dtype and size");
    auto* partial = static_cast<double*>(partial_.Get(static_cast<size_t>(2 * std::max<int64_t>(a.N * a.C, 1)) * sizeof(double)));
    LaunchGroupNormGrad(x->dtype, a, dy->data, x->data, scale->data, dx ? dx->data : nullptr, ds ? ds->data : nullptr,
                        db ? db->data : nullptr, scale->dtype, partial, ctx.stream());
    return absl::OkStatus();
  }

 private:
  OwnedBuffer partial_;
};

absl::Status GlobalAveragePool(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("needs X and Y");
  if (x->rank() < 3) return ctx.Error("X must be [N, C, spatial...]");
  if (!IsGpuFloat(x->dtype) || y->dtype != x->dtype) return ctx.Error("X and Y must share one float dtype");
  if (ctx.node().attr_int("channels_last", 0) != 0 || ctx.node().attr_int("channel_block", 0) != 0)
    return ctx.Error("the CUDA GlobalAveragePool takes ONNX's NC<spatial> layout only");
  const int64_t planes = x->dims[0] * x->dims[1];
  const int64_t plane = planes > 0 ? x->numel() / planes : 0;
  if (plane == 0 && planes > 0) return ctx.Error("global pooling over an empty spatial extent");
  if (y->numel() != planes) return ctx.Error("Y must hold one value per plane");
  LaunchReduceSum(true, x->dtype, x->data, y->data, planes, plane, 1, ctx.stream());
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cuda_norm) {
  const auto cuda = DeviceType::kCUDA;
  r.Register({"BatchNormalization", "", cuda, kFloatTypes, 0, ClassKernel<BatchNormKernel>()});
  r.Register({"BatchNormalizationGrad", "ai.mixtrain", cuda, kFloatTypes, 0, FnKernel(BatchNormGrad)});
  r.Register({"GlobalAveragePool", "", cuda, kFloatTypes, 0, FnKernel(GlobalAveragePool)});
  r.Register({"GroupNormalization", "", cuda, kFloatTypes, 0, FnKernel(GroupNorm<false>)});
  r.Register({"InstanceNormalization", "", cuda, kFloatTypes, 0, FnKernel(GroupNorm<true>)});
  r.Register({"GroupNormalizationGrad", "ai.mixtrain", cuda, kFloatTypes, 1, ClassKernel<GroupNormGradKernel>()});
}

}  // namespace mixtrain::cuda
