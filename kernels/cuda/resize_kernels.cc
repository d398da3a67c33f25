// CUDA kernel classes of Resize (opsets 10-13+, and Upsample) and ai.mixtrain.ResizeGrad. The taps
// (which input indices each output coordinate reads, with which weights) come from the CPU
// kernels' own code, kernels/common/resize_taps.h, so both devices and both directions read the same
// taps; they are worked out on the host once per shape and parameters and uploaded as tables, and
// the GPU applies the separable map (kernels/cuda/pad_slice.cu) or its adjoint. Scales, roi and
// the gradient's shape are read from the host copy of the plan's constants (host_input).
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/resize_taps.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/adjoint_tables.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/owned_buffer.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {


// Input i as the host sees it: null when absent or empty, an error when only the GPU has it.
absl::StatusOr<const TensorView*> HostParam(const KernelContext& ctx, size_t i, const char* what) {
  const TensorView* t = ctx.input(i);
  if (t == nullptr || t->numel() == 0) return nullptr;
  const TensorView* h = ctx.host_input(i);
  if (h == nullptr)
    return ctx.Error(absl::StrCat(what, " is computed on the GPU at run time; the CUDA kernel needs it fixed when the "
                                        "plan is made"));
  return h;
}

// Uploads `host` into `buf` (on the node's stream; the vector stays alive in the kernel).
template <typename T>
T* Upload(const KernelContext& ctx, OwnedBuffer& buf, const std::vector<T>& host) {
  auto* dev = static_cast<T*>(buf.Get(std::max<size_t>(host.size(), 1) * sizeof(T)));
  if (!host.empty())
    MT_CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice,
                                  static_cast<cudaStream_t>(ctx.stream())));
  return dev;
}

// The values of the scale and roi parameters, for the cache key.
absl::StatusOr<std::vector<double>> ParamValues(const KernelContext& ctx, const TensorView* a, const TensorView* b) {
  std::vector<double> out;
  for (const TensorView* t : {a, b}) {
    MT_ASSIGN_OR_RETURN(std::vector<double> v, resize::Doubles(ctx, t));
    out.insert(out.end(), v.begin(), v.end());
    out.push_back(1e300);  // a separator no parameter takes
  }
  return out;
}

class ResizeKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* x = ctx.input(0);
    TensorView* y = ctx.output(0);
    if (x == nullptr || y == nullptr || x->rank() != y->rank()) return ctx.Error("needs X and an output of X's rank");
    if (!IsGpuFloat(x->dtype) || y->dtype != x->dtype) return ctx.Error("the CUDA Resize takes f32, f16 or bf16");
    if (x->rank() > 8) return ctx.Error("the CUDA Resize takes rank <= 8");
    const Node& node = ctx.node();
    const bool v10 = node.op_type() == "Upsample" || (ctx.opset() > 0 && ctx.opset() < 11);
    MT_ASSIGN_OR_RETURN(resize::Params p, resize::ParamsOf(ctx, v10));
    MT_ASSIGN_OR_RETURN(const TensorView* scales, HostParam(ctx, v10 ? 1 : 2, "scales"));
    const TensorView* roi = nullptr;
    if (!v10) {
      MT_ASSIGN_OR_RETURN(roi, HostParam(ctx, 1, "roi"));
    }
    MT_ASSIGN_OR_RETURN(std::vector<double> key, ParamValues(ctx, scales, roi));
    key.insert(key.end(), x->dims.begin(), x->dims.end());
    key.insert(key.end(), y->dims.begin(), y->dims.end());
    if (key != key_) {
      MT_ASSIGN_OR_RETURN(std::vector<resize::Taps> taps, resize::AllTaps(ctx, p, x->dims, y->dims, scales, roi));
      SeparableArgs a;
      a.rank = static_cast<int>(x->rank());
      a.fill = static_cast<float>(p.extrapolation);
      idx_.clear();
      w_.clear();
      outside_.clear();
      for (int d = 0; d < a.rank; ++d) {
        const resize::Taps& t = taps[d];
        a.x_dims[d] = x->dims[d];
        a.y_dims[d] = y->dims[d];
        a.width[d] = t.width;
        a.base[d] = static_cast<int64_t>(idx_.size());
        a.ob[d] = static_cast<int64_t>(outside_.size());
        idx_.insert(idx_.end(), t.idx.begin(), t.idx.end());
        for (double v : t.w) w_.push_back(static_cast<float>(v));
        for (int64_t c = 0; c < y->dims[d]; ++c)
          outside_.push_back(c < static_cast<int64_t>(t.outside.size()) && t.outside[c] ? 1 : 0);
      }
      a.idx = Upload(ctx, idx_buf_, idx_);
      a.w = Upload(ctx, w_buf_, w_);
      a.outside = Upload(ctx, outside_buf_, outside_);
      args_ = a;
      key_ = std::move(key);
    }
    LaunchSeparableMap(x->dtype, args_, x->data, y->data, ctx.stream());
    return absl::OkStatus();
  }

 private:
  std::vector<double> key_;
  std::vector<int64_t> idx_;
  std::vector<float> w_;
  std::vector<uint8_t> outside_;
  OwnedBuffer idx_buf_, w_buf_, outside_buf_;
  SeparableArgs args_;
};

// ResizeGrad(dY, shape[, roi][, scales]) -> dX: the adjoint of the forward's taps (weights of
// coordinates outside the crop box are 0: they read the extrapolation constant, not the input).
class ResizeGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* dy = ctx.input(0);
    TensorView* dx = ctx.output(0);
    if (dy == nullptr || ctx.input(1) == nullptr || dx == nullptr) return ctx.Error("needs inputs dY and shape");
    if (!IsGpuFloat(dy->dtype) || dx->dtype != dy->dtype) return ctx.Error("dY and dX must share one float dtype");
    if (dy->rank() > 8) return ctx.Error("the CUDA ResizeGrad takes rank <= 8");
    MT_ASSIGN_OR_RETURN(const TensorView* shape_v, HostParam(ctx, 1, "shape"));
    if (shape_v == nullptr) return ctx.Error("shape is empty");
    MT_ASSIGN_OR_RETURN(std::vector<double> shape_d, resize::Doubles(ctx, shape_v));
    const std::vector<int64_t> shape(shape_d.begin(), shape_d.end());
    if (shape != dx->dims) return ctx.Error("dX is not planned with the given shape");
    MT_ASSIGN_OR_RETURN(resize::Params p, resize::ParamsOf(ctx, false));
    MT_ASSIGN_OR_RETURN(const TensorView* roi, HostParam(ctx, 2, "roi"));
    MT_ASSIGN_OR_RETURN(const TensorView* scales, HostParam(ctx, 3, "scales"));
    MT_ASSIGN_OR_RETURN(std::vector<double> key, ParamValues(ctx, scales, roi));
    key.insert(key.end(), shape.begin(), shape.end());
    key.insert(key.end(), dy->dims.begin(), dy->dims.end());
    if (key != key_) {
      MT_ASSIGN_OR_RETURN(std::vector<resize::Taps> taps, resize::AllTaps(ctx, p, shape, dy->dims, scales, roi));
      const std::vector<sep::Axis> axes = resize::AdjointAxes(taps, shape);
      args_ = tables_.Upload(ctx.stream(), sep::BuildAdjoint(axes), dy->dims, shape);
      key_ = std::move(key);
    }
    LaunchSeparableAdjoint(dy->dtype, args_, dy->data, dx->data, ctx.stream());
    return absl::OkStatus();
  }

 private:
  std::vector<double> key_;
  AdjointArgs args_;
  AdjointTables tables_;
};

}  // namespace

MT_REGISTER_KERNELS(cuda_resize) {
  const auto cuda = DeviceType::kCUDA;
  r.Register({"Resize", "", cuda, kFloatTypes, 0, ClassKernel<ResizeKernel>()});
  r.Register({"Upsample", "", cuda, kFloatTypes, 0, ClassKernel<ResizeKernel>()});
  r.Register({"ResizeGrad", "ai.mixtrain", cuda, kFloatTypes, 0, ClassKernel<ResizeGradKernel>()});
}

}  // namespace mixtrain::cuda
