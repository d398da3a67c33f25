// Shape rule of data-parallel training's collective op:
//   ai.mixtrain.AllReduce(x_1, ..., x_n [, active]) -> y_1, ..., y_n
// y_i is x_i reduced over the session's communicator's ranks: f32 tensors are summed (and divided
// by the rank count with average=1), bool tensors are ANDed (the overflow flag: finite on every
// rank). With the optional bool scalar `active` false (a micro-batch that does not apply the
// update) nothing is exchanged and y_i = x_i. Attributes: average (int, default 1), fixed_order
// (int, default 0: the sum is 0 + rank 0 + rank 1 + ..., identical and reproducible everywhere).
#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

absl::Status InferAllReduce(InferContext& ctx) {
  const size_t n = ctx.num_outputs();
  if (n == 0 || (ctx.num_inputs() != n && ctx.num_inputs() != n + 1))
    return ctx.Error(absl::StrCat("expects n tensors and an optional `active` flag for n outputs, got ",
                                  ctx.num_inputs(), " inputs and ", n, " outputs"));
  if (ctx.num_inputs() == n + 1) {
    const TypeInfo& a = ctx.input(n);
    if (a.present && a.dtype != DType::kUndefined && a.dtype != DType::kBool)
      return ctx.Error(absl::StrCat("`active` must be bool, got ", DTypeName(a.dtype)));
  }
  for (size_t i = 0; i < n; ++i) {
    const TypeInfo& x = ctx.input(i);
    if (!x.present) return ctx.Error(absl::StrCat("input ", i, " is missing"));
    if (x.dtype != DType::kUndefined && x.dtype != DType::kF32 && x.dtype != DType::kBool)
      return ctx.Error(absl::StrCat("input ", i, " must be f32 (summed) or bool (ANDed), got ", DTypeName(x.dtype)));
    ctx.output(i).dtype = x.dtype;
    ctx.output(i).shape = x.shape;
  }
  return absl::OkStatus();
}

}  // namespace

// Index-aligned: the kernel reads every input before it writes an output, so y_i may share x_i's
// buffer (the gradients are reduced in place).
MT_REGISTER_OP_SCHEMAS(collective_ops, {{"AllReduce", "ai.mixtrain", InferAllReduce, kOpIndexAligned}});

}  // namespace mixtrain
