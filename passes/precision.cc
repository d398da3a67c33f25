#include "passes/precision.h"

#include <deque>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

using C = PrecisionClass;

bool IsWorkFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Whether the node computes on floats: a float input (that is not pinned fp32) or float output.
bool IsFloatNode(const Node& n) {
  for (size_t i = 0; i < n.num_inputs(); ++i)
    if (Value* v = n.input(i); v && IsWorkFloat(v->dtype) && !KeepsInputFp32(n, i))
      return true;
  for (Value* v : n.outputs())
    if (v && IsWorkFloat(v->dtype)) return true;
  return false;
}

// Float data inputs (those that follow the node's precision) of n.
std::vector<Value*> DataInputs(const Node& n) {
  std::vector<Value*> r;
  for (size_t i = 0; i < n.num_inputs(); ++i)
    if (Value* v = n.input(i); v && IsWorkFloat(v->dtype) && !KeepsInputFp32(n, i))
      r.push_back(v);
  return r;
}

std::vector<Node*> FloatConsumers(const Node& n) {
  std::vector<Node*> r;
  for (Value* o : n.outputs()) {
    if (!o || !IsWorkFloat(o->dtype)) continue;
    for (Node* c : o->consumers)
      for (size_t i = 0; i < c->num_inputs(); ++i)
        if (c->input(i) == o && !KeepsInputFp32(*c, i)) r.push_back(c);
  }
  return r;
}

}  // namespace

std::map<const Node*, DType> AssignPrecision(const Graph& g, const PrecisionPolicy& policy) {
  std::map<const Node*, DType> out;
  // Class per float node; pinned and unlisted nodes are fp32 but do not spread deny (TF's rule:
  // only listed deny ops paint their downstream).
  absl::flat_hash_map<const Node*, C> cls;
  absl::flat_hash_set<const Node*> pinned;
  for (const auto& up : g.nodes()) {
    const Node* n = up.get();
    C c = policy.ClassOf(n->op_type());
    if (c == C::kFixed || !IsFloatNode(*n)) continue;
    cls[n] = c;
    if (policy.PinnedFp32(*n) || !policy.Listed(n->op_type())) pinned.insert(n);
  }
  auto is = [&](const Node* n, std::initializer_list<C> cs) {
    auto it = cls.find(n);
    if (it == cls.end() || pinned.contains(n)) return false;
    for (C c : cs)
      if (it->second == c) return true;
    return false;
  };

  absl::flat_hash_set<const Node*> low;
  if (policy.preset() == PrecisionPreset::kHalf) {
    // Everything low but deny (and pinned/unlisted) nodes.
    for (const auto& [n, c] : cls)
      if (c != C::kDeny && !pinned.contains(n)) low.insert(n);
  } else if (policy.preset() == PrecisionPreset::kAmp) {
    // 1. deny spreads forward through infer/clear nodes.
    absl::flat_hash_set<const Node*> deny;
    std::deque<const Node*> work;
    for (const auto& [n, c] : cls)
      if (c == C::kDeny && !pinned.contains(n)) work.push_back(n);
    while (!work.empty()) {
      const Node* n = work.front();
      work.pop_front();
      if (!deny.insert(n).second) continue;
      for (Node* c : FloatConsumers(*n))
        if (is(c, {C::kInfer, C::kClear})) work.push_back(c);
    }
    // 2. allow nodes go low; infer/clear nodes between two allow nodes (reachable forward from
    //    one and backward from another through infer/clear nodes not denied) go low too.
    absl::flat_hash_set<const Node*> down, upset;
    for (const auto& [n, c] : cls)
      if (c == C::kAllow && !pinned.contains(n)) {
        low.insert(n);
        work.push_back(n);
      }
    std::deque<const Node*> back(work.begin(), work.end());
    while (!work.empty()) {
      const Node* n = work.front();
      work.pop_front();
      for (Node* c : FloatConsumers(*n))
        if (is(c, {C::kInfer, C::kClear}) && !deny.contains(c) && down.insert(c).second)
          work.push_back(c);
    }
    while (!back.empty()) {
      const Node* n = back.front();
      back.pop_front();
      for (Value* v : DataInputs(*n)) {
        const Node* p = v->producer;
        if (p && is(p, {C::kInfer, C::kClear}) && !deny.contains(p) && upset.insert(p).second)
          back.push_back(p);
      }
    }
    for (const Node* n : down)
      if (upset.contains(n)) low.insert(n);
    // 3. clear nodes follow their inputs (a low producer) or, when every float consumer is low,
    //    go low themselves so the Cast moves before them and they move fewer bytes.
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& up : g.nodes()) {
        const Node* n = up.get();
        if (!is(n, {C::kClear}) || deny.contains(n) || low.contains(n)) continue;
        bool from_low = false;
        for (Value* v : DataInputs(*n))
          if (v->producer && low.contains(v->producer)) from_low = true;
        std::vector<Node*> cons = FloatConsumers(*n);
        bool to_low = !cons.empty();
        for (Node* c : cons) to_low = to_low && low.contains(c);
        for (Value* o : n->outputs()) to_low = to_low && !(o && g.IsGraphOutput(o));
        if (from_low || to_low) {
          low.insert(n);
          changed = true;
        }
      }
    }
  }
  for (const auto& [n, c] : cls) out[n] = low.contains(n) ? policy.low() : DType::kF32;
  return out;
}

namespace {

class PrecisionPass final : public Pass {
 public:
  explicit PrecisionPass(PrecisionPolicy policy) : policy_(std::move(policy)) {}
  absl::string_view name() const override { return "precision"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    if (policy_.preset() == PrecisionPreset::kFp32) return false;
    MT_RETURN_IF_ERROR(g.TopoSort());
    std::map<const Node*, DType> assign = AssignPrecision(g, policy_);
    bool changed = false;
    std::map<std::pair<Value*, DType>, Value*> casts;  // one cast per (value, type)
    auto cast_of = [&](Value* v, DType to) -> Value* {
      auto key = std::make_pair(v, to);
      if (auto it = casts.find(key); it != casts.end()) return it->second;
      Value* out = g.AddValue(g.UniqueName(absl::StrCat(v->name, "_", DTypeName(to))), to, v->shape);
      Node* c = g.AddNode("Cast", {v}, {out}, g.UniqueName(absl::StrCat("cast_", v->name, "_", DTypeName(to))));
      c->SetAttr(Attribute::Int("to", ToOnnxType(to)));
      c->annotations()["inserted_by"] = "precision";
      c->annotations()["precision"] = DTypeName(to);
      casts[key] = out;
      return out;
    };
    // Snapshot: the loop adds Cast nodes, which need no visit.
    std::vector<Node*> order;
    for (const auto& up : g.nodes()) order.push_back(up.get());
    for (Node* n : order) {
      auto it = assign.find(n);
      if (it == assign.end()) continue;
      DType t = it->second;
      n->annotations()["precision"] = DTypeName(t);
      for (size_t i = 0; i < n->num_inputs(); ++i) {
        Value* v = n->input(i);
        if (!v || !IsWorkFloat(v->dtype)) continue;
        DType want = KeepsInputFp32(*n, i) ? DType::kF32 : t;
        if (v->dtype == want) continue;
        g.SetInput(n, i, cast_of(v, want));
        changed = true;
      }
      for (size_t i = 0; i < n->num_outputs(); ++i) {
        Value* o = n->output(i);
        if (!o || !IsWorkFloat(o->dtype) || o->dtype == t) continue;
        changed = true;
        if (!g.IsGraphOutput(o)) {
          o->dtype = t;
          continue;
        }
        // Graph outputs keep name and dtype: compute into a new value, Cast back.
        DType orig = o->dtype;
        Value* inner = g.AddValue(g.UniqueName(absl::StrCat(o->name, "_", DTypeName(t))), t, o->shape);
        std::vector<Node*> users = o->consumers;
        g.SetNodeOutput(n, i, inner);
        for (Node* u : users)
          for (size_t k = 0; k < u->num_inputs(); ++k)
            if (u->input(k) == o) g.SetInput(u, k, inner);
        Node* c = g.AddNode("Cast", {inner}, {o}, g.UniqueName(absl::StrCat("cast_", o->name, "_out")));
        c->SetAttr(Attribute::Int("to", ToOnnxType(orig)));
        c->annotations()["inserted_by"] = "precision";
        c->annotations()["precision"] = DTypeName(orig);
      }
    }
    MT_RETURN_IF_ERROR(g.TopoSort());
    return changed;
  }

 private:
  PrecisionPolicy policy_;
};

}  // namespace

std::unique_ptr<Pass> MakePrecisionPass(PrecisionPolicy policy) {
  return std::make_unique<PrecisionPass>(std::move(policy));
}

}  // namespace mixtrain

#include "passes/pass_registry.h"

namespace mixtrain {
// Defaults for `dump --passes=...`; `dump --precision/--dtype` and `train` configure them.
MT_REGISTER_PASS(precision, [] {
  return MakePrecisionPass(PrecisionPolicy::Default(PrecisionPreset::kAmp, DType::kBF16));
});
MT_REGISTER_PASS(cleanup, [] { return MakeCleanupPass(); });
}  // namespace mixtrain
