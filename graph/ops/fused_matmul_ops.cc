// ai.mixtrain FusedMatMul, the op the fuse_matmul inference pass (passes/fuse_matmul.cc) makes
// from a MatMul and what surrounds it; kernel: kernels/cpu/dnnl_matmul.cc.
//
//   FusedMatMul(A, B, bias?, Z?) -> Y
//   A' = Transpose(A, perm_a), B' = Transpose(B, perm_b)      (attributes absent: no transpose)
//   R  = act(alpha * (A' @ B') + bias) + Z                      (MatMul's numpy batch broadcast)
//   Y  = Transpose(R, perm_y)
// Attributes: perm_a, perm_b, perm_y (ints, full permutations; 1-D operands take none), alpha
// (float, default 1), activation ("" | "Relu" | "Gelu" (erf) | "GeluTanh" | "Sigmoid" | "Tanh"),
// to (int, an ONNX float type: Y's type when it differs from A's; only without bias and Z: the
// training step's weight gradients come out fp32 from bf16 operands, passes/fp32_grad_products.cc).
// bias holds R's last dim N (shape [N], or [1, ..., 1, N]); Z has R's shape and excludes perm_y.
// The residual Z comes after the activation because that is where transformers add it
// (x + Linear(Gelu(...))); the permutations are read/written in place as strided views.
#include "absl/strings/str_cat.h"
#include "graph/mixtrain_schemas.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

// `shape` permuted by the node's attribute `attr` (absent: unchanged).
absl::StatusOr<Shape> Permuted(InferContext& ctx, const char* attr, const Shape& shape) {
  if (!ctx.node().has_attr(attr)) return shape;
  std::vector<int64_t> perm = ctx.node().attr_ints(attr);
  std::vector<bool> seen(shape.rank(), false);
  bool ok = static_cast<int64_t>(perm.size()) == shape.rank();
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < shape.rank() && !seen[p];
    if (ok) seen[p] = true;
  }
  if (!ok) return ctx.Error(absl::StrCat(attr, " is not a permutation of ", shape.ToString()));
  std::vector<Dim> dims(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) dims[i] = shape.dims[perm[i]];
  return Shape(std::move(dims));
}

absl::Status InferFusedMatMul(InferContext& ctx) {
  const TypeInfo& a = ctx.input(0);
  const TypeInfo& b = ctx.input(1);
  if (!a.present || !b.present) return ctx.Error("needs inputs A and B");
  ctx.output(0).dtype = a.dtype;
  if (ctx.node().has_attr("to")) {
    auto to = FromOnnxType(static_cast<int32_t>(ctx.node().attr_int("to", 0)));
    if (!to.ok() || !(*to == DType::kF32 || *to == DType::kF16 || *to == DType::kBF16))
      return ctx.Error("to must be a float type");
    if (ctx.input(2).present || ctx.input(3).present) return ctx.Error("to is not supported with bias or Z");
    ctx.output(0).dtype = *to;
  }
  if (!a.shape.rank_known || !b.shape.rank_known) return absl::OkStatus();
  if (a.shape.rank() == 0 || b.shape.rank() == 0) return ctx.Error("operands must not be scalars");
  const bool vec = a.shape.rank() == 1 || b.shape.rank() == 1;
  if (vec && (ctx.node().has_attr("perm_a") || ctx.node().has_attr("perm_b") ||
              ctx.node().has_attr("perm_y")))
    return ctx.Error("1-D operands take no permutations");
  MT_ASSIGN_OR_RETURN(Shape ap, Permuted(ctx, "perm_a", a.shape));
  MT_ASSIGN_OR_RETURN(Shape bp, Permuted(ctx, "perm_b", b.shape));
  auto product = MatMulShape(ap, bp);  // of the permuted operands A', B'
  if (!product.ok()) return ctx.Error(std::string(product.status().message()));
  Shape r = *std::move(product);
  const TypeInfo& bias = ctx.input(2);
  if (bias.present && bias.shape.rank_known && r.rank() > 0) {
    const Dim& n = r.dims.back();
    bool ok = bias.shape.rank() >= 1 && bias.shape.rank() <= r.rank();
    for (int64_t i = 0; ok && i + 1 < bias.shape.rank(); ++i) ok = bias.shape.dims[i] == Dim(1);
    if (ok && n.known() && bias.shape.dims.back().known()) ok = bias.shape.dims.back() == n;
    if (!ok)
      return ctx.Error(absl::StrCat("bias ", bias.shape.ToString(), " is not [..1, N] of ",
                                    r.ToString()));
  }
  if (ctx.input(3).present && ctx.node().has_attr("perm_y"))
    return ctx.Error("Z is not supported with perm_y");
  MT_ASSIGN_OR_RETURN(ctx.output(0).shape, Permuted(ctx, "perm_y", r));
  return absl::OkStatus();
}

MT_REGISTER_OP_SCHEMAS(fused_matmul_ops, {{"FusedMatMul", "ai.mixtrain", InferFusedMatMul}});

}  // namespace

MT_REGISTER_ONNX_SCHEMAS(fused_matmul) {
  AddMixtrainSchema("FusedMatMul",
                    {{"A", "T", false}, {"B", "T", false}, {"bias", "T", true}, {"Z", "T", true}},
                    {{"Y", "U", false}});
}

}  // namespace mixtrain
