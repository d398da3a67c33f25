// The autodiff pass: reverse mode from the loss to every trainable parameter (docs/architecture.md, "The pipeline").
// Walks the forward nodes backwards, asks each node's rule for its input gradients, sums fan-out,
// and adds "grad/<initializer>" outputs. Only the part of the graph between trainable parameters
// and the loss is differentiated; what the rules emit and nothing uses is pruned.
#include "passes/autodiff.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <regex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/shape_inference.h"
#include "passes/training.h"
#include "passes/parameters.h"
#include "passes/pass_registry.h"
#include "passes/passes.h"
#include "passes/unroll_loop.h"

namespace mixtrain {

// ---------------------------------------------------------------- the table

namespace {
std::map<std::pair<std::string, std::string>, GradRuleRow>& RuleTable() {
  static auto* t = new std::map<std::pair<std::string, std::string>, GradRuleRow>();
  return *t;
}
std::mutex& RuleMutex() {
  static std::mutex mu;
  return mu;
}
std::string NormDomain(std::string_view d) { return d == "ai.onnx" ? "" : std::string(d); }
}  // namespace

void RegisterGradRules(std::initializer_list<GradRuleRow> rows) {
  std::lock_guard<std::mutex> lock(RuleMutex());
  for (const GradRuleRow& r : rows) {
    auto key = std::make_pair(NormDomain(r.domain), std::string(r.op_type));
    MT_CHECK(!RuleTable().contains(key)) << "gradient rule registered twice: " << r.op_type;
    RuleTable().emplace(key, r);
  }
}

const GradRuleRow* FindGradRule(std::string_view domain, std::string_view op_type) {
  std::lock_guard<std::mutex> lock(RuleMutex());
  auto it = RuleTable().find(std::make_pair(NormDomain(domain), std::string(op_type)));
  return it == RuleTable().end() ? nullptr : &it->second;
}

absl::Status GradContext::SetGradSumTo(size_t i, Value* g, const Shape& shape) {
  absl::StatusOr<Value*> s = b_.SumTo(g, shape, X(i));
  if (!s.ok()) return Error(std::string(s.status().message()));
  SetGrad(i, *s);
  return absl::OkStatus();
}

absl::Status GradContext::Error(std::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat("gradient of node '", node_.name(), "' (",
                                                 node_.op_type(), "): ", std::string(msg)));
}

// ---------------------------------------------------------------- the pass

namespace {

// Whether gradients flow from node n's outputs into input i. An op without a rule counts its float
// inputs as differentiable, so a path through it is reported rather than silently cut.
bool IsDiffEdge(const Node& n, size_t i, const GradRuleRow* row) {
  const Value* v = n.input(i);
  if (v == nullptr || !IsFloat(v->dtype)) return false;
  return row == nullptr || InMask(row->differentiable, i);
}

class AutodiffPass final : public Pass {
 public:
  explicit AutodiffPass(AutodiffOptions o) : opt_(std::move(o)) {}
  absl::string_view name() const override { return "autodiff"; }
  absl::StatusOr<bool> Run(Graph& g) override;

 private:
  absl::StatusOr<std::vector<Value*>> TrainableParams(
      const Graph& g, const absl::flat_hash_set<const Value*>& reaches_loss) const;
  AutodiffOptions opt_;
};

absl::StatusOr<std::vector<Value*>> AutodiffPass::TrainableParams(
    const Graph& g, const absl::flat_hash_set<const Value*>& reaches_loss) const {
  MT_ASSIGN_OR_RETURN(absl::flat_hash_set<const Value*> selected,
                      SelectTrainable(g, {opt_.trainable, opt_.freeze}));
  std::vector<Value*> params;
  for (Value* v : g.initializers())
    if (selected.contains(v) && reaches_loss.contains(v)) params.push_back(v);
  return params;
}

absl::StatusOr<bool> AutodiffPass::Run(Graph& g) {
  MT_RETURN_IF_ERROR(g.TopoSort());
  MT_RETURN_IF_ERROR(InferShapes(g));
  Value* loss = g.FindValue(opt_.loss);
  if (loss == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("no value named '", opt_.loss,
                                                   "' to differentiate (run the loss pass?)"));
  if (!IsFloat(loss->dtype))
    return absl::InvalidArgumentError(
        absl::StrCat("loss '", loss->name, "' is ", DTypeName(loss->dtype), ", not a float"));
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());

  // Values the loss depends on through differentiable edges.
  absl::flat_hash_set<const Value*> reaches{loss};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    bool out_reaches = false;
    for (Value* o : n->outputs()) out_reaches |= o != nullptr && reaches.contains(o);
    if (!out_reaches) continue;
    const GradRuleRow* row = FindGradRule(n->domain(), n->op_type());
    for (size_t i = 0; i < n->num_inputs(); ++i)
      if (IsDiffEdge(*n, i, row)) reaches.insert(n->input(i));
  }
  MT_ASSIGN_OR_RETURN(std::vector<Value*> params, TrainableParams(g, reaches));
  if (params.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "no trainable parameter reaches '", loss->name, "' (check --freeze/--trainable)"));

  // Values that depend on a trainable parameter; needed = on a path param -> loss.
  absl::flat_hash_set<const Value*> depends(params.begin(), params.end());
  for (Node* n : order) {
    const GradRuleRow* row = FindGradRule(n->domain(), n->op_type());
    bool in_depends = false;
    for (size_t i = 0; i < n->num_inputs(); ++i)
      in_depends |= IsDiffEdge(*n, i, row) && depends.contains(n->input(i));
    if (!in_depends) continue;
    for (Value* o : n->outputs())
      if (o && IsFloat(o->dtype)) depends.insert(o);
  }
  auto needed = [&](const Value* v) { return v && depends.contains(v) && reaches.contains(v); };

  GradBuilder b(g);
  absl::flat_hash_map<const Value*, std::vector<Value*>> contrib;
  {
    Tensor one(loss->dtype, loss->shape.fully_known() ? loss->shape.sizes()
                                                      : std::vector<int64_t>{});
    if (one.numel() != 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "loss '", loss->name, "' must be a scalar, has shape ", loss->shape.ToString()));
    b.set_scope(absl::StrCat(loss->name, "/grad"));
    Value* seed = b.Scalar(1.0, loss->dtype);
    contrib[loss].push_back(loss->shape.rank() > 0 ? b.ReshapeLike(seed, loss) : seed);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    std::vector<Value*> dy(n->num_outputs(), nullptr);
    bool any_dy = false;
    b.set_scope(absl::StrCat(n->name(), "/grad"));
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      Value* o = n->output(i);
      if (!needed(o)) continue;
      auto c = contrib.find(o);
      if (c == contrib.end() || c->second.empty()) continue;
      dy[i] = b.Sum(c->second);
      any_dy = true;
    }
    const GradRuleRow* row = FindGradRule(n->domain(), n->op_type());
    std::vector<bool> needs(n->num_inputs(), false);
    bool any_need = false;
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      needs[i] = IsDiffEdge(*n, i, row) && needed(n->input(i));
      any_need |= needs[i];
    }
    if (!any_dy || !any_need) continue;
    absl::Status st;
    if (row == nullptr) {
      std::string why;
      if (IsRecurrentOp(*n)) {
        const std::string reason = WhyRnnNotUnrolled(*n);
        why = reason.empty() ? ": the unroll_rnn pass writes it out in differentiable ops; run it first"
                             : absl::StrCat(": training unrolls recurrent ops (unroll_rnn), but not this one: ", reason);
      } else if (IsLoopOp(*n)) {
        const std::string reason = WhyLoopNotUnrolled(g, *n, opt_.evaluator);
        why = reason.empty() ? ": the unroll_loop pass writes it out iteration by iteration; run it first"
                             : absl::StrCat(": training unrolls loops (unroll_loop), but not this one: ", reason);
      }
      st = absl::UnimplementedError(absl::StrCat("no gradient rule for op ", n->op_type(),
                                                 " (node '", n->name(), "')", why));
    }
    GradContext ctx(*n, b, std::move(dy), std::move(needs));
    if (st.ok()) st = row->rule(ctx);
    if (!st.ok()) {
      if (opt_.problems == nullptr) return st;
      opt_.problems->push_back(std::string(st.message()));
      continue;
    }
    for (size_t i = 0; i < n->num_inputs(); ++i)
      if (ctx.needs(i) && ctx.grads()[i] != nullptr)
        contrib[n->input(i)].push_back(ctx.grads()[i]);
  }

  if (opt_.problems != nullptr && !opt_.problems->empty())
    return absl::UnimplementedError(absl::StrCat(opt_.problems->size(),
                                                 " node(s) block the gradient; the first: ",
                                                 opt_.problems->front()));
  // One "grad/<name>" output per parameter.
  for (Value* p : params) {
    b.set_scope(absl::StrCat(p->name, "/grad"));
    auto c = contrib.find(p);
    Value* sum = c == contrib.end() ? nullptr : b.Sum(c->second);
    if (sum == nullptr) sum = b.Scalar(0, p->dtype);  // every path was cut (e.g. by a Where)
    Value* out = g.AddValue(g.UniqueName(absl::StrCat(kGradPrefix, p->name)), p->dtype, p->shape);
    if (sum->is_initializer() || sum->shape != p->shape) {
      b.graph().AddNode("Expand", {sum, b.ShapeOf(p)}, {out},
                        g.UniqueName(absl::StrCat(p->name, "/grad/Expand")));
    } else {
      b.graph().AddNode("Identity", {sum}, {out}, g.UniqueName(absl::StrCat(p->name, "/grad/Identity")));
    }
    g.AddOutput(out);
  }

  // Prune what the rules emitted and nothing uses (e.g. gradients of frozen inputs).
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<Node*> dead;
    for (const auto& up : g.nodes()) {
      Node* n = up.get();
      if (!b.created().contains(n)) continue;
      bool used = false;
      for (Value* o : n->outputs()) used |= o && (!o->consumers.empty() || g.IsGraphOutput(o));
      if (!used) dead.push_back(n);
    }
    for (Node* n : dead) {
      std::vector<Value*> ins(n->inputs().begin(), n->inputs().end());
      g.RemoveNode(n);
      for (Value* in : ins)
        if (in && in->consumers.empty() && b.created_constant(in)) g.RemoveValue(in);
      changed = true;
    }
  }
  MT_RETURN_IF_ERROR(g.TopoSort());
  return true;
}

}  // namespace

std::unique_ptr<Pass> MakeAutodiffPass(AutodiffOptions options) {
  return std::make_unique<AutodiffPass>(std::move(options));
}

MT_REGISTER_PASS(autodiff, [] { return MakeAutodiffPass(); });

std::vector<std::string> GradientOutputs(const Graph& g) {
  std::vector<std::string> names;
  for (const Value* v : g.outputs())
    if (v->name.rfind(kGradPrefix, 0) == 0) names.push_back(v->name);
  return names;
}

}  // namespace mixtrain
