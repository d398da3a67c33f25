// CPU kernel of ai.mixtrain.ConvGrad(dY, X, W) -> (dX, dW, dB): the input, weight and bias
// gradients of Conv (1-D/2-D/3-D, groups, strides, dilations, pads, auto_pad; attributes as the forward Conv)
// on oneDNN's convolution_backward_data and convolution_backward_weights primitives. The same
// kernel gives ConvTranspose's weight gradient with X and dY swapped (see
// passes/grad_rules_nn.cc), so it tolerates an "X" whose trailing rows no window reads (the
// geometry's floor division; oneDNN's window arithmetic is the same).
// Tensors stay in ONNX layout (NC<spatial>, OI<kernel>; a grouped W is the same bytes as
// oneDNN's G,O/G,I/G,<kernel> view); the primitives choose their own blocked layouts and the
// reorders to and from them are built with the primitives, because oneDNN's plain-layout
// backward kernels are several times slower than reorder + blocked kernel. The blocked copies
// live in the thread's scratch arena (dnnl_common.h), not in the kernel: a network's ConvGrads
// share one set of buffers the size of the largest. With channel_block = b (16 or 8: the
// training layout pass, passes/conv_layout_train.cc) dY is stored channel-blocked,
// [N, M/b, sp..., b] (oneDNN's nC<sp>16c / 8c, the layouts its AVX-512 / AVX2 backward kernels
// choose), and with input_channel_block = b so are X and dX; the reorders around the
// primitives then vanish. The bias gradient
// (optional output 2, only with dW) comes out of the backward-weights primitive, in the same
// pass over dY as dW: a separate ReduceSum read dY again (3.6 ms of a 83 ms CIFAR-CNN step).
#include <cstring>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "graph/ops/nn_geometry.h"
#include "kernels/cpu/dnnl_layout.h"
#include "kernels/cpu/grad_dnnl.h"

namespace mixtrain::cpu {
namespace {

using dnnl_util::Guard;

struct ConvGradEntry {
  dnnl::memory::desc dy_md, x_md, w_md, b_md;  // ONNX layouts, compute dtype
  dnnl::memory::desc dw_md, db_md;             // dW's and dB's: w_md's and b_md's or fp32 ones
  // convolution_backward_data (DIFF_DST, WEIGHTS -> DIFF_SRC) and _weights (DIFF_DST, SRC ->
  // DIFF_WEIGHTS, DIFF_BIAS), bound (dnnl_util::BoundPrimitive); empty when not wanted.
  dnnl_util::BoundPrimitive bwd_data, bwd_weights;
  // Reorders between our layouts and the primitives' where they differ; the primitive-side
  // memory is the primitive's argument, its buffer the call's scratch. `dy_w` is absent also
  // when the weights pass reads the data pass's copy of dY.
  std::optional<dnnl_util::BoundReorder> dy_d, w_d, dx, dy_w, x_w, dw;
  bool dy_shared = false;  // the weights pass reads dy_d's copy
};

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// `wide_dw`: dW and dB are fp32 while dY, X and W are bf16/fp16 (`params_to`).
absl::StatusOr<std::unique_ptr<ConvGradEntry>> BuildConvGrad(const KernelContext& ctx,
                                                             bool want_dx, bool want_dw,
                                                             bool want_db, bool wide_dw) {
  const TensorView& dy = *ctx.input(0);
  const TensorView& x = *ctx.input(1);
  const TensorView& w = *ctx.input(2);
  const int64_t block = ctx.node().attr_int("channel_block", 0),
                in_block = ctx.node().attr_int("input_channel_block", 0);
  if ((block != 0 && !dnnl_util::SupportedChannelBlock(block)) || (in_block != 0 && in_block != block))
    return ctx.Error(absl::StrCat("channel_block must be 0, 8 or 16 and input_channel_block 0 or "
                                  "channel_block, got ", block, " and ", in_block));
  using dnnl_util::Layout;
  const Layout dy_layout = block != 0 ? Layout::kBlocked : Layout::kChannelsFirst;
  const Layout x_layout = in_block != 0 ? Layout::kBlocked : Layout::kChannelsFirst;
  for (const auto& [t, layout, name] : {std::tuple(&dy, dy_layout, "dY"), std::tuple(&x, x_layout, "X")})
    if (layout == Layout::kBlocked && (t->dims.size() < 4 || t->dims.back() != block))
      return ctx.Error(absl::StrCat(name, " must be channel-blocked, [N, C/", block, ", spatial..., ",
                                    block, "]"));
  const std::vector<int64_t> xd = dnnl_util::LogicalDims(x.dims, x_layout);
  const std::vector<int64_t> dyd = dnnl_util::LogicalDims(dy.dims, dy_layout);
  const std::vector<int64_t>& wd = w.dims;
  if (xd.size() < 3 || xd.size() > 5)
    return ctx.Error("expects N x C x D1 [x D2 [x D3]] inputs");
  if (wd.size() != xd.size()) return ctx.Error("W and X ranks differ");
  const int64_t N = xd[0], C = xd[1], M = wd[0], G = ctx.node().attr_int("group", 1);
  if (G < 1 || C % G != 0 || M % G != 0 || wd[1] != C / G)
    return ctx.Error(absl::StrCat("channels do not match groups: X has ", C, ", W is ", wd[0],
                                  " x ", wd[1], ", group ", G));
  const std::vector<int64_t> in_sp(xd.begin() + 2, xd.end()), kernel(wd.begin() + 2, wd.end());
  MT_ASSIGN_OR_RETURN(WindowGeometry g, ForwardWindowGeometry(ctx.node(), in_sp, kernel));
  std::vector<int64_t> y_dims = {N, M};
  y_dims.insert(y_dims.end(), g.out.begin(), g.out.end());
  if (dyd.size() != xd.size() || dyd[0] != N || dyd[1] != M ||
      Product(std::vector<int64_t>(dyd.begin() + 2, dyd.end())) != Product(g.out))
    return ctx.Error("dY's shape does not match the convolution's output");
  auto dt = dnnl_util::ToDnnl(dnnl_util::ComputeType(x.dtype));
  if (!dt.ok()) return ctx.Error(std::string(dt.status().message()));
  std::vector<int64_t> dil = g.dilations;
  for (int64_t& d : dil) d -= 1;  // oneDNN counts the gaps

  auto e = std::make_unique<ConvGradEntry>();
  MT_RETURN_IF_ERROR(Guard(ctx, "building convolution backward", [&] {
    using tag = dnnl::memory::format_tag;
    const auto any = [&](const std::vector<int64_t>& d) {
      return dnnl::memory::desc(dnnl_util::ToDims(d), *dt, tag::any);
    };
    const std::vector<int64_t> w_dims = GroupedWeightDims(wd, G);
    e->dy_md = dnnl_util::ActivationDesc(y_dims, *dt, dy_layout, block);
    e->x_md = dnnl_util::ActivationDesc(xd, *dt, x_layout, block);
    e->w_md = dnnl_util::PlainDesc(w_dims, *dt);
    e->b_md = dnnl_util::PlainDesc(std::vector<int64_t>{M}, *dt);
    const dnnl::memory::data_type dw_dt = wide_dw ? dnnl::memory::data_type::f32 : *dt;
    e->dw_md = dnnl_util::PlainDesc(w_dims, dw_dt);
    e->db_md = dnnl_util::PlainDesc(std::vector<int64_t>{M}, dw_dt);
    const auto strides = dnnl_util::ToDims(g.strides), dils = dnnl_util::ToDims(dil),
               pl = dnnl_util::ToDims(g.pads_begin), pr = dnnl_util::ToDims(g.pads_end_effective);
    const dnnl::memory::desc x_any = any(xd), w_any = any(w_dims), y_any = any(y_dims);
    const dnnl::memory::desc no_bias;
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, x_any, w_any,
                                       want_db ? e->b_md : no_bias, y_any, strides, dils, pl, pr);
    dnnl::convolution_forward::primitive_desc hint(fd, dnnl_util::Attr(), dnnl_util::Engine());
    // A reorder from our layout `user` to the primitive's `want` (or back for outputs), or none.
    const auto copy = [](std::optional<dnnl_util::BoundReorder>& r, const dnnl::memory::desc& user,
                         const dnnl::memory::desc& want, bool output) -> dnnl::memory {
      if (user == want) return dnnl_util::Unbound(user);
      if (output) {
        r.emplace(want, user);
        return r->from();
      }
      r.emplace(user, want);
      return r->to();
    };
    std::optional<dnnl::memory> dy_data;  // dY as the data pass reads it
    if (want_dx) {
      dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, x_any, w_any,
                                              y_any, strides, dils, pl, pr);
      dnnl::convolution_backward_data::primitive_desc pd(d, dnnl_util::Attr(), dnnl_util::Engine(), hint);
      e->bwd_data = dnnl_util::BoundPrimitive(dnnl::convolution_backward_data(pd));
      dy_data = e->bwd_data.Arg(DNNL_ARG_DIFF_DST, copy(e->dy_d, e->dy_md, pd.diff_dst_desc(), false));
      e->bwd_data.Arg(DNNL_ARG_WEIGHTS, copy(e->w_d, e->w_md, pd.weights_desc(), false));
      e->bwd_data.Arg(DNNL_ARG_DIFF_SRC, copy(e->dx, e->x_md, pd.diff_src_desc(), true));
    }
    if (want_dw) {
      const dnnl::memory::desc dw_any(dnnl_util::ToDims(w_dims), dw_dt, tag::any);
      dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, x_any,
                                                 dw_any, want_db ? e->db_md : no_bias, y_any,
                                                 strides, dils, pl, pr);
      dnnl::convolution_backward_weights::primitive_desc pd(d, dnnl_util::Attr(), dnnl_util::Engine(), hint);
      e->bwd_weights = dnnl_util::BoundPrimitive(dnnl::convolution_backward_weights(pd));
      e->dy_shared = dy_data && e->dy_d && dy_data->get_desc() == pd.diff_dst_desc();
      e->bwd_weights.Arg(DNNL_ARG_DIFF_DST, e->dy_shared ? *dy_data
                                                         : copy(e->dy_w, e->dy_md, pd.diff_dst_desc(), false));
      e->bwd_weights.Arg(DNNL_ARG_SRC, copy(e->x_w, e->x_md, pd.src_desc(), false));
      e->bwd_weights.Arg(DNNL_ARG_DIFF_WEIGHTS, copy(e->dw, e->dw_md, pd.diff_weights_desc(), true));
      if (want_db) e->bwd_weights.Arg(DNNL_ARG_DIFF_BIAS, e->db_md);
    }
  }));
  return e;
}

// Points the primitive's argument `arg` at our buffer `p`, or, when a reorder stands between,
// the reorder's user side at `p` and its primitive side at new scratch; for inputs
// the reorder runs now, for outputs the caller runs it after the primitive.
void BindOperand(dnnl_util::BoundPrimitive& prim, int arg,
                 std::optional<dnnl_util::BoundReorder>& r, void* p, bool output) {
  if (!r) {
    dnnl_util::Bind(prim.at(arg), p);
    return;
  }
  dnnl::memory& user = output ? r->to() : r->from();
  dnnl::memory& mine = output ? r->from() : r->to();
  dnnl_util::Bind(user, p);
  dnnl_util::Bind(mine, dnnl_util::TakeScratch(mine.get_desc().get_size()));
  if (!output) r->Execute();
}

class ConvGradKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* dy = ctx.input(0);
    const TensorView* x = ctx.input(1);
    const TensorView* w = ctx.input(2);
    TensorView* dx = ctx.output(0);
    TensorView* dw = ctx.output(1);
    TensorView* db = ctx.output(2);
    if (!dy || !x || !w) return ctx.Error("needs inputs dY, X and W");
    // dW and dB may be fp32 from low-precision operands (`params_to`); every other dtype is X's.
    const bool wide_dw = IsLowFloat(x->dtype) && ((dw && dw->dtype == DType::kF32) || (db && db->dtype == DType::kF32));
    for (const TensorView* t : {dy, w, static_cast<const TensorView*>(dx)})
      if (t && t->dtype != x->dtype) return ctx.Error("dY, X, W, dX, dW and dB dtypes differ");
    for (const TensorView* t : {static_cast<const TensorView*>(dw), static_cast<const TensorView*>(db)})
      if (t && t->dtype != (wide_dw ? DType::kF32 : x->dtype))
        return ctx.Error("dY, X, W, dX, dW and dB dtypes differ");
    if (dx && dx->dims != x->dims) return ctx.Error("dX must have X's shape");
    if (dw && dw->dims != w->dims) return ctx.Error("dW must have W's shape");
    if (db && !dw) return ctx.Error("dB comes with dW only");
    if (db && (db->rank() != 1 || w->rank() < 1 || db->dims[0] != w->dims[0]))
      return ctx.Error("dB must be a vector of W's output channels");
    std::vector<int64_t>& key = key_;
    dnnl_util::ShapeKey(ctx, &key);
    key.push_back(dx != nullptr);
    key.push_back(dw != nullptr);
    key.push_back(db != nullptr);
    ConvGradEntry* e = cache_.Find(key);
    if (e == nullptr) {
      MT_ASSIGN_OR_RETURN(auto built, BuildConvGrad(ctx, dx != nullptr, dw != nullptr, db != nullptr, wide_dw));
      e = cache_.Insert(key, std::move(built));
    }
    if (dy->numel() == 0 || x->numel() == 0) {  // empty batch or channels: zero gradients
      for (TensorView* t : {dx, dw, db})
        if (t) std::memset(t->data, 0, t->numel() * DTypeSize(t->dtype));
      return absl::OkStatus();
    }
    staging_.Begin();
    void* dyp = const_cast<void*>(staging_.Input(*dy));
    void* xp = dw ? const_cast<void*>(staging_.Input(*x)) : nullptr;
    void* wp = dx ? const_cast<void*>(staging_.Input(*w)) : nullptr;
    void* dxp = dx ? staging_.Output(*dx) : nullptr;
    void* dwp = dw ? staging_.Output(*dw) : nullptr;
    void* dbp = db ? staging_.Output(*db) : nullptr;
    MT_RETURN_IF_ERROR(Guard(ctx, "running convolution backward", [&] {
      if (e->bwd_data) {
        BindOperand(e->bwd_data, DNNL_ARG_DIFF_DST, e->dy_d, dyp, false);
        BindOperand(e->bwd_data, DNNL_ARG_WEIGHTS, e->w_d, wp, false);
        BindOperand(e->bwd_data, DNNL_ARG_DIFF_SRC, e->dx, dxp, true);
        e->bwd_data.Execute();
        if (e->dx) e->dx->Execute();
      }
      if (e->bwd_weights) {
        if (!e->dy_shared) BindOperand(e->bwd_weights, DNNL_ARG_DIFF_DST, e->dy_w, dyp, false);
        BindOperand(e->bwd_weights, DNNL_ARG_SRC, e->x_w, xp, false);
        BindOperand(e->bwd_weights, DNNL_ARG_DIFF_WEIGHTS, e->dw, dwp, true);
        if (dbp) dnnl_util::Bind(e->bwd_weights.at(DNNL_ARG_DIFF_BIAS), dbp);
        e->bwd_weights.Execute();
        if (e->dw) e->dw->Execute();
      }
      dnnl_util::Stream().wait();
    }));
    staging_.Finish();
    return absl::OkStatus();
  }

 private:
  dnnl_util::ShapeCache<ConvGradEntry> cache_;
  std::vector<int64_t> key_;  // the last call's cache key (its capacity reused)
  dnnl_util::Fp32Staging staging_;
};

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_conv) {
  r.Register({"ConvGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              [](const Node&) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                return std::unique_ptr<OpKernel>(new ConvGradKernel());
              }});
}

}  // namespace mixtrain::cpu
