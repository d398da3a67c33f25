// fuse_gelu (inference pass, position 10): the GELU as exporters spell it out, exact or in its
// tanh approximation (GPT-2's "gelu_new", torch's approximate="tanh" below opset 20, Keras's
// approximate=True),
//   y = x * 0.5 * (1 + erf(x / sqrt(2)))                                   approximate="none"
//   y = x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))            approximate="tanh"
// becomes one Gelu node: ONNX's Gelu when the graph's default opset is 20 or newer, else
// ai.mixtrain Gelu (graph/ops/fused_eltwise_ops.cc), which has the same meaning. One polynomial
// pass instead of five (erf) or eight (tanh) elementwise passes over the activation, one GeluGrad
// instead of a dozen ops in the backward, and fuse_matmul (position 20) then folds it into the
// MatMul that feeds it.
//
// The erf argument is Mul(x, 1/sqrt2) or Div(x, sqrt2). The tanh argument is
// Mul(sqrt(2/pi), Add(x, Mul(0.044715, x^3))), each product and sum in either order, x^3 being
// Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x). After Add(erf or tanh, 1) the halving and the
// product with x come in any of the orders exporters emit:
//   Mul(Mul(x, 0.5), a)   (torch.export / dynamo)      Mul(Mul(x, a), 0.5)   (torch.onnx.export)
//   Mul(Mul(a, 0.5), x)
// Constants are compared by value within the rounding of the graph's dtype; every swallowed
// intermediate must be used only by the pattern and be no graph output.
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
using fusion::Near;
using fusion::OtherInput;
using fusion::SoleConsumer;

constexpr double kSqrt2 = 1.41421356237309505;
constexpr double kSqrt2OverPi = 0.79788456080286536;
constexpr double kGeluCubic = 0.044715;

struct Match {
  Value* x = nullptr;
  Value* y = nullptr;
  std::vector<Node*> nodes;  // every node the Gelu replaces, producers first
  const char* approximate = "none";
};

// The input of `v`'s producer, a Mul, other than the constant `c` (in either place), when `v`
// is used once; the Mul is appended to `nodes`.
Value* ProductWithConstant(const Graph& g, const Value* v, double c, double tol, std::vector<Node*>* nodes) {
  Node* p = v->producer;
  if (p == nullptr || !IsOnnx(*p, "Mul") || p->num_inputs() != 2 || SoleConsumer(g, v) == nullptr) return nullptr;
  const int64_t rank = v->shape.rank_known ? v->shape.rank() : 0;
  for (int i = 0; i < 2; ++i) {
    if (Near(ConstantScalar(g, p->input(1 - i), rank), c, tol)) {
      nodes->push_back(p);
      return p->input(i);
    }
  }
  return nullptr;
}

// x when `v` (the erf argument) is Mul(x, 1/sqrt2) or Div(x, sqrt2) whose result only the Erf
// uses; the Mul/Div goes to m->nodes.
Value* ErfArgument(const Graph& g, const Value* v, double tol, Match* m) {
  if (Value* x = ProductWithConstant(g, v, 1.0 / kSqrt2, tol, &m->nodes)) return x;
  Node* p = v->producer;
  if (p == nullptr || SoleConsumer(g, v) == nullptr || p->num_inputs() != 2) return nullptr;
  const int64_t rank = v->shape.rank_known ? v->shape.rank() : 0;
  if (IsOnnx(*p, "Div") && Near(ConstantScalar(g, p->input(1), rank), kSqrt2, tol)) {
    m->nodes.push_back(p);
    return p->input(0);
  }
  return nullptr;
}

// Whether `v` is x^3: Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x), each result used once;
// its nodes are appended to `nodes`, producers first.
bool IsCube(const Graph& g, const Value* v, const Value* x, double tol, std::vector<Node*>* nodes) {
  Node* p = v->producer;
  if (p == nullptr || p->num_inputs() != 2 || SoleConsumer(g, v) == nullptr) return false;
  if (IsOnnx(*p, "Pow")) {
    if (p->input(0) != x || !Near(ConstantScalar(g, p->input(1), x->shape.rank()), 3.0, tol)) return false;
    nodes->push_back(p);
    return true;
  }
  if (!IsOnnx(*p, "Mul")) return false;
  for (int i = 0; i < 2; ++i) {
    if (p->input(i) != x) continue;
    const Value* sq = p->input(1 - i);
    Node* q = sq->producer;
    if (q == nullptr || !IsOnnx(*q, "Mul") || q->num_inputs() != 2 || q->input(0) != x || q->input(1) != x ||
        SoleConsumer(g, sq) != p)
      continue;
    nodes->insert(nodes->end(), {q, p});
    return true;
  }
  return false;
}

// x when `v` (the tanh argument) is Mul(sqrt(2/pi), Add(x, Mul(0.044715, x^3))), each product
// and sum in either order and each intermediate used only by the next; the nodes go to m->nodes,
// producers first.
Value* TanhArgument(const Graph& g, const Value* v, double tol, Match* m) {
  std::vector<Node*> outer;
  Value* sum = ProductWithConstant(g, v, kSqrt2OverPi, tol, &outer);
  if (sum == nullptr) return nullptr;
  Node* add = sum->producer;
  if (add == nullptr || !IsOnnx(*add, "Add") || add->num_inputs() != 2 || SoleConsumer(g, sum) == nullptr)
    return nullptr;
  for (int i = 0; i < 2; ++i) {
    Value* x = add->input(i);
    std::vector<Node*> scaled, cube;
    Value* c = ProductWithConstant(g, add->input(1 - i), kGeluCubic, tol, &scaled);
    if (c == nullptr || !IsCube(g, c, x, tol, &cube)) continue;
    m->nodes.insert(m->nodes.end(), cube.begin(), cube.end());
    m->nodes.insert(m->nodes.end(), {scaled[0], add, outer[0]});
    return x;
  }
  return nullptr;
}

// The product of `a` (= 1 + erf(...)) with x and 0.5, in one of the orders above; its result
// goes to m->y, its nodes to m->nodes.
bool ProductWithHalfX(const Graph& g, Value* a, Value* x, double tol, Match* m) {
  Node* mul = SoleConsumer(g, a);
  if (mul == nullptr || !IsOnnx(*mul, "Mul")) return false;
  Value* other = OtherInput(*mul, a);
  if (other == nullptr) return false;
  const int64_t rank = x->shape.rank();
  if (other == x) {
    // Mul(Mul(x, a), 0.5)
    Node* half = SoleConsumer(g, mul->output(0));
    if (half == nullptr || !IsOnnx(*half, "Mul")) return false;
    if (!Near(ConstantScalar(g, OtherInput(*half, mul->output(0)), rank), 0.5, tol)) return false;
    m->nodes.insert(m->nodes.end(), {mul, half});
    m->y = half->output(0);
    return true;
  }
  if (Near(ConstantScalar(g, other, rank), 0.5, tol)) {
    // Mul(Mul(a, 0.5), x)
    Node* last = SoleConsumer(g, mul->output(0));
    if (last == nullptr || !IsOnnx(*last, "Mul") || OtherInput(*last, mul->output(0)) != x)
      return false;
    m->nodes.insert(m->nodes.end(), {mul, last});
    m->y = last->output(0);
    return true;
  }
  // Mul(Mul(x, 0.5), a)
  Node* half = other->producer;
  if (half == nullptr || !IsOnnx(*half, "Mul") || SoleConsumer(g, other) != mul) return false;
  Value* hx = OtherInput(*half, x);
  if (hx == nullptr || !Near(ConstantScalar(g, hx, rank), 0.5, tol)) return false;
  m->nodes.insert(m->nodes.end(), {half, mul});
  m->y = mul->output(0);
  return true;
}

// The whole pattern around Erf or Tanh node `erf`; m->approximate says which.
bool MatchGelu(const Graph& g, Node* erf, Match* m) {
  const bool tanh = IsOnnx(*erf, "Tanh");
  if (!(tanh || IsOnnx(*erf, "Erf")) || erf->num_inputs() != 1 || erf->output(0) == nullptr) return false;
  Value* e = erf->output(0);
  if (!fusion::IsFloatType(e->dtype) || !fusion::Determined(e->shape)) return false;
  const double tol = fusion::ConstantTolerance(e->dtype);
  m->approximate = tanh ? "tanh" : "none";
  Value* x = tanh ? TanhArgument(g, erf->input(0), tol, m) : ErfArgument(g, erf->input(0), tol, m);
  if (x == nullptr || x->dtype != e->dtype || !(x->shape == e->shape)) return false;
  m->x = x;
  m->nodes.push_back(erf);
  // Add(erf, 1)
  Node* add = SoleConsumer(g, e);
  if (add == nullptr || !IsOnnx(*add, "Add") ||
      !Near(ConstantScalar(g, OtherInput(*add, e), e->shape.rank()), 1.0, tol))
    return false;
  m->nodes.push_back(add);
  if (!ProductWithHalfX(g, add->output(0), x, tol, m)) return false;
  return m->y != nullptr && m->y->dtype == x->dtype && m->y->shape == x->shape;
}

class FuseGeluPass final : public Pass {
 public:
  absl::string_view name() const override { return "fuse_gelu"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    // The matches read value dtypes: infer them rather than trust whatever ran before.
    MT_RETURN_IF_ERROR(InferShapes(g));
    std::vector<Match> matches;
    for (const auto& n : g.nodes()) {
      Match m;
      if (MatchGelu(g, n.get(), &m)) matches.push_back(std::move(m));
    }
    // Matches are disjoint: each is anchored at its own Erf and swallows only values with one
    // consumer inside the pattern.
    const bool onnx_gelu = g.opset("") >= 20;
    for (const Match& m : matches) {
      const std::string name = absl::StrCat(m.nodes.back()->name(), "_gelu");
      for (auto it = m.nodes.rbegin(); it != m.nodes.rend(); ++it) g.RemoveNode(*it);
      Node* gelu = g.AddNode("Gelu", {m.x}, {m.y}, g.UniqueName(name),
                             onnx_gelu ? "" : kMixtrainDomain);
      gelu->SetAttr(Attribute::String("approximate", m.approximate));
    }
    if (matches.empty()) return false;
    if (!onnx_gelu && !g.opset_imports.contains(kMixtrainDomain))
      g.opset_imports[kMixtrainDomain] = 1;
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }
};

}  // namespace

MT_REGISTER_INFERENCE_PASS(fuse_gelu, 10, [] { return std::make_unique<FuseGeluPass>(); });

}  // namespace mixtrain
