// fuse_softmax (inference pass, position 30): attention's masked softmax,
//   Softmax(Where(mask, [Mul(X, scale)], fill), axis = last)  =>  MaskedSoftmax(X, mask)
// (ai.mixtrain, graph/ops/fused_eltwise_ops.cc; attributes fill, scale), one pass over the
// scores instead of three. fill is a constant scalar, directly or as Expand(scalar, shape) (what
// torch's full_like exports); the scale Mul is folded only when fuse_matmul has not already
// folded it into the product. Fires only when exactly safe: mask bool and broadcasting to X's
// shape, the Where's result shaped like X, the fill broadcasting into X, softmax over the last
// axis, and the Where (and Mul) results used only by the chain and no graph outputs (Shape ops
// reading the Mul's result, as full_like's fill does, move to the Mul's input).
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/onnx_export.h"
#include "graph/shape_inference.h"
#include "passes/fusion_match.h"
#include "passes/inference.h"

namespace mixtrain {
namespace {

using fusion::ConstantScalar;
using fusion::IsOnnx;
using fusion::SoleConsumer;

struct Match {
  Node* softmax = nullptr;
  Node* where = nullptr;
  Node* mul = nullptr;  // the folded scale, or null
  Value* x = nullptr;
  Value* mask = nullptr;
  float fill = 0, scale = 1;
};

// `b` broadcasts into `a` (numpy rules) without growing it.
bool BroadcastsInto(const Shape& b, const Shape& a) {
  if (!fusion::Determined(b) || !fusion::Determined(a)) return false;
  auto s = BroadcastShapes(b, a);
  return s.ok() && *s == a;
}

// The constant every element of `v` holds when v broadcasts into shape `x`: a constant scalar,
// or Expand(constant scalar, shape) whose result broadcasts into x or whose shape is Shape(y)
// of a y shaped like x (torch's full_like; shape inference may not see through it).
std::optional<double> FillValue(const Graph& g, const Value* v, const Shape& x) {
  const int64_t rank = x.rank();
  if (auto c = ConstantScalar(g, v, rank)) return BroadcastsInto(v->shape, x) ? c : std::nullopt;
  const Node* p = v->producer;
  if (p == nullptr || !IsOnnx(*p, "Expand") || p->num_inputs() != 2) return std::nullopt;
  auto c = ConstantScalar(g, p->input(0), rank);
  if (!c.has_value()) return std::nullopt;
  if (BroadcastsInto(v->shape, x)) return c;
  const Node* shape_of = p->input(1)->producer;
  if (shape_of != nullptr && IsOnnx(*shape_of, "Shape") && shape_of->num_inputs() == 1 &&
      !shape_of->has_attr("start") && !shape_of->has_attr("end") &&
      shape_of->input(0)->shape == x)
    return c;
  return std::nullopt;
}

// Whether every reader of `x` other than `where` is a Shape op (torch's full_like reads the
// scores' shape for the fill), which can read the shape of a same-shaped value instead.
bool OthersReadOnlyTheShape(const Graph& g, const Value* x, const Node* where) {
  if (g.IsGraphOutput(x)) return false;
  for (const Node* c : x->consumers)
    if (c != where && !IsOnnx(*c, "Shape")) return false;
  return true;
}

bool MatchMaskedSoftmax(const Graph& g, Node* sm, Match* m) {
  if (!IsOnnx(*sm, "Softmax") || sm->num_inputs() != 1 || sm->output(0) == nullptr) return false;
  Value* w = sm->input(0);
  Node* where = w->producer;
  if (where == nullptr || !IsOnnx(*where, "Where") || where->num_inputs() != 3 ||
      SoleConsumer(g, w) != sm)
    return false;
  Value* mask = where->input(0);
  Value* x = where->input(1);
  Value* fill = where->input(2);
  const Shape& s = x->shape;
  if (!fusion::IsFloatType(x->dtype) || !fusion::Determined(s) || s.rank() == 0) return false;
  if (mask->dtype != DType::kBool || fill->dtype != x->dtype || !BroadcastsInto(mask->shape, s))
    return false;
  // The Where's result is shaped like X when mask and fill broadcast into X.
  const std::optional<double> f = FillValue(g, fill, s);
  if (!f.has_value()) return false;
  // Opset < 13 coerces to 2-D at `axis` (default 1); either way the last axis alone is one row.
  const int64_t rank = s.rank();
  int64_t axis = sm->attr_int("axis", g.opset("") < 13 ? 1 : -1);
  if (axis < 0) axis += rank;
  if (axis != rank - 1) return false;
  m->softmax = sm;
  m->where = where;
  m->mask = mask;
  m->x = x;
  m->fill = static_cast<float>(*f);
  // Mul(X0, scale) => scale, when the Where alone reads its values (Shape readers move to X0,
  // which has the same shape).
  Node* mul = x->producer;
  if (mul != nullptr && IsOnnx(*mul, "Mul") && mul->num_inputs() == 2 &&
      OthersReadOnlyTheShape(g, x, where) && mul->input(0) != mul->input(1)) {
    for (int i = 0; i < 2; ++i) {
      Value* x0 = mul->input(i);
      auto c = ConstantScalar(g, mul->input(1 - i), rank);
      if (c.has_value() && x0->dtype == x->dtype && x0->shape == s) {
        m->mul = mul;
        m->x = x0;
        m->scale = static_cast<float>(*c);
        break;
      }
    }
  }
  return true;
}

class FuseSoftmaxPass final : public Pass {
 public:
  absl::string_view name() const override { return "fuse_softmax"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    // The matches read value dtypes: infer them rather than trust whatever ran before.
    MT_RETURN_IF_ERROR(InferShapes(g));
    std::vector<Match> matches;
    for (const auto& n : g.nodes()) {
      Match m;
      if (MatchMaskedSoftmax(g, n.get(), &m)) matches.push_back(m);
    }
    for (const Match& m : matches) {
      Value* y = m.softmax->output(0);
      const std::string name = g.UniqueName(absl::StrCat(m.softmax->name(), "_masked"));
      g.RemoveNode(m.softmax);
      g.RemoveNode(m.where);  // an Expand feeding it is left to dead-code elimination
      if (m.mul != nullptr) {
        const std::vector<Node*> shape_readers = m.mul->output(0)->consumers;
        for (Node* c : shape_readers) g.SetInput(c, 0, m.x);
        g.RemoveNode(m.mul);
      }
      Node* fused = g.AddNode("MaskedSoftmax", {m.x, m.mask}, {y}, name, kMixtrainDomain);
      fused->SetAttr(Attribute::Float("fill", m.fill));
      if (m.scale != 1.0f) fused->SetAttr(Attribute::Float("scale", m.scale));
    }
    if (matches.empty()) return false;
    if (!g.opset_imports.contains(kMixtrainDomain)) g.opset_imports[kMixtrainDomain] = 1;
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }
};

}  // namespace

MT_REGISTER_INFERENCE_PASS(fuse_softmax, 30, [] { return std::make_unique<FuseSoftmaxPass>(); });

}  // namespace mixtrain
