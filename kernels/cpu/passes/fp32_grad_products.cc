// fp32_grad_products (training pass, after autodiff and fuse_matmul; bf16 AMP steps on the CPU:
// under fp16 the gradients' overflow is what the loss scaler watches, as in PyTorch): a matrix
// product on bf16/fp16 operands whose result is only cast to fp32 writes fp32 itself,
//   Cast(Gemm(A, B), to = f32)        =>  FusedMatMul(A, B, perm_a/perm_b from transA/transB,
//   Cast(FusedMatMul(A, B), to = f32)      alpha, to = f32)
// (no bias, C or Z). Under AMP every weight gradient is such a product: the precision pass casts
// the fp32 master weight to bf16 for the forward, so the gradient arrives at the bf16 copy and is
// cast back to fp32 for the optimizer. oneDNN accumulates the product in fp32 either way; the
// Cast rounded that sum to bf16 (8 significant bits) and widened it again, one more pass over the
// gradient. Writing fp32 skips the pass and the rounding, so the optimizer sees the gradient
// PyTorch's autocast would give it before its own bf16 rounding of the weight copy's gradient.
// Exact in the sense that matters: the result is the unrounded fp32 sum the kernel computed.
// ConvGrad's dW and dB, and the norm gradients' dScale and dBias, the same way (`params_to`);
// a bias gradient's ReduceSum becomes ai.mixtrain ReduceSum with `to`.
// CPU only (TrainingRecipe::fp32_grad_products): the CUDA kernels take one dtype per product.
#include <utility>
#include <vector>

#include "graph/dtype.h"
#include "graph/onnx_export.h"
#include "graph/shape_inference.h"
#include "kernels/cpu/passes/cpu_passes.h"
#include "passes/fusion_match.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

using fusion::IsMixtrain;
using fusion::IsOnnx;
using fusion::SoleConsumer;

constexpr int64_t kOnnxFloat = 1;  // TensorProto.FLOAT

// Removes `cast` and makes output i of `n` the value the Cast wrote (n's old output i, which only
// the Cast read, goes with it).
void TakeCastOutput(Graph& g, Node* cast, Node* n, size_t i) {
  Value* y = cast->output(0);
  g.RemoveNode(cast);
  g.SetNodeOutput(n, i, y);
}

// Whether `p` is a product this pass can widen: Gemm without C, 2-D, or FusedMatMul without
// bias, Z, activation or `to`; bf16/fp16 operands.
bool Widenable(const Node& p) {
  if (p.output(0) == nullptr || p.input(0) == nullptr || p.input(1) == nullptr) return false;
  if (!IsLowFloat(p.input(0)->dtype) || p.input(1)->dtype != p.input(0)->dtype) return false;
  if (IsOnnx(p, "Gemm"))
    return p.input(2) == nullptr && p.input(0)->shape.rank_known && p.input(0)->shape.rank() == 2 &&
           p.input(1)->shape.rank_known && p.input(1)->shape.rank() == 2;
  if (IsMixtrain(p, "FusedMatMul"))
    return p.input(2) == nullptr && p.input(3) == nullptr && p.attr_string("activation", "").empty() &&
           !p.has_attr("to");
  return false;
}

// ConvGrad(dY, X, W), LayerNormalizationGrad and BatchNormalizationGrad(dY, X, scale, ...)
// whose parameter gradients (outputs 1 and 2) only Casts to fp32 read: they come out fp32
// (`params_to`). oneDNN's backward-weights convolution sums in fp32 and writes fp32 from bf16;
// the norm gradients' kernels sum in double and store to whatever type the output has.
bool WidenParamGrads(Graph& g) {
  std::vector<Node*> grads;
  for (const auto& n : g.nodes())
    if ((IsMixtrain(*n, "ConvGrad") || IsMixtrain(*n, "LayerNormalizationGrad") ||
         IsMixtrain(*n, "BatchNormalizationGrad")) && !n->has_attr("params_to"))
      grads.push_back(n.get());
  bool changed = false;
  for (Node* n : grads) {
    std::vector<std::pair<size_t, Node*>> casts;  // (output, its Cast)
    bool ok = true;
    for (size_t i = 1; ok && i < 3; ++i) {
      Value* v = n->output(i);
      if (v == nullptr) continue;
      Node* c = SoleConsumer(g, v);
      ok = IsLowFloat(v->dtype) && c != nullptr && IsOnnx(*c, "Cast") &&
           c->attr_int("to", 0) == kOnnxFloat && c->output(0) != nullptr;
      if (ok) casts.emplace_back(i, c);
    }
    if (!ok || casts.empty()) continue;
    for (auto [i, c] : casts) TakeCastOutput(g, c, n, i);
    n->SetAttr(Attribute::Int("params_to", kOnnxFloat));
    changed = true;
  }
  return changed;
}

// Cast(views(ReduceSum(x)), to = f32) with x bf16/fp16 (a linear layer's bias gradient: the
// output gradient summed over tokens, squeezed to the bias's shape) => views(ai.mixtrain
// ReduceSum(x, to = f32)): the reduction already sums in double.
bool WidenReduceSum(Graph& g, Node* cast) {
  std::vector<Node*> views;  // from the Cast up
  Node* reader = cast;
  Value* v = cast->input(0);
  Node* p = v->producer;
  while (p != nullptr && IsViewNode(*p) && SoleConsumer(g, v) == reader) {
    views.push_back(p);
    reader = p;
    v = p->input(0);
    p = v->producer;
  }
  if (p == nullptr || !IsOnnx(*p, "ReduceSum") || p->input(0) == nullptr ||
      !IsLowFloat(p->input(0)->dtype) || SoleConsumer(g, v) != reader)
    return false;
  std::vector<Value*> ins(p->inputs().begin(), p->inputs().end());
  std::vector<Attribute> attrs = p->attributes();
  const std::string name = p->name();
  Node* r = g.AddNode("ReduceSum", ins, {}, g.UniqueName(name), kMixtrainDomain);
  g.MoveBefore(r, p);  // where the sum was (appended, it would sort to the end of the step)
  for (Attribute& a : attrs) r->SetAttr(std::move(a));
  r->SetAttr(Attribute::Int("to", kOnnxFloat));
  if (views.empty()) {  // r writes the Cast's value; the old sum, read by nothing now, goes with p
    TakeCastOutput(g, cast, r, 0);
    g.RemoveNode(p);
    return true;
  }
  TakeCastOutput(g, cast, views.front(), 0);
  g.RemoveNode(p);  // v stays: the last view reads it, and r writes it now, in fp32
  v->dtype = DType::kF32;
  g.SetNodeOutput(r, 0, v);
  for (size_t i = 1; i < views.size(); ++i) views[i]->output(0)->dtype = DType::kF32;
  return true;
}

class Fp32GradProductsPass final : public Pass {
 public:
  absl::string_view name() const override { return "fp32_grad_products"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    std::vector<Node*> casts;
    for (const auto& n : g.nodes())
      if (IsOnnx(*n, "Cast") && n->attr_int("to", 0) == kOnnxFloat && n->input(0) != nullptr &&
          n->output(0) != nullptr && n->input(0)->producer != nullptr)
        casts.push_back(n.get());
    bool changed = false;
    for (Node* cast : casts) {
      Value* low = cast->input(0);
      Node* p = low->producer;
      if (WidenReduceSum(g, cast)) {
        changed = true;
        continue;
      }
      if (!Widenable(*p) || SoleConsumer(g, low) != cast) continue;
      if (IsMixtrain(*p, "FusedMatMul")) {
        p->SetAttr(Attribute::Int("to", kOnnxFloat));
        TakeCastOutput(g, cast, p, 0);
      } else {  // Gemm(A, B, transA, transB, alpha) -> the same FusedMatMul
        Node* f = g.AddNode("FusedMatMul", {p->input(0), p->input(1)}, {}, g.UniqueName(p->name()),
                            kMixtrainDomain);
        // Where the Gemm was: appended, a weight gradient (read by the optimizer only) would
        // sort to the end of the step and keep its operands, the forward's activations, alive.
        g.MoveBefore(f, p);
        if (p->attr_int("transA", 0) != 0) f->SetAttr(Attribute::Ints("perm_a", {1, 0}));
        if (p->attr_int("transB", 0) != 0) f->SetAttr(Attribute::Ints("perm_b", {1, 0}));
        const float alpha = p->attr_float("alpha", 1.0f);
        if (alpha != 1.0f) f->SetAttr(Attribute::Float("alpha", alpha));
        f->SetAttr(Attribute::Int("to", kOnnxFloat));
        TakeCastOutput(g, cast, f, 0);
        g.RemoveNode(p);
      }
      changed = true;
    }
    changed |= WidenParamGrads(g);
    if (!changed) return false;
    if (!g.opset_imports.contains(kMixtrainDomain)) g.opset_imports[kMixtrainDomain] = 1;
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFp32GradProductsPass() { return std::make_unique<Fp32GradProductsPass>(); }

}  // namespace mixtrain
