// Shape rule of the precision debugger's op: ai.mixtrain.PrecisionStats(x) -> f32[1, 8], the row of
// graph/ops/precision_stats_row.h, for a float x of any shape.
#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"
#include "graph/ops/precision_stats_row.h"

namespace mixtrain {
namespace {

absl::Status InferPrecisionStats(InferContext& ctx) {
  if (ctx.num_inputs() != 1 || ctx.num_outputs() != 1) return ctx.Error("expects one input and one output");
  const TypeInfo& x = ctx.input(0);
  if (x.present && x.dtype != DType::kUndefined && !IsFloat(x.dtype))
    return ctx.Error(absl::StrCat("input must be a float tensor, got ", DTypeName(x.dtype)));
  ctx.output(0).dtype = DType::kF32;
  ctx.output(0).shape = Shape(std::vector<Dim>{Dim(1), Dim(kNumStatFields)});  // a row of the [K, 8] output
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(debug_ops, {{"PrecisionStats", "ai.mixtrain", InferPrecisionStats}});

}  // namespace mixtrain
