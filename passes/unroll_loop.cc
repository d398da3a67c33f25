// unroll_loop (before autodiff in the training step and the gradient graph, in the evaluation
// graph, and first in the inference pipeline): an ONNX Loop or Scan whose number of iterations is
// known once the model is canonicalized becomes its body written out once per iteration, so
// autodiff differentiates it like the rest of the graph and every backend runs it (neither op has
// a kernel). tf2onnx writes a Keras SimpleRNN or GRU as such a Loop (the TensorFlow while loop of
// the layer, with the weights as loop-carried values).
//
// Loop: iteration i binds the body's inputs to (i, the condition, the carried values), and its
// outputs carry into iteration i+1. The number of iterations is M where given, cut short where the
// body's condition turns false; both must be known here: M a constant, the condition a function of
// constants and the iteration number (tf2onnx's `i < n && t < n`, a TorchScript for-loop's `true`).
// The pass evaluates that with the CPU kernels (the HostEvaluator it is handed, passes/target.h) while
// it unrolls: every body node whose inputs are all constants (iteration counters, the condition,
// a Gather's index) is run once and becomes an initializer, so the unrolled graph keeps only the
// computation on data. Loop's scan outputs are stacked along a new axis 0. Scan: its inputs are
// split along their scan axes (read backwards where reversed); its outputs are stacked along
// theirs (prepended where reversed). The node's outputs keep their names. The result is
// canonicalized again (passes/canonicalize.h): tf2onnx's per-step Gathers of the sequence, at
// indices now constant, become one Split, whose gradient is one Concat instead of a scatter of
// the whole sequence per step.
//
// Constants here: initializers that do not train (the pass's TrainableSelection), are not state
// and are no graph inputs, Constant nodes, and the body's own initializers and Constant nodes. A loop inside the
// body is written out as a node of the outer graph and unrolled in the next round.
//
// Left as they are, with the reason (WhyLoopNotUnrolled, which autodiff's error names): a trip count
// or initial condition computed at run time, a condition that depends on data, more than
// kMaxIterations iterations, an If in the body (its branches read the body's values by name), Scan
// before opset 9 (batch axis and sequence_lens), zero iterations with scan outputs (their shape is
// unknown).
#include "passes/unroll_loop.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/shape_inference.h"
#include "graph/subgraph.h"
#include "passes/canonicalize.h"
#include "passes/grad_builder.h"

namespace mixtrain {
namespace {

constexpr int64_t kMaxIterations = 10000;
constexpr int64_t kFoldLimitElements = int64_t{1} << 20;

using V = Value*;

// One body value in one iteration: its value in the outer graph (once it has one) and its contents
// when it is a constant.
struct Slot {
  V outer = nullptr;
  std::optional<Tensor> known;
};

Tensor BoolScalar(bool b) {
  Tensor t(DType::kBool, {});
  *t.data_as<uint8_t>() = b ? 1 : 0;
  return t;
}

// A node holding a graph other than a Loop's or Scan's body (If's branches): its reads of the
// enclosing body are implicit, so it cannot be copied out of the body.
bool HoldsOtherGraph(const Node& n) {
  if (IsLoopOp(n)) return false;
  for (const Attribute& a : n.attributes()) {
    if (a.kind != Attribute::Kind::kOpaque) continue;
    onnx::AttributeProto p;
    if (p.ParseFromString(a.opaque) && (p.type() == onnx::AttributeProto::GRAPH || p.type() == onnx::AttributeProto::GRAPHS))
      return true;
  }
  return false;
}

// Ops run once when their inputs are constants: deterministic ONNX ops on tensors.
bool Foldable(const Node& n) {
  const std::string& op = n.op_type();
  return n.domain().empty() && !MayDiffer(n) && !IsLoopOp(n) && op != "If" && op != "BatchNormalization" &&
         !absl::StrContains(op, "Sequence");
}

class Unroller {
 public:
  Unroller(Graph& g, const absl::flat_hash_set<const Value*>& keep, HostEvaluator evaluator)
      : g_(g), keep_(keep), b_(g), eval_(evaluator) {}

  // Why `n` cannot be unrolled, or "" (then Build may run).
  std::string Plan(Node& n) {
    n_ = &n;
    scan_ = n.op_type() == "Scan";
    if (scan_ && g_.opset("") < 9) return "Scan before opset 9 (a batch axis and sequence_lens) is not unrolled";
    std::optional<onnx::GraphProto> proto = SubgraphAttr(n, "body");
    if (!proto) return "it has no body graph";
    absl::StatusOr<std::unique_ptr<Graph>> body = ImportSubgraph(*proto, g_);
    if (!body.ok()) return absl::StrCat("its body does not import: ", body.status().message());
    body_ = std::move(*body);
    for (const auto& bn : body_->nodes())
      if (HoldsOtherGraph(*bn))
        return absl::StrCat("its body holds ", bn->op_type(), " node '", bn->name(),
                            "', whose branches read the body's values by name");
    const int64_t body_ins = static_cast<int64_t>(body_->inputs().size());
    const int64_t body_outs = static_cast<int64_t>(body_->outputs().size());
    if (scan_) {
      const int64_t m = n.attr_int("num_scan_inputs", 0);
      states_ = static_cast<int64_t>(n.num_inputs()) - m;
      if (m < 1 || states_ < 0 || body_ins != states_ + m || body_outs < states_)
        return "its inputs, outputs and num_scan_inputs do not match its body";
      scan_outs_ = body_outs - states_;
      return PlanScan(m);
    }
    states_ = body_ins - 2;
    if (states_ < 0 || static_cast<int64_t>(n.num_inputs()) != 2 + states_ || body_outs < 1 + states_)
      return "its inputs and outputs do not match its body";
    scan_outs_ = body_outs - 1 - states_;
    return PlanLoop();
  }

  // Writes the loop out and removes the node.
  void Build() {
    b_.set_scope(absl::StrCat(n_->name(), "/unroll"));
    std::vector<Slot> carried = Initial();
    std::vector<std::vector<Slot>> scans(scan_outs_);
    Slot cond = LoopCond();
    for (int64_t i = 0; i < trips_; ++i) {
      std::vector<Slot> in;
      if (!scan_) in = {Slot{nullptr, Tensor::ScalarI64(i)}, cond};
      in.insert(in.end(), carried.begin(), carried.end());
      if (scan_)
        for (size_t j = 0; j < scan_ins_.size(); ++j) in.push_back(Element(j, i));
      std::vector<Slot> out = Iterate(i, std::move(in), /*emit=*/true);
      const size_t first = scan_ ? 0 : 1;
      if (!scan_) cond = out[0];
      carried.assign(out.begin() + first, out.begin() + first + states_);
      for (int64_t k = 0; k < scan_outs_; ++k) scans[k].push_back(out[first + states_ + k]);
    }
    // The node's outputs: final carried values, then the stacked scan outputs.
    std::vector<V> olds(n_->outputs().begin(), n_->outputs().end());
    std::vector<V> finals(olds.size(), nullptr);
    for (size_t k = 0; k < olds.size(); ++k) {
      if (olds[k] == nullptr || (olds[k]->consumers.empty() && !g_.IsGraphOutput(olds[k]))) {
        olds[k] = nullptr;
        continue;
      }
      const int64_t s = static_cast<int64_t>(k) - states_;
      finals[k] = s < 0 ? Outer(carried[k], nullptr) : Stack(scans[s], s);
    }
    g_.RemoveNode(n_);  // the live outputs stay, without producer
    for (size_t k = 0; k < olds.size(); ++k) {
      if (olds[k] == nullptr) continue;
      if (g_.IsGraphOutput(olds[k])) {
        g_.AddNode("Identity", {finals[k]}, {olds[k]}, g_.UniqueName(absl::StrCat(olds[k]->name, "/unrolled")));
      } else {
        g_.ReplaceAllUsesWith(olds[k], finals[k]);
        g_.RemoveValue(olds[k]);
      }
    }
  }

 private:
  // The contents of outer value v when it is a constant here: an initializer that is not kept, or
  // a Constant node's value.
  std::optional<Tensor> Constant(const Value* v) const {
    if (v == nullptr) return std::nullopt;
    if (v->is_initializer()) return keep_.contains(v) ? std::nullopt : std::optional<Tensor>(*v->initializer);
    return v->producer != nullptr ? ConstantNodeValue(*v->producer) : std::nullopt;
  }

  std::string PlanLoop() {
    const Node& n = *n_;
    V m = n.input(0), c = n.input(1);
    const std::optional<Tensor> mt = Constant(m);
    if (m != nullptr && (!mt || mt->numel() != 1))
      return absl::StrCat("its trip count M ('", m->name, "') is not a constant here (computed at run time",
                          std::find(g_.inputs().begin(), g_.inputs().end(), m) != g_.inputs().end() ? ", a graph input" : "",
                          ")");
    const std::optional<Tensor> ct = Constant(c);
    if (c != nullptr && (!ct || ct->numel() != 1))
      return absl::StrCat("its initial condition ('", c->name, "') is not a constant here");
    if (m == nullptr && c == nullptr) return "it has neither a trip count nor a condition (it never stops)";
    for (int64_t k = 0; k < states_; ++k)
      if (n.input(2 + k) == nullptr) return absl::StrCat("its loop-carried value ", k, " has no initial value");
    if (static_cast<int64_t>(n.num_outputs()) > states_ + scan_outs_) return "it has more outputs than its body";
    const int64_t max_trips = mt ? std::max<int64_t>(0, mt->GetInt(0)) : -1;
    // The condition decides where the body computes it and either M is absent or cond is given.
    const bool cond_decides = c != nullptr || m == nullptr;
    if (!cond_decides && max_trips > kMaxIterations)
      return absl::StrCat("it would unroll to more than ", kMaxIterations, " iterations (M = ", max_trips, ")");
    const std::string cond_name = body_->outputs()[0]->name;
    std::vector<Slot> carried = Initial();
    Slot cond = LoopCond();
    int64_t i = 0;
    for (; (max_trips < 0 || i < max_trips) && cond.known->GetInt(0) != 0; ++i) {
      if (i == kMaxIterations)
        return absl::StrCat("it would unroll to more than ", kMaxIterations, " iterations");
      std::vector<Slot> in = {Slot{nullptr, Tensor::ScalarI64(i)}, cond};
      in.insert(in.end(), carried.begin(), carried.end());
      std::vector<Slot> out = Iterate(i, std::move(in), /*emit=*/false);
      if (cond_decides) {
        if (!out[0].known.has_value())
          return absl::StrCat("its condition ('", cond_name, "') depends on values computed at run time, "
                              "not only on constants and the iteration number");
        cond = out[0];
      }
      carried.assign(out.begin() + 1, out.begin() + 1 + states_);
    }
    trips_ = i;
    return CheckZeroTrips();
  }

  std::string PlanScan(int64_t m) {
    const Node& n = *n_;
    std::vector<int64_t> axes = n.attr_ints("scan_input_axes", std::vector<int64_t>(m, 0));
    std::vector<int64_t> dirs = n.attr_ints("scan_input_directions", std::vector<int64_t>(m, 0));
    if (static_cast<int64_t>(axes.size()) != m || static_cast<int64_t>(dirs.size()) != m)
      return "scan_input_axes or scan_input_directions does not have one entry per scan input";
    for (int64_t k = 0; k < states_; ++k)
      if (n.input(k) == nullptr) return absl::StrCat("its state ", k, " has no initial value");
    if (static_cast<int64_t>(n.num_outputs()) > states_ + scan_outs_) return "it has more outputs than its body";
    trips_ = -1;
    for (int64_t j = 0; j < m; ++j) {
      V x = n.input(states_ + j);
      if (x == nullptr) return absl::StrCat("its scan input ", j, " is missing");
      const Shape& s = x->shape;
      int64_t a = axes[j];
      if (s.rank_known && a < 0) a += s.rank();
      if (!s.rank_known || a < 0 || a >= s.rank() || !s.dims[a].known())
        return absl::StrCat("the length of scan input '", x->name, "' (", s.ToString(), ", axis ", axes[j],
                            ") is not static; export with a fixed sequence length");
      if (trips_ >= 0 && s.dims[a].value != trips_)
        return absl::StrCat("its scan inputs have different lengths (", trips_, " and ", s.dims[a].value, ")");
      trips_ = s.dims[a].value;
      scan_ins_.push_back({x, a, dirs[j] != 0, {}});
    }
    if (trips_ > kMaxIterations) return absl::StrCat("it would unroll to more than ", kMaxIterations, " iterations");
    out_axes_ = n.attr_ints("scan_output_axes", std::vector<int64_t>(scan_outs_, 0));
    out_reverse_ = n.attr_ints("scan_output_directions", std::vector<int64_t>(scan_outs_, 0));
    if (static_cast<int64_t>(out_axes_.size()) != scan_outs_ || static_cast<int64_t>(out_reverse_.size()) != scan_outs_)
      return "scan_output_axes or scan_output_directions does not have one entry per scan output";
    return CheckZeroTrips();
  }

  std::string CheckZeroTrips() const {
    if (trips_ > 0) return "";
    for (size_t k = states_; k < n_->num_outputs(); ++k)
      if (V o = n_->output(k); o != nullptr && (!o->consumers.empty() || g_.IsGraphOutput(o)))
        return "it runs zero times here, and the shape of its scan outputs is unknown";
    return "";
  }

  std::vector<Slot> Initial() const {
    std::vector<Slot> out;
    for (int64_t k = 0; k < states_; ++k) {
      V v = n_->input((scan_ ? 0 : 2) + k);
      out.push_back(Slot{v, Constant(v)});
    }
    return out;
  }

  // The condition the first iteration sees (true when the Loop has none).
  Slot LoopCond() const {
    if (scan_) return {};
    V c = n_->input(1);
    return c == nullptr ? Slot{nullptr, BoolScalar(true)} : Slot{c, BoolScalar(Constant(c)->GetInt(0) != 0)};
  }

  // Runs the body once on `in` (its inputs' slots): constant nodes are evaluated; the others are
  // written into the outer graph when `emit`, else their outputs stay unknown. Returns the slots of
  // the body's outputs.
  std::vector<Slot> Iterate(int64_t i, std::vector<Slot> in, bool emit) {
    env_.clear();
    for (size_t k = 0; k < in.size(); ++k) env_[body_->inputs()[k]] = std::move(in[k]);
    for (const Value* v : body_->initializers()) {
      auto it = body_constants_.find(v);
      env_[v] = Slot{it == body_constants_.end() ? nullptr : it->second, *v->initializer};
    }
    for (const auto& up : body_->nodes()) {
      const Node& bn = *up;
      std::vector<const Tensor*> args;
      bool constant = Foldable(bn);
      for (const Value* x : bn.inputs()) {
        const Slot* s = x == nullptr ? nullptr : &env_.at(x);
        if (s != nullptr && !s->known) constant = false;
        args.push_back(s != nullptr && s->known ? &*s->known : nullptr);
      }
      if (constant)
        if (std::optional<std::vector<Tensor>> outs = Fold(bn, args)) {
          for (size_t k = 0; k < bn.num_outputs(); ++k)
            if (bn.output(k) != nullptr) env_[bn.output(k)] = Slot{nullptr, (*outs)[k]};
          continue;
        }
      std::vector<V> outs(bn.num_outputs(), nullptr);
      if (emit) {
        std::vector<V> ins;
        for (const Value* x : bn.inputs()) ins.push_back(x == nullptr ? nullptr : Outer(env_.at(x), x));
        const std::string scope = absl::StrCat(n_->name(), "/", i, "/");
        for (size_t k = 0; k < bn.num_outputs(); ++k)
          if (const Value* o = bn.output(k)) outs[k] = g_.AddValue(g_.UniqueName(scope + o->name), o->dtype);
        Node* c = g_.AddNode(bn.op_type(), ins, outs, g_.UniqueName(scope + bn.name()), bn.domain());
        for (const Attribute& a : bn.attributes()) c->SetAttr(a);
        c->doc_string = bn.doc_string;
        c->annotations() = bn.annotations();
      }
      for (size_t k = 0; k < bn.num_outputs(); ++k)
        if (bn.output(k) != nullptr) env_[bn.output(k)] = Slot{outs[k], std::nullopt};
    }
    std::vector<Slot> out;
    for (const Value* o : body_->outputs()) out.push_back(env_.at(o));
    return out;
  }

  // The node's results when its inputs are `args`, or nullopt (no kernel for it, too large).
  std::optional<std::vector<Tensor>> Fold(const Node& bn, const std::vector<const Tensor*>& args) const {
    std::vector<Tensor> outs;
    if (bn.op_type() == "Constant") {
      std::optional<Tensor> t = ConstantNodeValue(bn);
      if (!t) return std::nullopt;
      outs.push_back(std::move(*t));
    } else {
      if (eval_ == nullptr) return std::nullopt;
      absl::StatusOr<std::vector<Tensor>> r = eval_(bn, body_->opset(bn.domain()), args);
      if (!r.ok()) return std::nullopt;
      outs = std::move(*r);
    }
    if (outs.size() < bn.num_outputs()) return std::nullopt;
    for (const Tensor& t : outs)
      if (t.numel() > kFoldLimitElements) return std::nullopt;
    return outs;
  }

  // The outer value of slot `s` (of body value `body_value`, or null): a constant becomes an
  // initializer the first time a node of the outer graph reads it.
  V Outer(Slot& s, const Value* body_value) {
    if (s.outer != nullptr) return s.outer;
    MT_CHECK(s.known.has_value()) << "unroll_loop: a value of '" << n_->name() << "' was neither computed nor constant";
    s.outer = g_.AddInitializer(g_.UniqueName(absl::StrCat(n_->name(), "/unroll/const")), *s.known);
    s.outer->metadata[kFoldedMetadata] = "unroll_loop";  // never trains
    if (body_value != nullptr && body_value->is_initializer()) body_constants_[body_value] = s.outer;
    return s.outer;
  }

  // Scan input j's element of iteration i: one Split of the input along its axis, pieces squeezed.
  Slot Element(size_t j, int64_t i) {
    ScanInput& in = scan_ins_[j];
    const Value* formal = body_->inputs()[states_ + j];
    if (formal->consumers.empty() && !body_->IsGraphOutput(formal)) return {};
    if (in.pieces.empty()) {
      std::vector<bool> wanted(trips_, true);
      const std::vector<int64_t> ones(trips_, 1);
      std::vector<V> parts =
          b_.opset() >= 13 ? b_.OpN("Split", {in.x, b_.Ints(ones)}, wanted, {Attribute::Int("axis", in.axis)})
                           : b_.OpN("Split", {in.x}, wanted, {Attribute::Int("axis", in.axis), Attribute::Ints("split", ones)});
      for (V p : parts) in.pieces.push_back(b_.Squeeze(p, {in.axis}));
    }
    return Slot{in.pieces[in.reverse ? trips_ - 1 - i : i], std::nullopt};
  }

  // Scan output k: the iterations' elements stacked along its axis (Loop: a new axis 0).
  V Stack(std::vector<Slot>& elements, int64_t k) {
    const int64_t axis = scan_ ? out_axes_[k] : 0;
    std::vector<V> parts;
    for (Slot& s : elements) parts.push_back(b_.Unsqueeze(Outer(s, nullptr), {axis}));
    if (scan_ && out_reverse_[k] != 0) std::reverse(parts.begin(), parts.end());
    return parts.size() == 1 ? parts[0] : b_.Op("Concat", parts, {Attribute::Int("axis", axis)});
  }

  struct ScanInput {
    V x;
    int64_t axis;
    bool reverse;
    std::vector<V> pieces;
  };

  Graph& g_;
  const absl::flat_hash_set<const Value*>& keep_;
  GradBuilder b_;
  HostEvaluator eval_ = nullptr;
  Node* n_ = nullptr;
  bool scan_ = false;
  std::unique_ptr<Graph> body_;
  int64_t states_ = 0, scan_outs_ = 0, trips_ = 0;
  std::vector<ScanInput> scan_ins_;
  std::vector<int64_t> out_axes_, out_reverse_;
  absl::flat_hash_map<const Value*, Slot> env_;
  absl::flat_hash_map<const Value*, V> body_constants_;  // body initializers already in the outer graph
};

// Initializers that are no constants here: what trains, state, and overridable graph inputs.
absl::StatusOr<absl::flat_hash_set<const Value*>> Kept(const Graph& g, const TrainableSelection& params) {
  MT_ASSIGN_OR_RETURN(absl::flat_hash_set<const Value*> keep, SelectTrainable(g, params));
  for (const auto& [v, c] : ClassifyInitializers(g))
    if (c.role == InitializerRole::kState) keep.insert(v);
  for (const Value* v : g.inputs()) keep.insert(v);
  return keep;
}

class UnrollLoopPass final : public Pass {
 public:
  UnrollLoopPass(TrainableSelection params, HostEvaluator evaluator)
      : params_(std::move(params)), evaluator_(evaluator) {}
  absl::string_view name() const override { return "unroll_loop"; }

  // One loop per round: unrolling one can make another's inputs known, and a loop in a body
  // becomes a node of the graph to unroll in the next round.
  absl::StatusOr<bool> Run(Graph& g) override {
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      if (std::none_of(g.nodes().begin(), g.nodes().end(), [](const auto& n) { return IsLoopOp(*n); })) break;
      MT_RETURN_IF_ERROR(InferShapes(g));
      MT_ASSIGN_OR_RETURN(absl::flat_hash_set<const Value*> keep, Kept(g, params_));
      for (const auto& n : g.nodes()) {
        if (!IsLoopOp(*n)) continue;
        Unroller u(g, keep, evaluator_);
        if (!u.Plan(*n).empty()) continue;
        u.Build();
        MT_RETURN_IF_ERROR(g.TopoSort());
        again = changed = true;
        break;
      }
    }
    if (!changed) return false;
    // What canonicalization does with the unrolled body: the per-step Gathers of a sequence at
    // now constant indices become one Split (one Concat backward, not a scatter of the whole
    // sequence per step), Identities go, and so do the outputs nothing reads.
    CanonicalizeOptions co;
    co.params = params_;
    co.evaluator = evaluator_;
    MT_RETURN_IF_ERROR(MakeCanonicalizePass(co)->Run(g).status());
    return true;
  }

 private:
  TrainableSelection params_;
  HostEvaluator evaluator_;
};

}  // namespace

bool IsLoopOp(const Node& n) { return n.domain().empty() && (n.op_type() == "Loop" || n.op_type() == "Scan"); }

std::string WhyLoopNotUnrolled(const Graph& g, const Node& n, HostEvaluator evaluator) {
  absl::StatusOr<absl::flat_hash_set<const Value*>> keep = Kept(g, {});
  if (!keep.ok()) return std::string(keep.status().message());
  // Plan reads the graph only; Build, which changes it, never runs here.
  Unroller u(const_cast<Graph&>(g), *keep, evaluator);
  return u.Plan(const_cast<Node&>(n));
}

std::unique_ptr<Pass> MakeUnrollLoopPass(TrainableSelection params, HostEvaluator evaluator) {
  return std::make_unique<UnrollLoopPass>(std::move(params), evaluator);
}

}  // namespace mixtrain
