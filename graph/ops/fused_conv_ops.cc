// Shape/type rules and ONNX schemas of the ai.mixtrain ops the inference conv passes emit
// (passes/fuse_conv.cc, passes/conv_layout.cc):
//   FusedConv(X, W, B?, Z?) -> Y = act(Conv(X, W) + B + Z); Conv's attributes plus `activation`
//     ("" | Relu | LeakyRelu | Sigmoid | Tanh | Clip), `activation_params` (LeakyRelu: [alpha],
//     Clip: [min, max]) and `channels_last`.
//   MaxPool, AveragePool, GlobalAveragePool: the ONNX ops' attributes plus `channels_last`.
// channels_last = 1: X, Z and Y are [N, spatial..., C] instead of [N, C, spatial...]; W stays
// ONNX's [M, C/group, kernel...].
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
  const std::vector<Dim> xd = channels_last ? ToChannelsFirst(x.shape.dims) : x.shape.dims;
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
      for (int64_t o : g.out) out.emplace_back(o);
    } else {
      out.resize(xd.size());  // unknown spatial sizes
    }
  }
  ctx.output(0).shape = Shape(channels_last ? ToChannelsLast(out) : out);
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
