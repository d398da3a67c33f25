// Type inference for Loop and Scan (no kernel runs them: passes/unroll_loop.cc writes them out).
// What follows a loop in the graph needs its outputs' dtypes before it is unrolled (kernel lookups
// in `check`, the dtype rules of the ops reading them): a carried value (Loop) or state (Scan) has
// its initial value's dtype, and its shape where the body passes it through unchanged; a scan
// output has the element type the body declares for it, its shape is left open.
#include <optional>

#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"
#include "graph/subgraph.h"

namespace mixtrain {
namespace {

// Outputs [0, states) follow inputs [first, first + states); the rest are scan outputs, whose
// body outputs start at body_first + states.
absl::Status InferLoopLike(InferContext& ctx, size_t first, size_t states, int body_in_first, int body_out_first) {
  std::optional<onnx::GraphProto> body = SubgraphAttr(ctx.node(), "body");
  if (!body) return ctx.Error("needs a body graph");
  for (size_t k = 0; k < ctx.num_outputs(); ++k) {
    TypeInfo& out = ctx.output(k);
    out.shape = Shape();
    const int at = body_out_first + static_cast<int>(k);
    if (k < states) {
      const TypeInfo& in = ctx.input(first + k);
      out.dtype = in.dtype;
      const int body_in = body_in_first + static_cast<int>(k);
      if (at < body->output_size() && body_in < body->input_size() &&
          body->output(at).name() == body->input(body_in).name())
        out.shape = in.shape;  // passed through unchanged
    } else if (at < body->output_size() && body->output(at).type().has_tensor_type()) {
      absl::StatusOr<DType> t = FromOnnxType(body->output(at).type().tensor_type().elem_type());
      out.dtype = t.ok() ? *t : DType::kUndefined;
    }
  }
  return absl::OkStatus();
}

// Inputs M, cond, carried...; body inputs i, cond, carried...; body outputs cond, carried, scans.
absl::Status InferLoop(InferContext& ctx) {
  const size_t carried = ctx.num_inputs() < 2 ? 0 : ctx.num_inputs() - 2;
  return InferLoopLike(ctx, 2, carried, 2, 1);
}

// Inputs states..., scan inputs...; body inputs and outputs states first.
absl::Status InferScan(InferContext& ctx) {
  const int64_t m = ctx.node().attr_int("num_scan_inputs", 0);
  if (ctx.opset() < 9) return absl::OkStatus();  // Scan-8: sequence_lens first, a batch axis
  if (m < 1 || m > static_cast<int64_t>(ctx.num_inputs())) return ctx.Error("num_scan_inputs does not match its inputs");
  return InferLoopLike(ctx, 0, ctx.num_inputs() - m, 0, 0);
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(control_flow_ops, {{"Loop", "", InferLoop}, {"Scan", "", InferScan}});

}  // namespace mixtrain
