// fuse_matmul (inference pass, position 20): a MatMul (or a 2-D Gemm, the same op with its
// transA / transB as perm_a / perm_b)
// and the cheap ops around it become one ai.mixtrain FusedMatMul (graph/ops/fused_matmul_ops.cc),
// which oneDNN runs as one primitive with the epilogue applied while the tile is in registers and
// the transposes read or written in place:
//   Transpose(X, p) feeding A or B                 => perm_a / perm_b = p (X read in place)
//   Mul(Y, scalar constant)                        => alpha *= scalar   (only before the bias)
//   Add(Y, bias [..1, N])                          => bias
//   Relu / Sigmoid / Tanh / Gelu(approximate)      => activation
//   Add(Y, Z) with Z shaped like Y                 => Z                 (after the activation)
//   Transpose(Y, p)                                => perm_y = p        (last; not with Z)
// Each step swallows an intermediate only when the fused chain is its sole user and it is no
// graph output, so nothing else loses a value. Steps must come in the order above (the kernel
// applies them in that order); the chain stops at the first op that does not fit.
#include <algorithm>
#include <map>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/onnx_export.h"
#include "graph/shape_inference.h"
#include "passes/fusion_match.h"
#include "passes/inference.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

using fusion::ConstantTensor;
using fusion::Determined;
using fusion::IsFloatType;
using fusion::IsOnnx;
using fusion::OtherInput;
using fusion::SoleConsumer;
using fusion::TransposePerm;

// What a chain folds into, built up step by step.
struct Fusion {
  Value *a = nullptr, *b = nullptr, *bias = nullptr, *z = nullptr;
  std::vector<int64_t> perm_a, perm_b, perm_y;
  float alpha = 1.0f;
  std::string activation;
  std::vector<Node*> nodes;  // the MatMul/Gemm, then every swallowed epilogue node, in order
  Value* out = nullptr;      // the chain's current result
};

// Epilogue steps in the order the kernel applies them.
enum Stage { kProduct, kAlpha, kBias, kActivation, kResidual, kPermY };

// X when `v` is Transpose(X) of rank >= 2 with v's dtype (the permutation goes to *perm), and
// the Transpose is no part of an earlier chain (whose intermediate X would then vanish). A chain
// of Transposes (autodiff's transpose of a forward transpose) composes into one permutation.
Value* TransposedSource(const absl::flat_hash_set<const Node*>& claimed, const Value* v,
                        std::vector<int64_t>* perm) {
  Value* x = nullptr;
  perm->clear();
  for (const Value* cur = v;;) {
    const Node* t = cur->producer;
    if (t == nullptr || !IsOnnx(*t, "Transpose") || t->input(0) == nullptr || claimed.contains(t))
      break;
    Value* src = t->input(0);
    if (!src->shape.rank_known || src->shape.rank() < 2 || src->dtype != v->dtype) break;
    // cur = Transpose(src, p) and v = cur permuted by *perm: v's dim i is src's p[perm[i]].
    const std::vector<int64_t> p = TransposePerm(*t, src->shape.rank());
    if (perm->empty()) {
      *perm = p;
    } else {
      for (int64_t& d : *perm) d = p[d];
    }
    x = src;
    cur = src;
  }
  return x;
}

// A bias for a result of shape `y`: rank 1..rank(y), all dims 1 but the last, which is N.
bool BiasShaped(const Value* bias, const Shape& y) {
  const Shape& s = bias->shape;
  if (!s.rank_known || s.rank() < 1 || s.rank() > y.rank()) return false;
  for (int64_t i = 0; i + 1 < s.rank(); ++i)
    if (!(s.dims[i] == Dim(1))) return false;
  const Dim& n = y.dims.back();
  return n.known() && s.dims.back() == n;
}

// `relu`: whether Relu folds. oneDNN's relu post-op is max(x, 0), which maps NaN to 0 where
// ONNX's Relu keeps it; the training step keeps Relu apart so a non-finite batch shows in its loss.
std::string ActivationOf(const Node& n, bool relu) {
  if ((relu && IsOnnx(n, "Relu")) || IsOnnx(n, "Sigmoid") || IsOnnx(n, "Tanh")) return n.op_type();
  if (n.op_type() == "Gelu" && (n.domain().empty() || n.domain() == kMixtrainDomain)) {
    const std::string approx = n.attr_string("approximate", "none");
    if (approx == "none") return "Gelu";
    if (approx == "tanh") return "GeluTanh";
  }
  return "";
}

// Swallows the ops after the product while they fit, in stage order. Nodes in `claimed`
// belong to an earlier chain.
void GrowEpilogue(const Graph& g, const absl::flat_hash_set<const Node*>& claimed, bool relu,
                  Fusion& f, Stage stage) {
  for (;;) {
    Node* c = SoleConsumer(g, f.out);
    if (c == nullptr || claimed.contains(c) || c->num_outputs() != 1 || c->output(0) == nullptr)
      return;
    Value* next = c->output(0);
    if (next->dtype != f.out->dtype) return;
    const Shape& y = f.out->shape;
    if (stage < kResidual && IsOnnx(*c, "Transpose") && c->input(0) == f.out) {
      // Transpose(Y, p) => perm_y = p (the result's shape changes: nothing folds after it).
      // A 2-D product without a bias computes its transpose instead, (A B)^T = B^T A^T, so the
      // output is written plainly (a weight gradient wanted in the weight's layout, as a tied
      // LM head's; oneDNN's strided output of it held a copy of the whole result).
      const std::vector<int64_t> perm = TransposePerm(*c, y.rank());
      const bool swap = y.rank() == 2 && perm == std::vector<int64_t>{1, 0} && f.bias == nullptr &&
                        f.a->shape.rank() == 2 && f.b->shape.rank() == 2;
      if (swap) {
        auto flip = [](const std::vector<int64_t>& p) {
          return p.empty() ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{};
        };
        std::swap(f.a, f.b);
        const std::vector<int64_t> pa = flip(f.perm_b), pb = flip(f.perm_a);
        f.perm_a = pa;
        f.perm_b = pb;
      } else {
        f.perm_y = perm;
      }
      f.nodes.push_back(c);
      f.out = next;
      return;
    }
    if (!(next->shape == y)) return;  // the remaining steps keep Y's shape
    Value* other = OtherInput(*c, f.out);
    if (other != nullptr && other->dtype != f.out->dtype) return;
    const Tensor* k = other ? ConstantTensor(g, other) : nullptr;
    if (stage <= kAlpha && IsOnnx(*c, "Mul") && k != nullptr && k->numel() == 1 &&
        k->rank() <= y.rank()) {
      // Mul(Y, s) => alpha *= s
      f.alpha *= static_cast<float>(k->GetDouble(0));
      stage = kAlpha;
    } else if (stage < kBias && IsOnnx(*c, "Add") && other != nullptr && BiasShaped(other, y)) {
      // Add(Y, bias[..1, N]) => bias
      f.bias = other;
      stage = kBias;
    } else if (stage < kActivation && c->num_inputs() == 1 && !ActivationOf(*c, relu).empty()) {
      // act(Y) => activation
      f.activation = ActivationOf(*c, relu);
      stage = kActivation;
    } else if (stage < kResidual && IsOnnx(*c, "Add") && other != nullptr &&
               Determined(other->shape) && other->shape == y) {
      // Add(Y, Z) with Z shaped like Y => Z
      f.z = other;
      stage = kResidual;
    } else {
      return;
    }
    f.nodes.push_back(c);
    f.out = next;
  }
}

bool IsIdentity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// Starts a fusion at MatMul/Gemm `n`; false when n cannot be the product of a FusedMatMul.
bool StartFusion(const absl::flat_hash_set<const Node*>& claimed, Node* n, Fusion& f,
                 Stage* stage) {
  const bool gemm = IsOnnx(*n, "Gemm");
  if (!IsOnnx(*n, "MatMul") && !gemm) return false;
  if (n->num_outputs() != 1 || n->output(0) == nullptr) return false;
  f.a = n->input(0);
  f.b = n->input(1);
  f.out = n->output(0);
  if (f.a == nullptr || f.b == nullptr || !IsFloatType(f.out->dtype) || f.a->dtype != f.out->dtype ||
      f.b->dtype != f.out->dtype)
    return false;
  if (!f.a->shape.rank_known || !f.b->shape.rank_known || f.a->shape.rank() < 2 ||
      f.b->shape.rank() < 2 || !f.out->shape.rank_known)
    return false;
  f.nodes = {n};
  *stage = kProduct;
  if (gemm) {
    // Gemm(A, B, C) is alpha * A' @ B' + beta * C (2-D); transA and transB read A and B
    // transposed in place, and C folds as a bias when it is one and beta is 1.
    if (n->attr_int("transA", 0) != 0) {
      if (f.a->shape.rank() != 2) return false;
      f.perm_a = {1, 0};
    }
    if (n->attr_int("transB", 0) != 0) f.perm_b = {1, 0};
    f.alpha = n->attr_float("alpha", 1.0f);
    *stage = kAlpha;
    if (Value* c = n->input(2); c != nullptr) {
      if (n->attr_float("beta", 1.0f) != 1.0f || c->dtype != f.out->dtype ||
          !BiasShaped(c, f.out->shape))
        return false;
      f.bias = c;
      *stage = kBias;
    }
  }
  std::vector<int64_t> perm;
  if (Value* x = TransposedSource(claimed, f.a, &perm); x != nullptr) {
    if (f.perm_a.empty()) {
      f.a = x;
      if (!IsIdentity(perm)) f.perm_a = perm;
    } else if (x->shape.rank() == 2) {  // transA of a Transpose: as for B below
      std::vector<int64_t> q(2);
      for (int i = 0; i < 2; ++i) q[i] = perm[f.perm_a[i]];
      f.a = x;
      f.perm_a = IsIdentity(q) ? std::vector<int64_t>{} : q;
    }
  }
  if (Value* x = TransposedSource(claimed, f.b, &perm); x != nullptr) {
    if (f.perm_b.empty()) {
      f.b = x;
      if (!IsIdentity(perm)) f.perm_b = perm;
    } else if (x->shape.rank() == 2) {
      // Gemm's transB of a Transpose: B' dim i is the Transpose's dim perm_b[i], x's
      // perm[perm_b[i]]. Autodiff writes dX = dY @ (W^T)^T so for a product that read W^T:
      // W read in place, and the W^T copy (one per weight, kept from the forward into the
      // backward) goes (a Llama's frozen LoRA targets: 2.2 GB of them at 1.1B parameters).
      std::vector<int64_t> q(2);
      for (int i = 0; i < 2; ++i) q[i] = perm[f.perm_b[i]];
      f.b = x;
      f.perm_b = IsIdentity(q) ? std::vector<int64_t>{} : q;
    }
  }
  return true;
}

// Replaces the chain by one FusedMatMul writing the chain's last value (whose name survives).
// It takes the product's place when everything it reads is made before the product (a bias or
// residual may be made later), else the chain's last node's: the schedule stays as it was
// (appended and sorted, a weight gradient read only by the optimizer would move to the end of
// the step and keep its inputs alive until then; a product whose result is transposed for a
// tied weight's gradient, at the transpose's place, would too).
void Rewrite(Graph& g, const Fusion& f) {
  Node* product = f.nodes.front();
  // The product's annotations (the precision pass's compute dtype) carry over.
  std::map<std::string, std::string> notes = product->annotations();
  std::vector<Value*> inputs = {f.a, f.b};
  if (f.bias != nullptr || f.z != nullptr) inputs.push_back(f.bias);
  if (f.z != nullptr) inputs.push_back(f.z);
  bool at_product = true;  // everything the fused node reads is made before the product
  for (const Value* in : inputs) {
    if (in == nullptr || in->producer == nullptr) continue;
    for (const auto& n : g.nodes()) {
      if (n.get() == in->producer) break;
      if (n.get() == product) {
        at_product = false;
        break;
      }
    }
  }
  const std::string name = product->name();
  Node* fused = g.ReplaceNode(f.nodes.back(), "FusedMatMul", inputs, kMixtrainDomain);  // writes f.out
  fused->set_name(name);
  if (at_product && f.nodes.size() > 1) g.MoveBefore(fused, product);
  for (size_t i = f.nodes.size() - 1; i-- > 0;) g.RemoveNode(f.nodes[i]);
  fused->annotations() = std::move(notes);
  if (!f.perm_a.empty()) fused->SetAttr(Attribute::Ints("perm_a", f.perm_a));
  if (!f.perm_b.empty()) fused->SetAttr(Attribute::Ints("perm_b", f.perm_b));
  if (!f.perm_y.empty()) fused->SetAttr(Attribute::Ints("perm_y", f.perm_y));
  if (f.alpha != 1.0f) fused->SetAttr(Attribute::Float("alpha", f.alpha));
  if (!f.activation.empty()) fused->SetAttr(Attribute::String("activation", f.activation));
  if (!g.opset_imports.contains(kMixtrainDomain)) g.opset_imports[kMixtrainDomain] = 1;
}

class FuseMatMulPass final : public Pass {
 public:
  explicit FuseMatMulPass(bool fold_relu) : fold_relu_(fold_relu) {}
  absl::string_view name() const override { return "fuse_matmul"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    // The checks below read value dtypes and shapes: infer them rather than trust whatever ran
    // before.
    MT_RETURN_IF_ERROR(InferShapes(g));
    std::vector<Fusion> fusions;
    absl::flat_hash_set<const Node*> claimed;
    for (const auto& up : g.nodes()) {  // in topological order: producers' chains come first
      Fusion f;
      Stage stage;
      if (!StartFusion(claimed, up.get(), f, &stage)) continue;
      GrowEpilogue(g, claimed, fold_relu_, f, stage);
      // A MatMul or Gemm with nothing around it to fold stays as it is (same kernels); a chain
      // whose value nothing reads is left to dead-code elimination.
      const Node* product = f.nodes.front();
      const bool folded =
          f.nodes.size() > 1 || f.a != product->input(0) || f.b != product->input(1);
      if (!folded || (f.out->consumers.empty() && !g.IsGraphOutput(f.out))) continue;
      claimed.insert(f.nodes.begin(), f.nodes.end());
      fusions.push_back(std::move(f));
    }
    // Chains are disjoint and read no other chain's intermediates, so they are rewritten
    // independently; each fused node is appended, then sorted into place.
    for (const Fusion& f : fusions) Rewrite(g, f);
    if (fusions.empty()) return false;
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }

 private:
  bool fold_relu_;
};

}  // namespace

std::unique_ptr<Pass> MakeFuseMatMulTrainingPass() { return std::make_unique<FuseMatMulPass>(false); }

MT_REGISTER_INFERENCE_PASS(fuse_matmul, 20, [] { return std::make_unique<FuseMatMulPass>(true); });

}  // namespace mixtrain
