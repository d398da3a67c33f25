// CUDA kernel classes of Slice, Pad and their gradients (ai.mixtrain.SliceGrad, PadGrad), with the
// CPU kernels' parameter handling (kernels/cpu/movement_index.cc, grad_shape_kernels.cc; the same
// movement::PlanSlice and ExpandPads). Their integer parameters (starts, ends, pads, shape) must
// be known when the plan is made: they are read from the host copy of the plan's constants
// (KernelContext::host_input), never copied back from the GPU.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "kernels/common/pad_source.h"
#include "kernels/cuda/adjoint_tables.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/owned_buffer.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {


// Input i (int32 or int64) from the host; an absent optional input gives {}.
absl::StatusOr<std::vector<int64_t>> HostInts(const KernelContext& ctx, size_t i, const char* what) {
  if (ctx.input(i) == nullptr) return std::vector<int64_t>{};
  const TensorView* h = ctx.host_input(i);
  if (h == nullptr)
    return ctx.Error(absl::StrCat(what, " is computed on the GPU at run time; the CUDA kernel needs it fixed when "
                                        "the plan is made (a constant or shape arithmetic)"));
  std::vector<int64_t> v(h->numel());
  if (h->dtype == DType::kI64) std::memcpy(v.data(), h->data, v.size() * sizeof(int64_t));
  else if (h->dtype == DType::kI32)
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<const int32_t*>(h->data)[k];
  else return ctx.Error(absl::StrCat(what, " must be int32 or int64"));
  return v;
}

// An attribute (opsets before the parameters became inputs) or else input i from the host.
absl::StatusOr<std::vector<int64_t>> IntsArg(const KernelContext& ctx, size_t i, const char* name) {
  if (ctx.node().has_attr(name)) return ctx.node().attr_ints(name);
  return HostInts(ctx, i, name);
}

std::vector<int64_t> DenseStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// A slice of `dims` as a strided view: the element offset of its first element and per-dim strides.
struct SliceView {
  TransposeArgs args;
  int64_t base = 0;
  int64_t numel = 1;
};
absl::StatusOr<SliceView> PlanView(const KernelContext& ctx, const std::vector<int64_t>& dims,
                                   const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                                   const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
  if (dims.size() > 8) return ctx.Error("the CUDA kernel takes rank <= 8");
  auto plan = movement::PlanSlice(dims, starts, ends, axes, steps);
  if (!plan.ok()) return ctx.Error(plan.status().message());
  const std::vector<int64_t> dense = DenseStrides(dims);
  SliceView v;
  v.args.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    v.args.out_dims[d] = plan->count[d];
    v.args.in_strides[d] = dense[d] * plan->step[d];
    v.base += plan->start[d] * dense[d];
    v.numel *= plan->count[d];
  }
  return v;
}

absl::Status Slice(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, in.dtype));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> starts, IntsArg(ctx, 1, "starts"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> ends, IntsArg(ctx, 2, "ends"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, IntsArg(ctx, 3, "axes"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> steps, IntsArg(ctx, 4, "steps"));
  MT_ASSIGN_OR_RETURN(SliceView v, PlanView(ctx, in.dims, starts, ends, axes, steps));
  if (v.numel != out.numel() || out.dtype != in.dtype) return ctx.Error("output dims do not match the slice");
  const size_t es = DTypeSize(in.dtype);
  LaunchTranspose(es, v.args, v.numel, static_cast<const char*>(in.data) + v.base * es, out.data, ctx.stream());
  return absl::OkStatus();
}

// SliceGrad(dY, shape, starts, ends[, axes][, steps]) -> dX: zeros of `shape`, dY at the slice.
absl::Status SliceGrad(KernelContext& ctx) {
  const TensorView* dy = ctx.input(0);
  TensorView* dx = ctx.output(0);
  if (dy == nullptr || ctx.input(1) == nullptr || ctx.input(2) == nullptr || ctx.input(3) == nullptr || dx == nullptr)
    return ctx.Error("needs inputs dY, shape, starts and ends");
  if (dx->dtype != dy->dtype) return ctx.Error("dY and dX dtypes differ");
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, dy->dtype));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> shape, HostInts(ctx, 1, "shape"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> starts, HostInts(ctx, 2, "starts"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> ends, HostInts(ctx, 3, "ends"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, HostInts(ctx, 4, "axes"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> steps, HostInts(ctx, 5, "steps"));
  if (shape != dx->dims) return ctx.Error("dX is not planned with the given shape");
  MT_ASSIGN_OR_RETURN(SliceView v, PlanView(ctx, shape, starts, ends, axes, steps));
  if (v.numel != dy->numel()) return ctx.Error("dY's size does not match the slice");
  const auto s = static_cast<cudaStream_t>(ctx.stream());
  MT_CUDA_CHECK(cudaMemsetAsync(dx->data, 0, dx->nbytes(), s));
  const size_t es = DTypeSize(dy->dtype);
  LaunchStridedScatter(es, v.args, v.numel, dy->data, static_cast<char*>(dx->data) + v.base * es, ctx.stream());
  return absl::OkStatus();
}

absl::StatusOr<int> PadMode(const KernelContext& ctx) {
  const std::string mode = ctx.node().attr_string("mode", "constant");
  const pad::Mode m = pad::ModeOf(mode);
  if (m == pad::kUnknown) return ctx.Error(absl::StrCat("unknown mode '", mode, "'"));
  return m;
}

absl::Status Pad(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, in.dtype));
  if (out.dtype != in.dtype) return ctx.Error("the output's dtype differs from the input's");
  if (in.rank() > 8) return ctx.Error("the CUDA Pad takes rank <= 8");
  MT_ASSIGN_OR_RETURN(int mode, PadMode(ctx));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> pads, IntsArg(ctx, 1, "pads"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, HostInts(ctx, 3, "axes"));
  auto full = movement::ExpandPads(in.rank(), pads, axes);
  if (!full.ok()) return ctx.Error(full.status().message());
  PadArgs a;
  a.rank = static_cast<int>(in.rank());
  a.mode = mode;
  const size_t es = DTypeSize(in.dtype);
  if (ctx.input(2) != nullptr && !ctx.node().has_attr("pads")) {
    const TensorView* v = ctx.host_input(2);
    if (v == nullptr) return ctx.Error("constant_value is computed on the GPU at run time; the CUDA Pad needs it fixed");
    if (v->dtype != in.dtype || v->numel() != 1) return ctx.Error("constant_value must be one element of the data's dtype");
    std::memcpy(&a.fill, v->data, es);
  } else if (ctx.node().has_attr("value")) {  // opset < 11: a float
    const float f = ctx.node().attr_float("value", 0);
    if (in.dtype != DType::kF32 && f != 0) return ctx.Error("the CUDA Pad takes a non-zero 'value' attribute for f32 only");
    std::memcpy(&a.fill, &f, sizeof(f));
  }
  int64_t n = 1;
  for (int d = 0; d < a.rank; ++d) {
    a.in_dims[d] = in.dims[d];
    a.begin[d] = (*full)[d];
    a.out_dims[d] = in.dims[d] + (*full)[d] + (*full)[a.rank + d];
    if (mode != 0 && in.dims[d] == 0 && a.out_dims[d] > 0)
      return ctx.Error(absl::StrCat("cannot pad the empty dim ", d, " in this mode"));
    n *= a.out_dims[d];
  }
  if (n != out.numel()) return ctx.Error("output dims do not match the pads");
  LaunchPad(es, a, in.data, out.data, ctx.stream());
  return absl::OkStatus();
}

// PadGrad(dY, pads[, axes]) -> dX: the adjoint of Pad's per-dim index map (kernels/common/
// separable_map.h's tables, built on the host and uploaded once per shape), one gathering sum per
// dX element.
class PadGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* dy = ctx.input(0);
    TensorView* dx = ctx.output(0);
    if (dy == nullptr || ctx.input(1) == nullptr || dx == nullptr) return ctx.Error("needs inputs dY and pads");
    if (dx->dtype != dy->dtype) return ctx.Error("dY and dX dtypes differ");
    if (dy->rank() > 8) return ctx.Error("the CUDA PadGrad takes rank <= 8");
    MT_ASSIGN_OR_RETURN(int mode, PadMode(ctx));
    MT_ASSIGN_OR_RETURN(std::vector<int64_t> pads, HostInts(ctx, 1, "pads"));
    MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, HostInts(ctx, 2, "axes"));
    const int64_t r = dy->rank();
    auto full = movement::ExpandPads(r, pads, axes);
    if (!full.ok()) return ctx.Error(full.status().message());
    std::vector<int64_t> key = dy->dims;
    key.insert(key.end(), full->begin(), full->end());
    key.push_back(mode);
    if (key != key_) {
      std::vector<int64_t> dx_dims(r);
      for (int64_t d = 0; d < r; ++d) {
        dx_dims[d] = dy->dims[d] - (*full)[d] - (*full)[r + d];
        if (dx_dims[d] < 0) return ctx.Error(absl::StrCat("pads exceed dim ", d, " of dY"));
        if (mode != 0 && dx_dims[d] == 0 && dy->dims[d] > 0)
          return ctx.Error(absl::StrCat("cannot pad the empty dim ", d, " in this mode"));
      }
      const std::vector<sep::Axis> axes = sep::PadAxes(mode, dy->dims, *full);
      args_ = tables_.Upload(ctx.stream(), sep::BuildAdjoint(axes), dy->dims, dx_dims);
      key_ = key;
    }
    int64_t n = 1;
    for (int d = 0; d < args_.rank; ++d) n *= args_.dx_dims[d];
    if (n != dx->numel()) return ctx.Error("dX's shape does not match dY less the pads");
    LaunchSeparableAdjoint(dy->dtype, args_, dy->data, dx->data, ctx.stream());
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> key_;
  AdjointArgs args_;
  AdjointTables tables_;
};

}  // namespace

MT_REGISTER_KERNELS(cuda_pad_slice) {
  const auto cuda = DeviceType::kCUDA;
  r.Register({"Slice", "", cuda, {}, 0, FnKernel(Slice)});
  r.Register({"Pad", "", cuda, {}, 0, FnKernel(Pad)});
  r.Register({"SliceGrad", "ai.mixtrain", cuda, kFloatTypes, 0, FnKernel(SliceGrad)});
  r.Register({"PadGrad", "ai.mixtrain", cuda, kFloatTypes, 0, ClassKernel<PadGradKernel>()});
}

}  // namespace mixtrain::cuda
