// Shape/type rules and ONNX schemas of the ai.mixtrain ops the inference conv passes emit
// (passes/fuse_conv.cc, passes/conv_layout.cc):
//   FusedConv(X, W, B?, Z?) -> Y = act(Conv(X, W) + B + Z); Conv's attributes plus `activation`
//     ("" | Relu | LeakyRelu | Sigmoid | Tanh | Clip), `activation_params` (LeakyRelu: [alpha],
//     Clip: [min, max]) and the layout attributes below.
//   MaxPool, AveragePool, GlobalAveragePool: the ONNX ops' attributes plus `channels_last`;
//     MaxPool and AveragePool also `channel_block`.
// Layouts (W always stays ONNX's [M, C/group, kernel...]):
//   channels_last = 1: X, Z and Y are [N, spatial..., C] instead of [N, C, spatial...].
//   channel_block = 16: Y and Z (and a pool's X) are channel-blocked, [N, C/16, spatial..., 16]
//     with element [n, c/16, s..., c%16] = the NC<spatial> tensor's [n, c, s...] (oneDNN's
//     nC<spatial>16c). C must be a multiple of 16. channel_block = 8 likewise (nC<spatial>8c,
//     the block of oneDNN's AVX2 kernels; the training layout pass uses it on AVX2 CPUs).
//   input_channel_block = 16 (FusedConv, with channel_block = 16): X is channel-blocked too;
//     0 (the default): X is [N, C, spatial...], e.g. an image's few channels into blocked Y.
// FusedConv's `pool_kernel_shape` (and `pool_strides`, default the kernel): Y is
// MaxPool(act(Conv(X, W) + B)) with that window, no pads (passes/conv_pool.cc folds the
// MaxPool after a blocked first conv; kernels/cpu/conv_pool.cc computes it).
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/mixtrain_schemas.h"
#include "graph/ops/nn_geometry.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

// [N, sp..., C] -> [N, C, sp...] and back, on symbolic dims.
std::vector<Dim> ToChannelsFirst(const std::vector<Dim>& d) {
  std::vector<Dim> r = {d[0], d.back()};
  r.insert(r.end(), d.begin() + 1, d.end() - 1);
  return r;
}
std::vector<Dim> ToChannelsLast(const std::vector<Dim>& d) {
  std::vector<Dim> r = {d[0]};
  r.insert(r.end(), d.begin() + 2, d.end());
  r.push_back(d[1]);
  return r;
}
// [N, C/b, sp..., b] -> [N, C, sp...] and back.
std::vector<Dim> Unblock(const std::vector<Dim>& d) {
  std::vector<Dim> r = {d[0], d[1].known() ? Dim(d[1].value * d.back().value) : Dim()};
  r.insert(r.end(), d.begin() + 2, d.end() - 1);
  return r;
}
std::vector<Dim> Block(const std::vector<Dim>& d, int64_t b) {
  std::vector<Dim> r = {d[0], d[1].known() ? Dim(d[1].value / b) : Dim()};
  r.insert(r.end(), d.begin() + 2, d.end());
  r.emplace_back(b);
  return r;
}

absl::Status InferLayoutWindowed(InferContext& ctx) {
  const Node& node = ctx.node();
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input X");
  ctx.output(0).dtype = x.dtype;
  if (!x.shape.rank_known) return absl::OkStatus();
  if (x.shape.rank() < 3)
    return ctx.Error(absl::StrCat("X must have a batch, a channel and spatial dims, got ",
                                  x.shape.ToString()));
  const bool channels_last = node.attr_int("channels_last", 0) != 0;
  const int64_t block = node.attr_int("channel_block", 0);
  const int64_t x_block =
      node.op_type() == "FusedConv" ? node.attr_int("input_channel_block", 0) : block;
  if (block != 0 && ((block != 16 && block != 8) || channels_last || node.op_type() == "GlobalAveragePool"))
    return ctx.Error(absl::StrCat("unsupported channel_block ", block));
  if (x_block != 0 && x_block != block)
    return ctx.Error("input_channel_block must be 0 or channel_block");
  if (x_block != 0 && (x.shape.rank() < 4 || x.shape.dims.back() != Dim(x_block)))
    return ctx.Error(absl::StrCat("channel-blocked X must end in a dim of ", x_block, ", got ",
                                  x.shape.ToString()));
  const std::vector<Dim> xd = channels_last ? ToChannelsFirst(x.shape.dims)
                              : x_block != 0 ? Unblock(x.shape.dims)
                                             : x.shape.dims;
  const size_t nsp = xd.size() - 2;
  std::vector<Dim> out = {xd[0], xd[1]};
  if (node.op_type() == "GlobalAveragePool") {
    out.resize(xd.size(), Dim(1));
  } else {
    std::vector<int64_t> kernel = node.attr_ints("kernel_shape");
    if (node.op_type() == "FusedConv") {
      const TypeInfo& w = ctx.input(1);
      if (!w.present) return ctx.Error("needs input W");
      out[1] = Dim();
      if (w.shape.rank_known) {
        if (w.shape.rank() != static_cast<int64_t>(xd.size()))
          return ctx.Error(absl::StrCat("W ", w.shape.ToString(), " and X ", x.shape.ToString(),
                                        " differ in rank"));
        const int64_t group = node.attr_int("group", 1);
        const Dim& wc = w.shape.dims[1];
        if (wc.known() && xd[1].known() && wc.value * group != xd[1].value)
          return ctx.Error(absl::StrCat("X has ", xd[1].value, " channels, W ",
                                        w.shape.ToString(), " with group ", group, " expects ",
                                        wc.value * group));
        out[1] = w.shape.dims[0];
        if (kernel.empty() && w.shape.fully_known()) {
          const std::vector<int64_t> ws = w.shape.sizes();
          kernel.assign(ws.begin() + 2, ws.end());
        }
      }
    }
    std::vector<int64_t> in_sp;
    for (size_t i = 2; i < xd.size() && xd[i].known(); ++i) in_sp.push_back(xd[i].value);
    if (in_sp.size() == nsp && kernel.size() == nsp) {
      MT_ASSIGN_OR_RETURN(WindowGeometry g, ForwardWindowGeometry(node, in_sp, kernel));
      const std::vector<int64_t> pk = node.attr_ints("pool_kernel_shape");
      std::vector<int64_t> ps = node.attr_ints("pool_strides");
      if (ps.empty()) ps = pk;
      if (!pk.empty() && (pk.size() != nsp || ps.size() != nsp))
        return ctx.Error("pool_kernel_shape and pool_strides need one entry per spatial dim");
      for (size_t i = 0; i < pk.size(); ++i) {
        if (pk[i] < 1 || ps[i] < 1 || g.out[i] < pk[i])
          return ctx.Error("pool window does not fit the conv output");
        g.out[i] = (g.out[i] - pk[i]) / ps[i] + 1;
      }
      for (int64_t o : g.out) out.emplace_back(o);
    } else {
      out.resize(xd.size());  // unknown spatial sizes
    }
  }
  if (block != 0 && out[1].known() && out[1].value % block != 0)
    return ctx.Error(absl::StrCat(out[1].value, " output channels do not fill blocks of ", block));
  ctx.output(0).shape = Shape(channels_last ? ToChannelsLast(out)
                              : block != 0  ? Block(out, block)
                                            : out);
  return absl::OkStatus();
}

MT_REGISTER_OP_SCHEMAS(fused_conv_ops, {{"FusedConv", "ai.mixtrain", InferLayoutWindowed},
                                        {"MaxPool", "ai.mixtrain", InferLayoutWindowed},
                                        {"AveragePool", "ai.mixtrain", InferLayoutWindowed},
                                        {"GlobalAveragePool", "ai.mixtrain",
                                         InferLayoutWindowed}});

}  // namespace

MT_REGISTER_ONNX_SCHEMAS(fused_conv_ops) {
  AddMixtrainSchema("FusedConv",
                    {{"X", "T", false}, {"W", "T", false}, {"B", "T", true}, {"Z", "T", true}},
                    {{"Y", "T", false}});
  for (const char* pool : {"MaxPool", "AveragePool", "GlobalAveragePool"})
    AddMixtrainSchema(pool, {{"X", "T", false}}, {{"Y", "T", false}});
}

}  // namespace mixtrain
