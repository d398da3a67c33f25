// CUDA kernel classes of Conv, ai.mixtrain.FusedConv (ONNX layouts only: the training step's
// Conv + bias + residual + Relu/Sigmoid/Tanh; the inference passes' channels-last, blocked and
// pooled forms stay on the CPU), ai.mixtrain.ConvGrad(dY, X, W) -> dX, dW, dB, ConvTranspose,
// MaxPool (without Indices), AveragePool and their gradients. Convolutions run on cuDNN's
// convolution forward / backward-data / backward-filter (1-D as 2-D with a unit height, 2-D, 3-D;
// groups, strides, dilations; asymmetric pads through a zero-padded copy of X), fp32 data with
// fp32 math (no TF32, so fp32 stays within the CPU's rounding), fp16/bf16 data with fp32
// accumulation on tensor cores. The algorithm is cuDNN's first heuristic choice that fits the
// device workspace (for dW, the first deterministic one), chosen once per shape. Bias, residual
// and activation, the bias gradient and the pools are kernels/cuda/conv.cu.
#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/ops/nn_geometry.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/owned_buffer.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"

namespace mixtrain::cuda {
namespace {


cudnnDataType_t CudnnType(DType t) {
  return t == DType::kF16 ? CUDNN_DATA_HALF : t == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

std::vector<int> Ints(const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }

std::vector<int> PackedStrides(const std::vector<int>& dims) {
  std::vector<int> s(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

// cuDNN descriptors and algorithms of one convolution shape.
class ConvPlan {
 public:
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x_) MT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(x_));
    if (y_) MT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(y_));
    if (w_) MT_CUDNN_CHECK(cudnnDestroyFilterDescriptor(w_));
    if (conv_) MT_CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(conv_));
  }

  // X [N, C, sp...], W [M, C/group, kernel...] of `dtype`: the descriptors, and the output dims
  // checked against the ONNX geometry. Fails (naming the node) on what cuDNN cannot express.
  absl::Status Build(const KernelContext& ctx, const std::vector<int64_t>& xd, const std::vector<int64_t>& wd,
                     DType dtype) {
    x_dims = xd;
    w_dims = wd;
    if (xd.size() < 3 || xd.size() > 5) return ctx.Error("expects N x C x D1 [x D2 [x D3]] inputs");
    if (wd.size() != xd.size()) return ctx.Error("W and X ranks differ");
    const int64_t C = xd[1], M = wd[0], G = ctx.node().attr_int("group", 1);
    if (G < 1 || C % G != 0 || M % G != 0 || wd[1] != C / G)
      return ctx.Error(absl::StrCat("channels do not match groups: X has ", C, ", W is ", wd[0], " x ", wd[1],
                                    ", group ", G));
    const std::vector<int64_t> sp(xd.begin() + 2, xd.end()), kernel(wd.begin() + 2, wd.end());
    MT_ASSIGN_OR_RETURN(WindowGeometry g, ForwardWindowGeometry(ctx.node(), sp, kernel));
    y_dims = {xd[0], M};
    y_dims.insert(y_dims.end(), g.out.begin(), g.out.end());
    if (g.pads_begin == g.pads_end_effective || g.pads_begin == g.pads_end) {
      xp_dims = xd;
      return Describe(ctx, dtype, g.pads_begin, g.strides, g.dilations, G);
    }
    // cuDNN pads symmetrically: asymmetric pads (TF's SAME at stride 2) become a zero-padded copy
    // of X (pad_x) convolved without pads; dX is computed for the copy and cropped back (crop_dx).
    padded = true;
    xp_dims = xd;
    pad_x = {};
    crop_dx = {};
    pad_x.rank = crop_dx.rank = static_cast<int>(xd.size());
    for (size_t i = 0; i < xd.size(); ++i) {
      const int64_t pb = i < 2 ? 0 : g.pads_begin[i - 2];
      if (i >= 2) xp_dims[i] = xd[i] + pb + g.pads_end_effective[i - 2];
      pad_x.in_dims[i] = crop_dx.out_dims[i] = xd[i];
      pad_x.out_dims[i] = crop_dx.in_dims[i] = xp_dims[i];
      pad_x.begin[i] = pb;
      crop_dx.begin[i] = -pb;
    }
    return Describe(ctx, dtype, std::vector<int64_t>(sp.size(), 0), g.strides, g.dilations, G);
  }

  // The convolution of X `xd` by W `wd` into `yd` with explicit geometry (ConvTranspose's, whose
  // node attributes mean something else).
  absl::Status BuildExplicit(const KernelContext& ctx, const std::vector<int64_t>& xd, const std::vector<int64_t>& wd,
                             const std::vector<int64_t>& yd, DType dtype, const std::vector<int64_t>& strides,
                             const std::vector<int64_t>& dilations, int64_t group) {
    x_dims = xp_dims = xd;
    w_dims = wd;
    y_dims = yd;
    if (xd.size() < 3 || xd.size() > 5) return ctx.Error("expects N x C x D1 [x D2 [x D3]] inputs");
    return Describe(ctx, dtype, std::vector<int64_t>(strides.size(), 0), strides, dilations, group);
  }

 private:
  // The descriptors for xp_dims, w_dims, y_dims; checks that cuDNN computes y_dims.
  absl::Status Describe(const KernelContext& ctx, DType dtype, const std::vector<int64_t>& pads_in,
                        const std::vector<int64_t>& strides_in, const std::vector<int64_t>& dil_in, int64_t G) {
    const std::vector<int64_t>& xd = xp_dims;
    const std::vector<int64_t>& wd = w_dims;
    const size_t spatial = xd.size() - 2;
    // cuDNN wants at least two spatial dims: a 1-D convolution is a 2-D one of height 1.
    std::vector<int> x4 = Ints(xd), w4 = Ints(wd), y4 = Ints(y_dims);
    std::vector<int> pads = Ints(pads_in), strides = Ints(strides_in), dil = Ints(dil_in);
    if (spatial == 1) {
      x4.insert(x4.begin() + 2, 1);
      w4.insert(w4.begin() + 2, 1);
      y4.insert(y4.begin() + 2, 1);
      pads.insert(pads.begin(), 0);
      strides.insert(strides.begin(), 1);
      dil.insert(dil.begin(), 1);
    }
    const cudnnDataType_t t = CudnnType(dtype);
    MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_));
    MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_));
    MT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_));
    MT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    MT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(x_, t, static_cast<int>(x4.size()), x4.data(), PackedStrides(x4).data()));
    MT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(y_, t, static_cast<int>(y4.size()), y4.data(), PackedStrides(y4).data()));
    MT_CUDNN_CHECK(cudnnSetFilterNdDescriptor(w_, t, CUDNN_TENSOR_NCHW, static_cast<int>(w4.size()), w4.data()));
    MT_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(conv_, static_cast<int>(pads.size()), pads.data(), strides.data(),
                                                   dil.data(), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    MT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_, static_cast<int>(G)));
    MT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, dtype == DType::kF32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    std::vector<int> out(y4.size());
    MT_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv_, x_, w_, static_cast<int>(out.size()), out.data()));
    if (out != y4)
      return ctx.Error(absl::StrCat("cuDNN computes output [", absl::StrJoin(out, ","), "], ONNX [",
                                    absl::StrJoin(y4, ","), "] (pads cuDNN cannot express)"));
    return absl::OkStatus();
  }

 public:
  // The algorithms, chosen on first use (they need the handle) and kept.
  cudnnConvolutionFwdAlgo_t Forward(cudnnHandle_t h, size_t ws) {
    if (!fwd_) {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf;
      int n = 0;
      MT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x_, w_, conv_, y_, static_cast<int>(perf.size()), &n,
                                                            perf.data()));
      fwd_ = Pick(perf.data(), n, ws, false);
    }
    return static_cast<cudnnConvolutionFwdAlgo_t>(*fwd_);
  }
  cudnnConvolutionBwdDataAlgo_t BackwardData(cudnnHandle_t h, size_t ws) {
    if (!bwd_data_) {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf;
      int n = 0;
      MT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_, y_, conv_, x_, static_cast<int>(perf.size()),
                                                                 &n, perf.data()));
      bwd_data_ = Pick(perf.data(), n, ws, false);
    }
    return static_cast<cudnnConvolutionBwdDataAlgo_t>(*bwd_data_);
  }
  cudnnConvolutionBwdFilterAlgo_t BackwardFilter(cudnnHandle_t h, size_t ws) {
    if (!bwd_filter_) {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf;
      int n = 0;
      MT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_, y_, conv_, w_,
                                                                   static_cast<int>(perf.size()), &n, perf.data()));
      bwd_filter_ = Pick(perf.data(), n, ws, true);
    }
    return static_cast<cudnnConvolutionBwdFilterAlgo_t>(*bwd_filter_);
  }

  std::vector<int64_t> x_dims, w_dims, y_dims;
  // Asymmetric pads: cuDNN's x is X zero-padded to xp_dims (pad_x), and dX the crop of its
  // gradient (crop_dx). Otherwise xp_dims == x_dims and cuDNN pads itself.
  bool padded = false;
  std::vector<int64_t> xp_dims;
  PadArgs pad_x, crop_dx;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;

 private:
  // cuDNN's heuristic order; the first that succeeded and fits `ws` (deterministic when asked,
  // if any is). Aborts when none fits: the 32 MiB workspace holds every shape we train.
  template <typename Perf>
  static int Pick(const Perf* perf, int n, size_t ws, bool deterministic) {
    for (int pass = deterministic ? 0 : 1; pass < 2; ++pass)
      for (int i = 0; i < n; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws &&
            (pass == 1 || perf[i].determinism == CUDNN_DETERMINISTIC))
          return static_cast<int>(perf[i].algo);
    MT_CHECK(false) << "no cuDNN convolution algorithm fits the " << ws << "-byte workspace";
    return 0;
  }
  std::optional<int> fwd_, bwd_data_, bwd_filter_;
};

// The plan for these shapes, rebuilt when they change.
absl::StatusOr<ConvPlan*> PlanFor(const KernelContext& ctx, std::unique_ptr<ConvPlan>& plan,
                                  const std::vector<int64_t>& xd, const std::vector<int64_t>& wd, DType dtype) {
  if (plan == nullptr || plan->x_dims != xd || plan->w_dims != wd) {
    auto p = std::make_unique<ConvPlan>();
    MT_RETURN_IF_ERROR(p->Build(ctx, xd, wd, dtype));
    plan = std::move(p);
  }
  return plan.get();
}

int64_t SpatialSize(const std::vector<int64_t>& d) {
  int64_t s = 1;
  for (size_t i = 2; i < d.size(); ++i) s *= d[i];
  return s;
}

const float kOne = 1.0f, kZero = 0.0f;

// Conv(X, W, B?) and FusedConv(X, W, B?, Z?) with `activation`.
class ConvKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* x = ctx.input(0);
    const TensorView* w = ctx.input(1);
    const TensorView* b = ctx.input(2);
    const TensorView* z = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    TensorView* y = ctx.output(0);
    if (x == nullptr || w == nullptr || y == nullptr) return ctx.Error("needs X, W and an output");
    if (!IsGpuFloat(x->dtype) || w->dtype != x->dtype || y->dtype != x->dtype)
      return ctx.Error(absl::StrCat("X, W and Y must share one float dtype (", DTypeName(x->dtype), ", ",
                                    DTypeName(w->dtype), ")"));
    const Node& n = ctx.node();
    if (n.attr_int("channels_last", 0) != 0 || n.attr_int("channel_block", 0) != 0 ||
        n.attr_int("input_channel_block", 0) != 0 || n.has_attr("pool_kernel_shape"))
      return ctx.Error("the CUDA convolution takes ONNX's NC<spatial> layout only (no channels_last, "
                       "channel_block or fused pool)");
    ConvAct act = ConvAct::kNone;
    float p0 = 0, p1 = 0;
    const std::string a = n.attr_string("activation", "");
    const std::vector<float> params = n.attr_floats("activation_params");
    if (a == "Relu") act = ConvAct::kRelu;
    else if (a == "Sigmoid") act = ConvAct::kSigmoid;
    else if (a == "Tanh") act = ConvAct::kTanh;
    else if (a == "LeakyRelu") act = ConvAct::kLeakyRelu, p0 = params.empty() ? 0.01f : params[0];
    else if (a == "Clip") act = ConvAct::kClip, p0 = params.size() > 0 ? params[0] : -INFINITY,
                          p1 = params.size() > 1 ? params[1] : INFINITY;
    else if (!a.empty()) return ctx.Error(absl::StrCat("unknown activation '", a, "'"));
    MT_ASSIGN_OR_RETURN(ConvPlan * p, PlanFor(ctx, plan_, x->dims, w->dims, x->dtype));
    if (y->dims != p->y_dims) return ctx.Error("the output's shape differs from the convolution's");
    if (b != nullptr && (!IsGpuFloat(b->dtype) || b->numel() != p->y_dims[1]))
      return ctx.Error("B must have one float per output channel");
    if (z != nullptr && (z->dtype != y->dtype || z->numel() != y->numel()))
      return ctx.Error("Z must have the output's dtype and shape");
    const CudaStreamResources& res = CudaResources(ctx);
    auto h = static_cast<cudnnHandle_t>(res.cudnn);
    const void* xin = x->data;
    if (p->padded) {
      void* xp = x_padded_.Get(static_cast<size_t>(NumElements(p->xp_dims)) * DTypeSize(x->dtype));
      LaunchPad(DTypeSize(x->dtype), p->pad_x, x->data, xp, ctx.stream());
      xin = xp;
    }
    MT_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, p->x_, xin, p->w_, w->data, p->conv_,
                                           p->Forward(h, res.workspace_bytes), res.workspace, res.workspace_bytes,
                                           &kZero, p->y_, y->data));
    if (b != nullptr || z != nullptr || act != ConvAct::kNone)
      LaunchConvEpilogue(y->dtype, y->data, b ? b->data : nullptr, b ? b->dtype : DType::kF32,
                         z ? z->data : nullptr, p->y_dims[0], p->y_dims[1], SpatialSize(p->y_dims), act, p0, p1,
                         ctx.stream());
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<ConvPlan> plan_;
  OwnedBuffer x_padded_;
};

// ConvGrad(dY, X, W) -> dX, dW, dB (each optional).
class ConvGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* dy = ctx.input(0);
    const TensorView* x = ctx.input(1);
    const TensorView* w = ctx.input(2);
    if (dy == nullptr || x == nullptr || w == nullptr) return ctx.Error("needs dY, X and W");
    if (!IsGpuFloat(x->dtype) || w->dtype != x->dtype || dy->dtype != x->dtype)
      return ctx.Error("dY, X and W must share one float dtype");
    MT_ASSIGN_OR_RETURN(ConvPlan * p, PlanFor(ctx, plan_, x->dims, w->dims, x->dtype));
    if (dy->dims != p->y_dims) return ctx.Error("dY's shape does not match the convolution's output");
    TensorView* dx = ctx.output(0);
    TensorView* dw = ctx.output(1);
    TensorView* db = ctx.output(2);
    for (const TensorView* o : {dx, dw, db})
      if (o != nullptr && o->dtype != x->dtype) return ctx.Error("the gradients must have X's dtype");
    const CudaStreamResources& res = CudaResources(ctx);
    auto h = static_cast<cudnnHandle_t>(res.cudnn);
    const size_t es = DTypeSize(x->dtype), padded_bytes = static_cast<size_t>(NumElements(p->xp_dims)) * es;
    if (dx != nullptr) {
      void* dxp = p->padded ? dx_padded_.Get(padded_bytes) : dx->data;
      MT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &kOne, p->w_, w->data, p->y_, dy->data, p->conv_,
                                                  p->BackwardData(h, res.workspace_bytes), res.workspace,
                                                  res.workspace_bytes, &kZero, p->x_, dxp));
      if (p->padded) LaunchPad(es, p->crop_dx, dxp, dx->data, ctx.stream());
    }
    if (dw != nullptr) {
      const void* xin = x->data;
      if (p->padded) {
        void* xp = x_padded_.Get(padded_bytes);
        LaunchPad(es, p->pad_x, x->data, xp, ctx.stream());
        xin = xp;
      }
      MT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &kOne, p->x_, xin, p->y_, dy->data, p->conv_,
                                                    p->BackwardFilter(h, res.workspace_bytes), res.workspace,
                                                    res.workspace_bytes, &kZero, p->w_, dw->data));
    }
    if (db != nullptr) {
      if (db->numel() != p->y_dims[1]) return ctx.Error("dB must have one element per output channel");
      LaunchBiasGrad(dy->dtype, dy->data, db->data, p->y_dims[0], p->y_dims[1], SpatialSize(p->y_dims), ctx.stream());
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<ConvPlan> plan_;
  OwnedBuffer x_padded_, dx_padded_;
};

// The pooling window of node `ctx` over X's dims, as the CPU's MakeWindow3.
absl::StatusOr<PoolWindow> Window(const KernelContext& ctx, const std::vector<int64_t>& xd) {
  if (xd.size() < 3 || xd.size() > 5) return ctx.Error("expects N x C x D1 [x D2 [x D3]] inputs");
  const std::vector<int64_t> sp(xd.begin() + 2, xd.end());
  MT_ASSIGN_OR_RETURN(WindowGeometry g, ForwardWindowGeometry(ctx.node(), sp, ctx.node().attr_ints("kernel_shape")));
  PoolWindow w;
  for (int i = 0; i < 3; ++i) w.in[i] = w.out[i] = w.k[i] = w.s[i] = w.d[i] = 1, w.pb[i] = w.pe[i] = 0;
  const size_t off = 3 - sp.size();
  for (size_t i = 0; i < sp.size(); ++i) {
    w.in[off + i] = sp[i];
    w.out[off + i] = g.out[i];
    w.k[off + i] = g.kernel[i];
    w.s[off + i] = g.strides[i];
    w.d[off + i] = g.dilations[i];
    w.pb[off + i] = g.pads_begin[i];
    w.pe[off + i] = g.pads_end[i];
  }
  return w;
}

absl::Status MaxPool(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr || !IsGpuFloat(x->dtype) || y->dtype != x->dtype)
    return ctx.Error("needs a float X and Y of its dtype");
  if (ctx.output(1) != nullptr) return ctx.Error("the CUDA MaxPool does not compute Indices");
  const Node& n = ctx.node();
  if (n.attr_int("channels_last", 0) != 0 || n.attr_int("channel_block", 0) != 0 || n.attr_int("storage_order", 0) != 0)
    return ctx.Error("the CUDA MaxPool takes ONNX's NC<spatial> layout only");
  MT_ASSIGN_OR_RETURN(PoolWindow w, Window(ctx, x->dims));
  const int64_t planes = x->dims[0] * x->dims[1];
  if (y->numel() != planes * w.out[0] * w.out[1] * w.out[2]) return ctx.Error("Y's shape is not the pool's");
  LaunchMaxPool(x->dtype, x->data, y->data, planes, w, ctx.stream());
  return absl::OkStatus();
}

// The pool gradients' inputs (dY, X) and output dX, checked, and the window: its planes.
absl::StatusOr<PoolWindow> GradWindow(const KernelContext& ctx, int64_t* planes) {
  const TensorView *dy = ctx.input(0), *x = ctx.input(1);
  const TensorView* dx = ctx.output(0);
  if (dy == nullptr || x == nullptr || dx == nullptr) return ctx.Error("needs inputs dY, X and output dX");
  if (!IsGpuFloat(x->dtype) || dy->dtype != x->dtype || dx->dtype != x->dtype || dx->numel() != x->numel())
    return ctx.Error("dY, X and dX must share one float dtype, dX X's shape");
  MT_ASSIGN_OR_RETURN(PoolWindow w, Window(ctx, x->dims));
  *planes = x->dims[0] * x->dims[1];
  if (dy->numel() != *planes * w.out[0] * w.out[1] * w.out[2])
    return ctx.Error("dY's shape does not match the pooling output");
  return w;
}

absl::Status MaxPoolGrad(KernelContext& ctx) {
  int64_t planes;
  MT_ASSIGN_OR_RETURN(PoolWindow w, GradWindow(ctx, &planes));
  const TensorView *dy = ctx.input(0), *x = ctx.input(1);
  LaunchMaxPoolGrad(x->dtype, dy->data, x->data, ctx.output(0)->data, planes, w, ctx.node().attr_int("relu", 0) != 0,
                    ctx.stream());
  return absl::OkStatus();
}

// ConvTranspose(X, W, B?): cuDNN's backward-data of the convolution that maps the uncropped output
// Yfull [N, M, (H - 1) s + d (k - 1) + 1, ...] to X (no pads), then Yfull cropped at pads_begin
// and zero-extended to the ONNX output (output_padding, output_shape, end pads), then the bias.
class ConvTransposeKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView *x = ctx.input(0), *w = ctx.input(1), *b = ctx.input(2);
    TensorView* y = ctx.output(0);
    if (x == nullptr || w == nullptr || y == nullptr) return ctx.Error("needs X, W and an output");
    if (!IsGpuFloat(x->dtype) || w->dtype != x->dtype || y->dtype != x->dtype)
      return ctx.Error("X, W and Y must share one float dtype");
    if (x->rank() < 3 || x->rank() > 5 || w->rank() != x->rank()) return ctx.Error("expects N x C x D1 [x D2 [x D3]]");
    const int64_t G = ctx.node().attr_int("group", 1), C = x->dims[1];
    if (G < 1 || C % G != 0 || w->dims[0] != C) return ctx.Error("W must be [C_in, C_out / group, kernel...]");
    const int64_t M = w->dims[1] * G;
    if (y->rank() != x->rank() || y->dims[0] != x->dims[0] || y->dims[1] != M)
      return ctx.Error("Y must be [N, C_out, ...]");
    if (b != nullptr && (!IsGpuFloat(b->dtype) || b->numel() != M))
      return ctx.Error("B must have one float per output channel");
    if (plan_ == nullptr || plan_->y_dims != x->dims || plan_->w_dims != w->dims || y_dims_ != y->dims) {
      const std::vector<int64_t> sp(x->dims.begin() + 2, x->dims.end()), kernel(w->dims.begin() + 2, w->dims.end());
      MT_ASSIGN_OR_RETURN(WindowGeometry g, TransposedWindowGeometry(ctx.node(), sp, kernel));
      std::vector<int64_t> full = {x->dims[0], M};
      for (size_t i = 0; i < sp.size(); ++i) full.push_back((sp[i] - 1) * g.strides[i] + g.effective_kernel(i));
      for (size_t i = 0; i < sp.size(); ++i)
        if (y->dims[2 + i] != g.out[i]) return ctx.Error("the output's shape differs from the transposed convolution's");
      auto p = std::make_unique<ConvPlan>();
      MT_RETURN_IF_ERROR(p->BuildExplicit(ctx, full, w->dims, x->dims, x->dtype, g.strides, g.dilations, G));
      plan_ = std::move(p);
      y_dims_ = y->dims;
      crop_ = {};
      crop_.rank = static_cast<int>(y->rank());
      direct_ = true;
      for (int d = 0; d < crop_.rank; ++d) {
        crop_.out_dims[d] = y->dims[d];
        crop_.in_dims[d] = full[d];
        crop_.begin[d] = d < 2 ? 0 : -g.pads_begin[d - 2];
        direct_ &= crop_.begin[d] == 0 && full[d] == y->dims[d];
      }
    }
    const CudaStreamResources& res = CudaResources(ctx);
    auto h = static_cast<cudnnHandle_t>(res.cudnn);
    const size_t es = DTypeSize(x->dtype);
    void* full = direct_ ? y->data : full_.Get(static_cast<size_t>(NumElements(plan_->x_dims)) * es);
    MT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &kOne, plan_->w_, w->data, plan_->y_, x->data, plan_->conv_,
                                                plan_->BackwardData(h, res.workspace_bytes), res.workspace,
                                                res.workspace_bytes, &kZero, plan_->x_, full));
    if (!direct_) LaunchPad(es, crop_, full, y->data, ctx.stream());
    if (b != nullptr)
      LaunchConvEpilogue(y->dtype, y->data, b->data, b->dtype, nullptr, y->dims[0], M, SpatialSize(y->dims),
                         ConvAct::kNone, 0, 0, ctx.stream());
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<ConvPlan> plan_;  // the convolution Yfull -> X: its x is Yfull, its y is X
  std::vector<int64_t> y_dims_;
  PadArgs crop_;
  bool direct_ = false;
  OwnedBuffer full_;
};

absl::Status AveragePool(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr || !IsGpuFloat(x->dtype) || y->dtype != x->dtype)
    return ctx.Error("needs a float X and Y of its dtype");
  const Node& n = ctx.node();
  if (n.attr_int("channels_last", 0) != 0 || n.attr_int("channel_block", 0) != 0)
    return ctx.Error("the CUDA AveragePool takes ONNX's NC<spatial> layout only");
  MT_ASSIGN_OR_RETURN(PoolWindow w, Window(ctx, x->dims));
  const int64_t planes = x->dims[0] * x->dims[1];
  if (y->numel() != planes * w.out[0] * w.out[1] * w.out[2]) return ctx.Error("Y's shape is not the pool's");
  LaunchAveragePool(x->dtype, x->data, y->data, planes, w, n.attr_int("count_include_pad", 0) != 0, ctx.stream());
  return absl::OkStatus();
}

absl::Status AveragePoolGrad(KernelContext& ctx) {
  int64_t planes;
  MT_ASSIGN_OR_RETURN(PoolWindow w, GradWindow(ctx, &planes));
  LaunchAveragePoolGrad(ctx.input(1)->dtype, ctx.input(0)->data, ctx.output(0)->data, planes, w,
                        ctx.node().attr_int("count_include_pad", 0) != 0, ctx.stream());
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cuda_conv) {
  r.Register({"Conv", "", DeviceType::kCUDA, kFloatTypes, 0, ClassKernel<ConvKernel>()});
  r.Register({"FusedConv", "ai.mixtrain", DeviceType::kCUDA, kFloatTypes, 0, ClassKernel<ConvKernel>()});
  r.Register({"ConvGrad", "ai.mixtrain", DeviceType::kCUDA, kFloatTypes, 1, ClassKernel<ConvGradKernel>()});
  r.Register({"MaxPool", "", DeviceType::kCUDA, kFloatTypes, 0, FnKernel(MaxPool)});
  r.Register({"MaxPoolGrad", "ai.mixtrain", DeviceType::kCUDA, kFloatTypes, 1, FnKernel(MaxPoolGrad)});
  r.Register({"AveragePool", "", DeviceType::kCUDA, kFloatTypes, 0, FnKernel(AveragePool)});
  r.Register({"ConvTranspose", "", DeviceType::kCUDA, kFloatTypes, 0, ClassKernel<ConvTransposeKernel>()});
  r.Register({"AveragePoolGrad", "ai.mixtrain", DeviceType::kCUDA, kFloatTypes, 1, FnKernel(AveragePoolGrad)});
}

}  // namespace mixtrain::cuda
