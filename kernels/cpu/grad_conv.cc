// CPU kernel of ai.mixtrain.ConvGrad(dY, X, W) -> (dX, dW, dB): the input, weight and bias
// gradients of Conv (1-D/2-D/3-D, groups, strides, dilations, pads, auto_pad; attributes as the forward Conv)
// on oneDNN's convolution_backward_data and convolution_backward_weights primitives. The same
// kernel gives ConvTranspose's weight gradient with X and dY swapped (see
// passes/grad_rules_nn.cc), so it tolerates an "X" whose trailing rows no window reads (the
// geometry's floor division; oneDNN's window arithmetic is the same).
// Tensors stay in ONNX layout (NC<spatial>, OI<kernel>; a grouped W is the same bytes as
// oneDNN's G,O/G,I/G,<kernel> view); the primitives choose their own blocked layouts and the
// reorders to and from them are cached with the primitives, because oneDNN's plain-layout
// backward kernels are several times slower than reorder + blocked kernel. The bias gradient
// (optional output 2, only with dW) comes out of the backward-weights primitive, in the same
// pass over dY as dW: a separate ReduceSum read dY again (3.6 ms of a 83 ms CIFAR-CNN step).
#include <cstring>
#include <optional>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "graph/ops/nn_geometry.h"
#include "kernels/cpu/grad_dnnl.h"

namespace mixtrain::cpu {
namespace {

using dnnl_util::Guard;

struct ConvGradEntry {
  dnnl::memory::desc dy_md, x_md, w_md, b_md;  // ONNX layouts, compute dtype
  std::optional<dnnl::convolution_backward_data::primitive_desc> data_pd;
  std::optional<dnnl::convolution_backward_weights::primitive_desc> weights_pd;
  std::optional<dnnl::convolution_backward_data> bwd_data;
  std::optional<dnnl::convolution_backward_weights> bwd_weights;
};

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

absl::StatusOr<std::unique_ptr<ConvGradEntry>> BuildConvGrad(const KernelContext& ctx,
                                                             bool want_dx, bool want_dw,
                                                             bool want_db) {
  const TensorView& dy = *ctx.input(0);
  const TensorView& x = *ctx.input(1);
  const TensorView& w = *ctx.input(2);
  const std::vector<int64_t>& xd = x.dims;
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
  if (dy.dims.size() != xd.size() || dy.dims[0] != N || dy.dims[1] != M ||
      Product(std::vector<int64_t>(dy.dims.begin() + 2, dy.dims.end())) != Product(g.out))
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
    e->dy_md = dnnl_util::PlainDesc(y_dims, *dt);
    e->x_md = dnnl_util::PlainDesc(xd, *dt);
    e->w_md = dnnl_util::PlainDesc(w_dims, *dt);
    e->b_md = dnnl_util::PlainDesc(std::vector<int64_t>{M}, *dt);
    const auto strides = dnnl_util::ToDims(g.strides), dils = dnnl_util::ToDims(dil),
               pl = dnnl_util::ToDims(g.pads_begin), pr = dnnl_util::ToDims(g.pads_end_effective);
    const dnnl::memory::desc x_any = any(xd), w_any = any(w_dims), y_any = any(y_dims);
    const dnnl::memory::desc no_bias;
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, x_any, w_any,
                                       want_db ? e->b_md : no_bias, y_any, strides, dils, pl, pr);
    dnnl::convolution_forward::primitive_desc hint(fd, dnnl_util::Engine());
    if (want_dx) {
      dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, x_any, w_any,
                                              y_any, strides, dils, pl, pr);
      e->data_pd.emplace(d, dnnl_util::Engine(), hint);
      e->bwd_data.emplace(*e->data_pd);
    }
    if (want_dw) {
      dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, x_any,
                                                 w_any, want_db ? e->b_md : no_bias, y_any,
                                                 strides, dils, pl, pr);
      e->weights_pd.emplace(d, dnnl_util::Engine(), hint);
      e->bwd_weights.emplace(*e->weights_pd);
    }
  }));
  return e;
}

// A user buffer in ONNX layout as the memory `want` describes: the buffer itself when the
// layouts agree, else a reordered copy in `scratch` (reused across calls).
dnnl::memory AsLayout(const dnnl::memory::desc& user, void* data, const dnnl::memory::desc& want,
                      std::optional<dnnl::memory>& scratch) {
  dnnl::engine& eng = dnnl_util::Engine();
  dnnl::memory m(user, eng, data);
  if (user == want) return m;
  if (!scratch || scratch->get_desc() != want) scratch.emplace(want, eng);
  dnnl::reorder(m, *scratch).execute(dnnl_util::Stream(), m, *scratch);
  return *scratch;
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
    for (const TensorView* t : {dy, w, static_cast<const TensorView*>(dx),
                                static_cast<const TensorView*>(dw), static_cast<const TensorView*>(db)})
      if (t && t->dtype != x->dtype) return ctx.Error("dY, X, W, dX, dW and dB dtypes differ");
    if (dx && dx->dims != x->dims) return ctx.Error("dX must have X's shape");
    if (dw && dw->dims != w->dims) return ctx.Error("dW must have W's shape");
    if (db && !dw) return ctx.Error("dB comes with dW only");
    if (db && (db->rank() != 1 || w->rank() < 1 || db->dims[0] != w->dims[0]))
      return ctx.Error("dB must be a vector of W's output channels");
    std::vector<int64_t> key = dnnl_util::ShapeKey(ctx);
    key.push_back(dx != nullptr);
    key.push_back(dw != nullptr);
    key.push_back(db != nullptr);
    ConvGradEntry* e = cache_.Find(key);
    if (e == nullptr) {
      MT_ASSIGN_OR_RETURN(auto built, BuildConvGrad(ctx, dx != nullptr, dw != nullptr, db != nullptr));
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
      dnnl::engine& eng = dnnl_util::Engine();
      dnnl::stream& s = dnnl_util::Stream();
      std::optional<dnnl::memory> dym_data;  // dY as the data gradient read it
      if (e->bwd_data) {
        const auto& pd = *e->data_pd;
        dym_data = AsLayout(e->dy_md, dyp, pd.diff_dst_desc(), dy_scratch_);
        dnnl::memory wm = AsLayout(e->w_md, wp, pd.weights_desc(), w_scratch_);
        dnnl::memory dxm(e->x_md, eng, dxp);
        const bool direct = pd.diff_src_desc() == e->x_md;
        if (!direct && (!dx_scratch_ || dx_scratch_->get_desc() != pd.diff_src_desc()))
          dx_scratch_.emplace(pd.diff_src_desc(), eng);
        dnnl::memory out = direct ? dxm : *dx_scratch_;
        e->bwd_data->execute(s, {{DNNL_ARG_DIFF_DST, *dym_data}, {DNNL_ARG_WEIGHTS, wm},
                                 {DNNL_ARG_DIFF_SRC, out}});
        if (!direct) dnnl::reorder(out, dxm).execute(s, out, dxm);
      }
      if (e->bwd_weights) {
        const auto& pd = *e->weights_pd;
        dnnl::memory dym = dym_data && dym_data->get_desc() == pd.diff_dst_desc()
                               ? *dym_data
                               : AsLayout(e->dy_md, dyp, pd.diff_dst_desc(), dyw_scratch_);
        dnnl::memory xm = AsLayout(e->x_md, xp, pd.src_desc(), x_scratch_);
        dnnl::memory dwm(e->w_md, eng, dwp);
        const bool direct = pd.diff_weights_desc() == e->w_md;
        if (!direct && (!dw_scratch_ || dw_scratch_->get_desc() != pd.diff_weights_desc()))
          dw_scratch_.emplace(pd.diff_weights_desc(), eng);
        dnnl::memory out = direct ? dwm : *dw_scratch_;
        std::unordered_map<int, dnnl::memory> args = {
            {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_WEIGHTS, out}};
        if (dbp) args.emplace(DNNL_ARG_DIFF_BIAS, dnnl::memory(e->b_md, eng, dbp));
        e->bwd_weights->execute(s, args);
        if (!direct) dnnl::reorder(out, dwm).execute(s, out, dwm);
      }
      s.wait();
    }));
    staging_.Finish();
    return absl::OkStatus();
  }

 private:
  dnnl_util::ShapeCache<ConvGradEntry> cache_;
  dnnl_util::Fp32Staging staging_;
  // Blocked-layout copies of the operands, reused while the shapes stay.
  std::optional<dnnl::memory> dy_scratch_, dyw_scratch_, x_scratch_, w_scratch_, dx_scratch_, dw_scratch_;
};

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_conv) {
  r.Register({"ConvGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              [](const Node&) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                return std::unique_ptr<OpKernel>(new ConvGradKernel());
              }});
}

}  // namespace mixtrain::cpu
