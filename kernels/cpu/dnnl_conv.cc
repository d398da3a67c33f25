// Conv, ConvTranspose and ai.mixtrain FusedConv (1-D, 2-D, 3-D; groups incl. depthwise,
// strides, pads, dilations, auto_pad, output_padding/output_shape, optional bias) on oneDNN's
// convolution and deconvolution primitives, fp32 and bf16 natively, fp16 staged through fp32.
// Weights stay in ONNX layout (OI<kernel>): a grouped conv's are the same bytes as oneDNN's
// G,O/G,I/G,<kernel> view, and ConvTranspose's [C_in, C_out/G, k] weights are described by
// strides. X and Y are NC<spatial>, or, for a FusedConv, N<spatial>C (channels_last) or
// NC/16<spatial>16c (channel_block; X may stay NC<spatial>, an image's first conv): the inference
// layout pass's choices, which oneDNN's fastest direct kernels read and write without reorders.
// The blocked layout also admits oneDNN's Winograd kernel for fp32 3x3 stride-1 convs, which
// this uses when the weights are constant. FusedConv's epilogue act(conv + B + Z) runs as
// oneDNN post-ops (sum, eltwise). A FusedConv with a folded max pool (pool_kernel_shape) runs
// kernels/cpu/conv_pool.cc instead.
#include <algorithm>
#include <cstring>
#include <optional>

#include "graph/check.h"
#include "graph/ops/nn_geometry.h"
#include "kernels/cpu/conv_pool.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/dnnl_layout.h"

namespace mixtrain {
namespace {

using dnnl_util::ActivationDesc;
using dnnl_util::Fp32Staging;
using dnnl_util::Guard;
using dnnl_util::Layout;
using dnnl_util::ShapeCache;
using dnnl_util::ShapeKey;

// What a FusedConv adds to a Conv; a plain Conv is the default (no Z, no activation, NC<sp>).
struct ConvFusion {
  Layout x_layout = Layout::kChannelsFirst;
  Layout y_layout = Layout::kChannelsFirst;  // also Z's
  int64_t block = dnnl_util::kChannelBlock;  // of the blocked layouts: 16 or 8
  bool has_z = false;
  bool has_act = false;
  dnnl::algorithm act = dnnl::algorithm::eltwise_relu;
  float alpha = 0, beta = 0;
};

absl::StatusOr<ConvFusion> ReadFusion(const KernelContext& ctx) {
  ConvFusion f;
  const Node& node = ctx.node();
  if (node.op_type() != "FusedConv") return f;
  const int64_t block = node.attr_int("channel_block", 0),
                in_block = node.attr_int("input_channel_block", 0);
  for (int64_t b : {block, in_block})
    if (b != 0 && !dnnl_util::SupportedChannelBlock(b))
      return ctx.Error(absl::StrCat("channel blocks other than 16 and 8 are not supported, got ", b));
  if (in_block != 0 && in_block != block)
    return ctx.Error("input_channel_block must be 0 or channel_block");
  if (block != 0) f.block = block;
  if (node.attr_int("channels_last", 0) != 0) {
    if (block != 0 || in_block != 0)
      return ctx.Error("channels_last and channel_block exclude each other");
    f.x_layout = f.y_layout = Layout::kChannelsLast;
  } else if (block != 0) {
    f.y_layout = Layout::kBlocked;
    if (in_block != 0) f.x_layout = Layout::kBlocked;
  } else if (in_block != 0) {
    return ctx.Error("input_channel_block needs channel_block");
  }
  f.has_z = ctx.input(3) != nullptr;
  const std::string act = node.attr_string("activation", "");
  const std::vector<float> p = node.attr_floats("activation_params");
  if (act.empty()) return f;
  f.has_act = true;
  if (act == "Relu") {
    f.act = dnnl::algorithm::eltwise_relu;
  } else if (act == "LeakyRelu") {
    f.act = dnnl::algorithm::eltwise_relu;
    f.alpha = p.empty() ? 0.01f : p[0];
  } else if (act == "Sigmoid") {
    f.act = dnnl::algorithm::eltwise_logistic;
  } else if (act == "Tanh") {
    f.act = dnnl::algorithm::eltwise_tanh;
  } else if (act == "Clip") {
    if (p.size() != 2) return ctx.Error("Clip activation needs activation_params [min, max]");
    f.act = dnnl::algorithm::eltwise_clip;
    f.alpha = p[0];
    f.beta = p[1];
  } else {
    return ctx.Error(absl::StrCat("unsupported activation '", act, "'"));
  }
  return f;
}

struct ConvEntry {
  dnnl_util::BoundPrimitive prim;  // SRC, WEIGHTS, DST and BIAS when there is one
  dnnl::memory::desc x_md, w_md, b_md, y_md;
  bool has_bias = false;
  std::vector<int64_t> y_dims;
  // ConvTranspose whose output extends past the last position any input reaches (negative end
  // crop): the primitive writes the reachable [.., out_reach] box into `tmp`, the rest is bias.
  std::vector<int64_t> reach_dims;  // empty when the primitive writes Y directly
  std::vector<float> tmp;           // fp32-sized scratch, reinterpreted for bf16
  // Forward Conv lets oneDNN pick its layouts (format `any`): on plain NCHW it falls back to
  // im2col + GEMM, which is slower than its blocked direct kernels (and gains nothing from
  // bf16's dot-product instructions). Operands whose chosen layout differs from ONNX's go
  // through a reorder into a buffer of the primitive's layout (and Y back out). The weights are
  // reordered on every call (a training step changes them) unless they are constant. X's and
  // Y's copies are the call's scratch (dnnl_common.h); the weights' in `own`, which keeps constant
  // weights reordered once.
  struct Blocked {
    Blocked(const dnnl::memory::desc& from, const dnnl::memory::desc& to) : copy(from, to) {}
    dnnl_util::BoundReorder copy;  // plain -> primitive's layout (inputs), or back (Y)
    std::vector<uint8_t> own;
  };
  std::unique_ptr<Blocked> bx, bw, by;
  // Z into the blocked Y buffer, which the sum post-op accumulates onto.
  std::unique_ptr<Blocked> bz;
  bool w_packed = false;  // bw->own holds the constant weights already
};

// A reorder between our plain buffer and the primitive's layout when they differ.
std::unique_ptr<ConvEntry::Blocked> MakeBlocked(const dnnl::memory::desc& plain,
                                                const dnnl::memory::desc& prim, bool output) {
  if (plain == prim) return nullptr;
  return output ? std::make_unique<ConvEntry::Blocked>(prim, plain)
                : std::make_unique<ConvEntry::Blocked>(plain, prim);
}

// Binds the primitive's arguments: the blocked copies' primitive-side memories where there
// are copies, else memories of our plain buffers.
void BindConvArgs(ConvEntry* e) {
  using dnnl_util::Unbound;
  e->prim.Arg(DNNL_ARG_SRC, e->bx ? e->bx->copy.to() : Unbound(e->x_md));
  e->prim.Arg(DNNL_ARG_WEIGHTS, e->bw ? e->bw->copy.to() : Unbound(e->w_md));
  e->prim.Arg(DNNL_ARG_DST, e->by ? e->by->copy.from() : Unbound(e->y_md));
  if (e->has_bias) e->prim.Arg(DNNL_ARG_BIAS, e->b_md);
  if (e->bw) {
    e->bw->own.resize(e->bw->copy.to().get_desc().get_size());
    dnnl_util::Bind(e->bw->copy.to(), e->bw->own.data());
  }
}

int64_t Product(std::span<const int64_t> v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// What BuildConv reads off the node and its operands: X's logical dims (after undoing a
// channels-last or blocked layout), group, channels, kernel, window geometry.
struct ConvShape {
  TensorView x;  // logical [N, C, sp...]
  int64_t group = 1, n = 0, c = 0, m = 0;  // m: output channels
  std::vector<int64_t> kernel;
  WindowGeometry g;
};

absl::StatusOr<ConvShape> ReadConvShape(const KernelContext& ctx, bool transposed, const ConvFusion& f) {
  const Node& node = ctx.node();
  ConvShape s;
  TensorView& x = s.x;
  x = *ctx.input(0);
  if (f.x_layout == Layout::kChannelsLast) {
    if (x.rank() < 3) return ctx.Error("channels_last X must be [N, spatial..., C]");
    x.dims = dnnl_util::ChannelsFirst(x.dims);
  } else if (f.x_layout == Layout::kBlocked) {
    if (x.rank() < 4 || x.dims.back() != f.block)
      return ctx.Error(absl::StrCat("channel-blocked X must be [N, C/", f.block, ", spatial..., ",
                                    f.block, "]"));
    x.dims = dnnl_util::UnblockedDims(x.dims);
  }
  const TensorView& w = *ctx.input(1);
  const TensorView* b = ctx.input(2);
  if (x.rank() < 3 || x.rank() > 5)
    return ctx.Error(absl::StrCat("X must be [N, C, spatial...] with 1 to 3 spatial dims, got rank ",
                                  x.rank()));
  if (w.rank() != x.rank()) return ctx.Error("W and X differ in rank");
  s.group = node.attr_int("group", 1);
  s.n = x.dims[0];
  s.c = x.dims[1];
  std::vector<int64_t> in_sp(x.dims.begin() + 2, x.dims.end());
  s.kernel.assign(w.dims.begin() + 2, w.dims.end());
  if (node.has_attr("kernel_shape") && node.attr_ints("kernel_shape") != s.kernel)
    return ctx.Error("kernel_shape does not match W");
  if (s.group < 1 || s.c % s.group != 0) return ctx.Error(absl::StrCat("bad group ", s.group));
  s.m = transposed ? w.dims[1] * s.group : w.dims[0];
  if (transposed ? w.dims[0] != s.c : w.dims[1] * s.group != s.c || s.m % s.group != 0)
    return ctx.Error(absl::StrCat("X has ", s.c, " channels, which W and group ", s.group,
                                  " do not fit"));
  if (b != nullptr && (b->rank() != 1 || b->dims[0] != s.m))
    return ctx.Error(absl::StrCat("bias must be [", s.m, "]"));
  MT_ASSIGN_OR_RETURN(s.g, transposed ? TransposedWindowGeometry(node, in_sp, s.kernel)
                                      : ForwardWindowGeometry(node, in_sp, s.kernel));
  return s;
}

// The weights as oneDNN sees them: logical [G,] O, I, k...; ONNX bytes are [O, I/G, k] (Conv)
// or [I, O/G, k] (ConvTranspose). Returns (dims, strides).
std::pair<std::vector<int64_t>, std::vector<int64_t>> WeightLayout(const ConvShape& s, const TensorView& w,
                                                                   bool transposed) {
  const int64_t kprod = Product(s.kernel);
  std::vector<int64_t> w_dims, w_strides;
  if (transposed) {
    const int64_t og = s.m / s.group, ig = s.c / s.group;
    w_dims = {og, ig};
    w_strides = {kprod, og * kprod};
    if (s.group > 1) {
      w_dims.insert(w_dims.begin(), s.group);
      w_strides.insert(w_strides.begin(), ig * og * kprod);
    }
    std::vector<int64_t> ks = dnnl_util::DenseStrides(s.kernel);
    w_dims.insert(w_dims.end(), s.kernel.begin(), s.kernel.end());
    w_strides.insert(w_strides.end(), ks.begin(), ks.end());
  } else {
    w_dims = w.dims;
    if (s.group > 1) {
      w_dims[0] = s.m / s.group;
      w_dims.insert(w_dims.begin(), s.group);
    }
    w_strides = dnnl_util::DenseStrides(w_dims);
  }
  return {w_dims, w_strides};
}

// The forward convolution primitive for e's descriptors, with its layout choice (see inside),
// post-ops and Winograd where it pays; fills e->prim and the reorders to and from its layouts.
void MakeConvPrimitive(const KernelContext& ctx, const ConvShape& s, const ConvFusion& f,
                       dnnl::memory::data_type dt, const std::vector<int64_t>& dil,
                       const std::vector<int64_t>& pad_r, ConvEntry* e) {
  const auto strides = dnnl_util::ToDims(s.g.strides), dils = dnnl_util::ToDims(dil),
             pl = dnnl_util::ToDims(s.g.pads_begin), pr = dnnl_util::ToDims(pad_r);
  const auto prop = dnnl::prop_kind::forward_inference;
  // With few input channels per group (an image's first layer) X stays plain: oneDNN's
  // first-layer kernels read plain NCHW and write a blocked Y, which is reordered back. The
  // plain GEMM it would otherwise choose is far slower at two threads (fashion_cnn's 1->32
  // conv, batch 64: 4.5 ms vs 0.55 ms with the reorder; CIFAR's 3->32 at batch 256: 27 ms
  // vs 5 ms; AVX-512, fp32). The 32->64 conv: 3.8 ms plain vs 2.6 + 0.6 ms blocked.
  // Channels-last X and Y are what oneDNN's brgconv kernels read and write (fashion_cnn's
  // convs: 0.15 + 0.96 ms vs 2.9 ms above), so only the weights get its layout then; the
  // same for channel-blocked X and Y (its jit kernels' own layout).
  using tag = dnnl::memory::format_tag;
  const bool blocked = s.c / s.group >= 4;
  const bool chosen = f.x_layout != Layout::kChannelsFirst || f.y_layout != Layout::kChannelsFirst;
  const bool fixed_x = chosen || !blocked, fixed_y = chosen;
  const auto pick = [&](const dnnl::memory::desc& md, bool fixed) {
    return fixed ? md : dnnl::memory::desc(md.dims(), dt, tag::any);
  };
  dnnl::post_ops ops;
  if (f.has_z) ops.append_sum(1.0f);
  if (f.has_act) ops.append_eltwise(1.0f, f.act, f.alpha, f.beta);
  dnnl::primitive_attr attr = dnnl_util::Attr();
  attr.set_post_ops(ops);
  const auto make_pd = [&](dnnl::algorithm alg) {
    dnnl::convolution_forward::desc d(prop, alg, pick(e->x_md, fixed_x), pick(e->w_md, false), e->b_md,
                                      pick(e->y_md, fixed_y), strides, dils, pl, pr);
    return dnnl::convolution_forward::primitive_desc(d, attr, dnnl_util::Engine());
  };
  // Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3, only for fp32 on blocked X and Y) does
  // ~2.2x fewer multiplications than the direct conv: fashion_cnn's 32->64 conv at batch
  // 64 takes 0.70 instead of 0.97 ms. It reorders the weights into transformed tiles,
  // worth it only when they are constant. Its error is a few times the direct conv's
  // (tests/kernels/fused_conv_test.cc measures and bounds it).
  std::optional<dnnl::convolution_forward::primitive_desc> wino;
  const bool unit = std::all_of(s.g.strides.begin(), s.g.strides.end(), [](int64_t v) { return v == 1; }) &&
                    std::all_of(dil.begin(), dil.end(), [](int64_t d) { return d == 0; });
  if (dt == dnnl::memory::data_type::f32 && f.x_layout == Layout::kBlocked &&
      f.y_layout == Layout::kBlocked && s.group == 1 && unit &&
      s.kernel == std::vector<int64_t>{3, 3} && ctx.input_constant(1)) {
    try {
      wino = make_pd(dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error&) {
      // No Winograd kernel for this shape or CPU: the direct one below.
    }
  }
  const dnnl::convolution_forward::primitive_desc pd = wino ? *wino : make_pd(dnnl::algorithm::convolution_direct);
  e->prim = dnnl_util::BoundPrimitive(dnnl::convolution_forward(pd));
  e->bx = MakeBlocked(e->x_md, pd.src_desc(), false);
  e->bw = MakeBlocked(e->w_md, pd.weights_desc(), false);
  e->by = MakeBlocked(e->y_md, pd.dst_desc(), true);
  if (f.has_z && e->by) e->bz = MakeBlocked(e->y_md, pd.dst_desc(), false);
  BindConvArgs(e);
}

absl::StatusOr<std::unique_ptr<ConvEntry>> BuildConv(const KernelContext& ctx, bool transposed,
                                                     const ConvFusion& f) {
  MT_ASSIGN_OR_RETURN(ConvShape s, ReadConvShape(ctx, transposed, f));
  const TensorView* b = ctx.input(2);
  auto dt_or = dnnl_util::ToDnnl(dnnl_util::ComputeType(s.x.dtype));
  if (!dt_or.ok()) return ctx.Error(std::string(dt_or.status().message()));
  const dnnl::memory::data_type dt = *dt_or;

  auto e = std::make_unique<ConvEntry>();
  e->has_bias = b != nullptr;
  std::vector<int64_t>& y_dims = e->y_dims;
  y_dims = {s.n, s.m};
  y_dims.insert(y_dims.end(), s.g.out.begin(), s.g.out.end());
  // A transposed conv whose end pads are negative crops: the primitive computes the reachable
  // box (reach_dims) into a scratch buffer, and the rest of Y is the bias.
  std::vector<int64_t> pad_r = s.g.pads_end_effective;
  if (transposed && std::any_of(pad_r.begin(), pad_r.end(), [](int64_t p) { return p < 0; })) {
    e->reach_dims = y_dims;
    for (size_t i = 0; i < pad_r.size(); ++i) {
      if (pad_r[i] < 0) e->reach_dims[2 + i] += pad_r[i];
      pad_r[i] = std::max<int64_t>(pad_r[i], 0);
    }
    e->tmp.resize(Product(e->reach_dims));
  }
  std::vector<int64_t> dil(s.g.dilations);
  for (int64_t& d : dil) d -= 1;  // oneDNN counts the gaps

  // Not a structured binding: clang before 16 cannot capture one in the lambda below.
  const auto w_layout = WeightLayout(s, *ctx.input(1), transposed);
  const std::vector<int64_t>& w_dims = w_layout.first;
  const std::vector<int64_t>& w_strides = w_layout.second;
  const std::vector<int64_t> y_prim_dims = e->reach_dims.empty() ? y_dims : e->reach_dims;
  if (f.y_layout == Layout::kBlocked && s.m % f.block != 0)
    return ctx.Error(absl::StrCat("channel-blocked Y needs output channels in multiples of ",
                                  f.block, ", got ", s.m));
  y_dims = dnnl_util::StoredDims(y_dims, f.y_layout, f.block);
  if (const TensorView* z = ctx.input(3); f.has_z && z->dims != y_dims)
    return ctx.Error("Z must have Y's shape");
  MT_RETURN_IF_ERROR(Guard(ctx, transposed ? "building deconvolution" : "building convolution", [&] {
    e->x_md = ActivationDesc(s.x.dims, dt, f.x_layout, f.block);
    e->w_md = dnnl_util::StridedDesc(w_dims, w_strides, dt);
    e->y_md = ActivationDesc(y_prim_dims, dt, f.y_layout, f.block);
    e->b_md = e->has_bias ? dnnl_util::PlainDesc(b->dims, dt) : dnnl::memory::desc();
    if (!transposed) {
      MakeConvPrimitive(ctx, s, f, dt, dil, pad_r, e.get());
      return;
    }
    dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                        e->x_md, e->w_md, e->b_md, e->y_md, dnnl_util::ToDims(s.g.strides),
                                        dnnl_util::ToDims(dil), dnnl_util::ToDims(s.g.pads_begin),
                                        dnnl_util::ToDims(pad_r));
    e->prim = dnnl_util::BoundPrimitive(
        dnnl::deconvolution_forward(dnnl::deconvolution_forward::primitive_desc(d, dnnl_util::Attr(), dnnl_util::Engine())));
    BindConvArgs(e.get());
  }));
  return e;
}

// Y[n, c, ...] = bias[c] (or 0) everywhere, then the primitive's reachable box copied in.
void ScatterReach(const ConvEntry& e, const void* bias, void* y, const std::vector<int64_t>& y_dims,
                  size_t elem) {
  const int64_t inner = Product(std::span(y_dims).subspan(2));
  auto* yb = static_cast<uint8_t*>(y);
  for (int64_t nc = 0; nc < y_dims[0] * y_dims[1]; ++nc) {
    uint8_t* plane = yb + nc * inner * elem;
    if (bias == nullptr) {
      std::memset(plane, 0, inner * elem);
    } else {
      const uint8_t* bv = static_cast<const uint8_t*>(bias) + (nc % y_dims[1]) * elem;
      for (int64_t i = 0; i < inner; ++i) std::memcpy(plane + i * elem, bv, elem);
    }
  }
  // Rows of the reach box (all dims but the last) map to rows of Y.
  const std::vector<int64_t>& r = e.reach_dims;
  const std::vector<int64_t> ys = dnnl_util::DenseStrides(y_dims);
  const int64_t rows = Product(std::span(r).first(r.size() - 1));
  const auto* src = reinterpret_cast<const uint8_t*>(e.tmp.data());
  std::vector<int64_t> idx(r.size() - 1, 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * ys[d];
    std::memcpy(yb + off * elem, src + row * r.back() * elem, r.back() * elem);
    for (int64_t d = static_cast<int64_t>(idx.size()) - 1; d >= 0; --d) {
      if (++idx[d] < r[d]) break;
      idx[d] = 0;
    }
  }
}

class ConvKernel final : public OpKernel {
 public:
  explicit ConvKernel(bool transposed) : transposed_(transposed) {}

  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* x = ctx.input(0);
    const TensorView* w = ctx.input(1);
    const TensorView* b = ctx.input(2);
    const TensorView* z = ctx.input(3);
    TensorView* y = ctx.output(0);
    if (x == nullptr || w == nullptr || y == nullptr) return ctx.Error("needs X, W and Y");
    if (w->dtype != x->dtype || y->dtype != x->dtype || (b && b->dtype != x->dtype) ||
        (z && z->dtype != x->dtype))
      return ctx.Error("X, W, B, Z and Y dtypes differ");
    if (y->numel() == 0) return absl::OkStatus();
    if (ctx.node().has_attr("pool_kernel_shape")) return ConvMaxPool(ctx, pooled_);
    std::vector<int64_t>& key = key_;
    ShapeKey(ctx, &key);
    ConvEntry* e = cache_.Find(key);
    if (e == nullptr) {
      MT_ASSIGN_OR_RETURN(ConvFusion f, ReadFusion(ctx));
      MT_ASSIGN_OR_RETURN(auto built, BuildConv(ctx, transposed_, f));
      e = cache_.Insert(key, std::move(built));
    }
    if (y->dims != e->y_dims) return ctx.Error("output allocated with unexpected dims");
    staging_.Begin();
    const void* xp = staging_.Input(*x);
    // Constant weights already in the primitive's layout are neither staged nor reordered again.
    const bool w_cached = e->w_packed && ctx.input_constant(1);
    const void* wp = w_cached ? nullptr : staging_.Input(*w);
    const void* bp = b ? staging_.Input(*b) : nullptr;
    const void* zp = z ? staging_.Input(*z) : nullptr;
    void* yp = staging_.Output(*y);
    void* prim_y = e->reach_dims.empty() ? yp : e->tmp.data();
    MT_RETURN_IF_ERROR(Guard(ctx, "running convolution", [&] {
      using dnnl_util::Bind;
      if (e->bx) {
        Bind(e->bx->copy.from(), xp);
        Bind(e->bx->copy.to(), dnnl_util::TakeScratch(e->bx->copy.to().get_desc().get_size()));
        e->bx->copy.Execute();
      } else {
        Bind(e->prim.at(DNNL_ARG_SRC), xp);
      }
      if (!e->bw) {
        Bind(e->prim.at(DNNL_ARG_WEIGHTS), wp);
      } else if (wp != nullptr) {
        Bind(e->bw->copy.from(), wp);
        e->bw->copy.Execute();
      }
      void* dst = prim_y;  // what the primitive writes
      if (e->by) {
        dst = dnnl_util::TakeScratch(e->by->copy.from().get_desc().get_size());
        Bind(e->by->copy.from(), dst);
        Bind(e->by->copy.to(), prim_y);
      } else {
        Bind(e->prim.at(DNNL_ARG_DST), prim_y);
      }
      if (e->has_bias) Bind(e->prim.at(DNNL_ARG_BIAS), bp);
      // The sum post-op adds what DST holds before the call: Z.
      if (zp != nullptr && e->bz) {
        Bind(e->bz->copy.from(), zp);
        Bind(e->bz->copy.to(), dst);
        e->bz->copy.Execute();
      } else if (zp != nullptr && zp != prim_y) {
        std::memcpy(prim_y, zp, e->y_md.get_size());
      }
      e->prim.Execute();
      if (e->by) e->by->copy.Execute();
      dnnl_util::Stream().wait();
    }));
    e->w_packed = e->bw != nullptr && ctx.input_constant(1);
    if (!e->reach_dims.empty())
      ScatterReach(*e, bp, yp, y->dims, DTypeSize(dnnl_util::ComputeType(y->dtype)));
    staging_.Finish();
    return absl::OkStatus();
  }

 private:
  bool transposed_;
  ShapeCache<ConvEntry> cache_;
  std::vector<int64_t> key_;  // the last call's cache key (its capacity reused)
  Fp32Staging staging_;
  ConvPoolWeights pooled_;  // a FusedConv with a folded max pool (conv_pool.h)
};

KernelFactory ConvFactory(bool transposed) {
  return [transposed](const Node&) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new ConvKernel(transposed));
  };
}

}  // namespace

MT_REGISTER_KERNELS(dnnl_conv) {
  r.Register({"Conv", "", DeviceType::kCPU, kFloatTypes, 0, ConvFactory(false)});
  r.Register({"ConvTranspose", "", DeviceType::kCPU, kFloatTypes, 0, ConvFactory(true)});
  // FusedConv(X, W, B?, Z?) = act(Conv(X, W) + B + Z): the Conv kernel, configured by the node.
  r.Register({"FusedConv", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0, ConvFactory(false)});
}

}  // namespace mixtrain
