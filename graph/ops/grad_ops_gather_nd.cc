// Shape rule of ai.mixtrain.GatherNDGrad(dY, indices, X) -> dX (kernels/cpu/grad_gather_nd.cc),
// the gradient passes/grad_rules_onnx_coverage.cc emits for GatherND with batch_dims > 0: dX has
// X's shape and dtype.
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

absl::Status InferLikeInput2(InferContext& ctx) {
  const TypeInfo& x = ctx.input(2);
  if (!x.present) return ctx.Error("needs input X (2), which the gradient is shaped like");
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(grad_ops_gather_nd, {{"GatherNDGrad", "ai.mixtrain", InferLikeInput2}});

}  // namespace mixtrain
