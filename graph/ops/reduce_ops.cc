// Shape and type inference for reductions along axes: ReduceMean, ReduceSum, ReduceMax,
// ReduceSumSquare, ArgMax, CumSum. Which axes a Reduce* reduces is decided in one place,
// graph/ops/reduce_params.cc, shared with the CPU kernels.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "graph/ops/reduce_params.h"
#include "graph/mixtrain_schemas.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

absl::Status InferReduce(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input data");
  ctx.output(0).dtype = x.dtype;
  if (!x.shape.rank_known) return absl::OkStatus();
  const int64_t rank = x.shape.rank();
  const bool keepdims = ctx.node().attr_int("keepdims", 1) != 0;
  const TypeInfo& axes = ctx.input(1);
  const bool axes_from_input = !ctx.node().has_attr("axes") && axes.present;
  if (axes_from_input && axes.value == nullptr) {
    // Axes unknown until run time: with keepdims the rank survives (and dims of size 1 stay 1);
    // without, the rank is known only from the number of axes, unless it is zero (noop or all).
    if (keepdims) {
      std::vector<Dim> out(rank);
      for (int64_t i = 0; i < rank; ++i)
        if (x.shape.dims[i].known() && x.shape.dims[i].value == 1) out[i] = Dim(1);
      ctx.output(0).shape = Shape(std::move(out));
    } else if (axes.shape.rank_known && axes.shape.rank() == 1 && axes.shape.dims[0].known() &&
               axes.shape.dims[0].value > 0) {
      ctx.output(0).shape = Shape(std::vector<Dim>(rank - axes.shape.dims[0].value));
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> axes_values;
  if (axes_from_input) axes_values = axes.value->ToInt64Vector();
  auto mask = reduce::ReduceMask(ctx.node(), axes_from_input ? &axes_values : nullptr, rank);
  if (!mask.ok()) return ctx.Error(std::string(mask.status().message()));
  std::vector<Dim> out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!(*mask)[i])
      out.push_back(x.shape.dims[i]);
    else if (keepdims)
      out.push_back(Dim(1));
  }
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

// ai.mixtrain ReduceSum(data, axes?): ONNX's ReduceSum (opset 13 form) whose output has the
// type `to` (an ONNX float type): AMP's bias gradients summed from bf16 into fp32
// (passes/fp32_grad_products.cc).
absl::Status InferWideReduceSum(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferReduce(ctx));
  auto to = FromOnnxType(static_cast<int32_t>(ctx.node().attr_int("to", 1)));
  if (!to.ok() || *to != DType::kF32) return ctx.Error("to must be float (1)");
  ctx.output(0).dtype = *to;
  return absl::OkStatus();
}

absl::Status InferArgMax(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input data");
  ctx.output(0).dtype = DType::kI64;
  if (!x.shape.rank_known) return absl::OkStatus();
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", 0), x.shape.rank());
  if (!axis.ok()) return ctx.Error(std::string(axis.status().message()));
  std::vector<Dim> out = x.shape.dims;
  if (ctx.node().attr_int("keepdims", 1) != 0)
    out[*axis] = Dim(1);
  else
    out.erase(out.begin() + *axis);
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferCumSum(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present || !ctx.has_input(1)) return ctx.Error("needs inputs x and axis");
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(reduce_ops, {{"ReduceMean", "", InferReduce},
                                    {"ReduceSum", "", InferReduce},
                                    {"ReduceSum", "ai.mixtrain", InferWideReduceSum},
                                    {"ReduceMax", "", InferReduce},
                                    {"ReduceSumSquare", "", InferReduce},
                                    {"ArgMax", "", InferArgMax},
                                    {"CumSum", "", InferCumSum}});

MT_REGISTER_ONNX_SCHEMAS(reduce_ops) {
  AddMixtrainSchema("ReduceSum", {{"data", "T", false}, {"axes", "I", true}}, {{"reduced", "U", false}});
}

}  // namespace mixtrain
