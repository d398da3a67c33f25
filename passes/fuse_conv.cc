// fuse_conv (inference pass, position 40): a Conv and the cheap ops after it become one
// ai.mixtrain FusedConv (graph/ops/fused_conv_ops.cc), whose epilogue oneDNN applies as
// post-ops while the output tile is in cache:
//   BatchNormalization(Conv(X, W, B)) in inference mode, all constant
//                                        => Conv(X, W * s, (B - mean) * s + bias),
//                                           s = scale / sqrt(var + epsilon)
//   Add(Conv(X, W, B), Z), Z shaped like the conv's output   => FusedConv(X, W, B, Z)
//   act(...) for Relu, LeakyRelu, Sigmoid, Tanh, Clip (constant bounds)
//                                        => activation = act (after Z, as ResNets add it)
// Each step swallows an intermediate only when the chain is its sole user and it is no graph
// output. A bare Conv stays a Conv (conv_layout turns it into a channels-last FusedConv).
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/shape_inference.h"
#include "passes/conv_pass_util.h"
#include "passes/inference.h"
#include "passes/pass_registry.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

using conv_pass::ConstantTensor;
using conv_pass::Determined;
using conv_pass::IsFloatType;
using conv_pass::IsOnnx;
using conv_pass::SoleConsumer;
using conv_pass::ToFixedPoint;

// A Conv the pass may fold into: ONNX Conv with one output and X, W (and B) of one float type.
bool FusibleConv(const Node& n) {
  if (!IsOnnx(n, "Conv") || n.num_outputs() != 1 || n.output(0) == nullptr) return false;
  const Value* x = n.input(0);
  const Value* w = n.input(1);
  const Value* b = n.input(2);
  const DType t = n.output(0)->dtype;
  return x != nullptr && w != nullptr && IsFloatType(t) && x->dtype == t && w->dtype == t &&
         (b == nullptr || b->dtype == t) && x->shape.rank_known && x->shape.rank() >= 3;
}

// Replaces `conv` and the nodes it feeds in `swallowed` (in order) by one `op` node with
// conv's attributes that reads `inputs` and writes `out` (the chain's last value, whose name
// survives).
Node* ReplaceConv(Graph& g, Node* conv, const std::vector<Node*>& swallowed, Value* out,
                  const std::vector<Value*>& inputs, const std::string& op,
                  const std::string& domain) {
  const std::string name = conv->name();
  std::vector<Attribute> attrs = conv->attributes();
  std::map<std::string, std::string> notes = conv->annotations();  // precision=..., kept
  for (auto it = swallowed.rbegin(); it != swallowed.rend(); ++it) g.RemoveNode(*it);
  g.RemoveNode(conv);
  Node* n = g.AddNode(op, inputs, {out}, name, domain);
  for (Attribute& a : attrs) n->SetAttr(std::move(a));
  n->annotations() = std::move(notes);
  return n;
}

// ---- BatchNormalization folding -----------------------------------------------------------

// BN(Conv(X, W, B), scale, bias, mean, var) => Conv(X, W', B'), when BN is in inference mode
// with only Y, and W, B and the BN parameters are constants.
bool FoldBatchNorm(Graph& g, Node* conv) {
  if (!FusibleConv(*conv)) return false;
  Node* bn = SoleConsumer(g, conv->output(0));
  if (bn == nullptr || !IsOnnx(*bn, "BatchNormalization") || bn->input(0) != conv->output(0) ||
      bn->attr_int("training_mode", 0) != 0 || bn->output(0) == nullptr)
    return false;
  for (size_t i = 1; i < bn->num_outputs(); ++i)
    if (bn->output(i) != nullptr) return false;
  Value* out = bn->output(0);
  if (out->consumers.empty() && !g.IsGraphOutput(out)) return false;
  const Tensor* w = ConstantTensor(g, conv->input(1));
  const Tensor* b = conv->input(2) ? ConstantTensor(g, conv->input(2)) : nullptr;
  if (w == nullptr || (conv->input(2) != nullptr && b == nullptr) || w->rank() < 3) return false;
  const int64_t m = w->dims()[0];
  const Tensor* p[4];  // scale, bias, mean, var
  for (int i = 0; i < 4; ++i) {
    p[i] = ConstantTensor(g, bn->input(1 + i));
    if (p[i] == nullptr || p[i]->numel() != m || p[i]->rank() != 1) return false;
  }
  const double eps = bn->attr_float("epsilon", 1e-5f);
  const int64_t per_m = w->numel() / m;
  Tensor nw(DType::kF32, w->dims()), nb(DType::kF32, {m});
  for (int64_t o = 0; o < m; ++o) {
    const double s = p[0]->GetDouble(o) / std::sqrt(p[3]->GetDouble(o) + eps);
    for (int64_t i = 0; i < per_m; ++i)
      nw.data_as<float>()[o * per_m + i] = static_cast<float>(w->GetDouble(o * per_m + i) * s);
    const double bias = b ? b->GetDouble(o) : 0.0;
    nb.data_as<float>()[o] =
        static_cast<float>((bias - p[2]->GetDouble(o)) * s + p[1]->GetDouble(o));
  }
  const DType t = out->dtype;
  Value* wv = g.AddInitializer(g.UniqueName(conv->input(1)->name + "_bn_folded"),
                               ConvertFloat(nw, t));
  Value* bv = g.AddInitializer(g.UniqueName(conv->name() + "_bias_bn_folded"),
                               ConvertFloat(nb, t));
  ReplaceConv(g, conv, {bn}, out, {conv->input(0), wv, bv}, "Conv", "");
  return true;
}

// ---- FusedConv ----------------------------------------------------------------------------

// The FusedConv activation `n` computes, with its parameters; false when n is none.
bool ActivationOf(const Graph& g, const Node& n, std::string* act, std::vector<float>* params) {
  params->clear();
  if (IsOnnx(n, "Relu") || IsOnnx(n, "Sigmoid") || IsOnnx(n, "Tanh")) {
    *act = n.op_type();
    return true;
  }
  if (IsOnnx(n, "LeakyRelu")) {
    *act = "LeakyRelu";
    params->push_back(n.attr_float("alpha", 0.01f));
    return true;
  }
  if (IsOnnx(n, "Clip")) {
    // Opset < 11 gives the bounds as attributes, later opsets as optional scalar inputs.
    float lo = n.attr_float("min", std::numeric_limits<float>::lowest());
    float hi = n.attr_float("max", std::numeric_limits<float>::max());
    for (size_t i = 1; i < 3 && i < n.num_inputs(); ++i) {
      if (n.input(i) == nullptr) continue;
      const Tensor* t = ConstantTensor(g, n.input(i));
      if (t == nullptr || t->numel() != 1) return false;
      (i == 1 ? lo : hi) = static_cast<float>(t->GetDouble(0));
    }
    *act = "Clip";
    *params = {lo, hi};
    return true;
  }
  return false;
}

// Conv, then Add(., Z) if it fits, then an activation if it fits.
bool FuseChain(Graph& g, Node* conv) {
  if (!FusibleConv(*conv)) return false;
  Value* y = conv->output(0);
  std::vector<Node*> swallowed;
  Value* z = nullptr;
  std::string act;
  std::vector<float> params;
  Node* c = SoleConsumer(g, y);
  if (c != nullptr && IsOnnx(*c, "Add") && c->num_inputs() == 2 && c->output(0) != nullptr) {
    // Add(Y, Z) => Z, when Z is exactly Y's shape (no broadcast) and type.
    Value* other = c->input(0) == y ? c->input(1) : c->input(0);
    if (other != y && other->dtype == y->dtype && Determined(y->shape) &&
        other->shape == y->shape && c->output(0)->shape == y->shape) {
      z = other;
      swallowed.push_back(c);
      y = c->output(0);
      c = SoleConsumer(g, y);
    }
  }
  if (c != nullptr && c->num_outputs() == 1 && c->output(0) != nullptr && c->input(0) == y &&
      c->output(0)->dtype == y->dtype && ActivationOf(g, *c, &act, &params)) {
    swallowed.push_back(c);
    y = c->output(0);
  }
  if (swallowed.empty() || (y->consumers.empty() && !g.IsGraphOutput(y))) return false;
  std::vector<Value*> inputs = {conv->input(0), conv->input(1), conv->input(2)};
  if (z != nullptr) inputs.push_back(z);
  while (inputs.back() == nullptr) inputs.pop_back();
  Node* n = ReplaceConv(g, conv, swallowed, y, inputs, "FusedConv", "ai.mixtrain");
  if (!act.empty()) n->SetAttr(Attribute::String("activation", act));
  if (!params.empty()) n->SetAttr(Attribute::Floats("activation_params", params));
  if (!g.opset_imports.contains("ai.mixtrain")) g.opset_imports["ai.mixtrain"] = 1;
  return true;
}

class FuseConvPass final : public Pass {
 public:
  absl::string_view name() const override { return "fuse_conv"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    // The dtype checks read value types: infer them rather than trust whatever ran before.
    MT_RETURN_IF_ERROR(InferShapes(g));
    bool changed = false;
    for (auto rule : {FoldBatchNorm, FuseChain}) changed |= ToFixedPoint(g, rule);
    if (changed) MT_RETURN_IF_ERROR(g.TopoSort());
    return changed;
  }
};

// The training step's variant: FuseChain only (see MakeFuseConvEpiloguePass). A gradient that
// reads the conv's output or the activation's input (LeakyRelu's, Clip's) makes it a second
// reader, so SoleConsumer refuses those chains.
class FuseConvEpiloguePass final : public Pass {
 public:
  absl::string_view name() const override { return "fuse_conv_epilogue"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    MT_RETURN_IF_ERROR(InferShapes(g));
    const bool changed = ToFixedPoint(g, FuseChain);
    if (changed) MT_RETURN_IF_ERROR(g.TopoSort());
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseConvEpiloguePass() { return std::make_unique<FuseConvEpiloguePass>(); }

MT_REGISTER_INFERENCE_PASS(fuse_conv, 40, [] { return std::make_unique<FuseConvPass>(); });
MT_REGISTER_PASS(fuse_conv_epilogue, [] { return MakeFuseConvEpiloguePass(); });

}  // namespace mixtrain
