// ai.mixtrain ops made by the elementwise inference fusions; kernels: kernels/cpu/elementwise.cc
// (Gelu) and kernels/cpu/softmax.cc (MaskedSoftmax).
//
//   Gelu(X) -> Y                 ONNX Gelu (opset 20) for graphs of older opsets (fuse_gelu):
//                                attribute approximate = "none" (erf, default) | "tanh".
//   MaskedSoftmax(X, mask) -> Y  Y = Softmax(Where(mask, scale * X, fill), axis = -1)
//                                (fuse_softmax): mask is bool and broadcasts to X's shape;
//                                attributes fill (float), scale (float, default 1).
#include "absl/strings/str_cat.h"
#include "graph/mixtrain_schemas.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

absl::Status InferGelu(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input X");
  const std::string approx = ctx.node().attr_string("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return ctx.Error(absl::StrCat("approximate must be 'none' or 'tanh', got '", approx, "'"));
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  return absl::OkStatus();
}

absl::Status InferMaskedSoftmax(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& mask = ctx.input(1);
  if (!x.present || !mask.present) return ctx.Error("needs inputs X and mask");
  if (mask.dtype != DType::kUndefined && mask.dtype != DType::kBool)
    return ctx.Error(absl::StrCat("mask must be bool, got ", DTypeName(mask.dtype)));
  if (!ctx.node().has_attr("fill")) return ctx.Error("needs a float attribute 'fill'");
  if (x.shape.rank_known && x.shape.rank() == 0) return ctx.Error("X must have rank >= 1");
  if (x.shape.rank_known && mask.shape.rank_known) {
    auto b = BroadcastShapes(mask.shape, x.shape);
    if (!b.ok() || !(*b == x.shape))
      return ctx.Error(absl::StrCat("mask ", mask.shape.ToString(), " does not broadcast to X ",
                                    x.shape.ToString()));
  }
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  return absl::OkStatus();
}

MT_REGISTER_OP_SCHEMAS(fused_eltwise_ops, {{"Gelu", "ai.mixtrain", InferGelu},
                                           {"MaskedSoftmax", "ai.mixtrain", InferMaskedSoftmax}});

}  // namespace

MT_REGISTER_ONNX_SCHEMAS(fused_eltwise) {
  AddMixtrainSchema("Gelu", {{"X", "T", false}}, {{"Y", "T", false}});
  AddMixtrainSchema("MaskedSoftmax", {{"X", "T", false}, {"mask", "tensor(bool)", false}},
                    {{"Y", "T", false}});
}

}  // namespace mixtrain
