// Cleanup after rewriting passes: cast folding, cast dedupe, CSE, DCE.
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/shape_inference.h"
#include "passes/precision.h"

namespace mixtrain {
namespace {

bool IsCast(const Node& n) { return n.op_type() == "Cast" && n.domain().empty(); }

DType CastTarget(const Node& n) {
  auto t = FromOnnxType(static_cast<int32_t>(n.attr_int("to", 0)));
  return t.ok() ? *t : DType::kUndefined;
}

// A cast from `from` to `to` and back is exact when `to` represents every `from` value.
bool Widens(DType from, DType to) {
  if (from == to) return true;
  if (to == DType::kF32) return from == DType::kF16 || from == DType::kBF16;
  if (to == DType::kF64) return IsFloat(from) || from == DType::kI32 || from == DType::kI8 || from == DType::kU8;
  return false;
}

// Ops whose results differ between two calls with equal inputs (the op table's kOpRandom, and
// ops of other domains or without a schema, which nothing here knows).
bool HasSideEffects(const Node& n) { return !n.domain().empty() || MayDiffer(n); }

// Replaces uses of `from` by `to`, unless `from` is a graph output (whose name must survive).
bool Forward(Graph& g, Value* from, Value* to) {
  if (g.IsGraphOutput(from)) return false;
  g.ReplaceAllUsesWith(from, to);
  return true;
}

class CleanupPass final : public Pass {
 public:
  absl::string_view name() const override { return "cleanup"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    bool changed = false;
    for (bool again = true; again;) {
      again = FoldCasts(g) | FoldExpands(g) | Cse(g) | Dce(g);
      changed |= again;
    }
    return changed;
  }

 private:
  // Expand(x, shape) to x's own (fully known) shape is x: its readers read x, or, where its
  // result is a graph output (autodiff's "grad/<p>", summed before its shape was known), an
  // Identity (a view) writes it instead of a copy.
  static bool FoldExpands(Graph& g) {
    bool changed = false;
    std::vector<Node*> expands;
    for (const auto& up : g.nodes())
      if (up->op_type() == "Expand" && up->domain().empty() && up->input(0) != nullptr && up->output(0) != nullptr &&
          up->input(0)->shape.fully_known() && up->input(0)->shape == up->output(0)->shape &&
          up->input(0)->dtype == up->output(0)->dtype)
        expands.push_back(up.get());
    for (Node* n : expands) {
      Value* x = n->input(0);
      Value* y = n->output(0);
      if (Forward(g, y, x)) {
        changed = true;  // n, read by nothing now, goes with Dce
        continue;
      }
      g.ReplaceNode(n, "Identity", {x});
      changed = true;
    }
    return changed;
  }

  static bool FoldCasts(Graph& g) {
    bool changed = false;
    for (const auto& up : g.nodes()) {
      Node* n = up.get();
      if (!IsCast(*n) || !n->input(0) || !n->output(0)) continue;
      Value* x = n->input(0);
      DType to = CastTarget(*n);
      // Cast(x, dtype(x)) => x
      if (x->dtype == to && Forward(g, n->output(0), x)) {
        changed = true;
        continue;
      }
      // Cast(Cast(x, A), B) => x when dtype(x) == B and A widens dtype(x) (exact round trip),
      // e.g. Cast(Cast(x_f16, f32), f16) => x_f16. The reverse (f32 -> f16 -> f32) rounds.
      Node* p = x->producer;
      if (p && IsCast(*p) && p->input(0)) {
        Value* src = p->input(0);
        if (src->dtype == to && Widens(src->dtype, x->dtype) && Forward(g, n->output(0), src))
          changed = true;
      }
    }
    return changed;
  }

  // Merges nodes with the same op, domain, attributes and inputs (dedupes casts of one value).
  static bool Cse(Graph& g) {
    bool changed = false;
    std::map<std::tuple<std::string, std::string, std::vector<Value*>>, std::vector<Node*>> seen;
    for (const auto& up : g.nodes()) {
      Node* n = up.get();
      if (HasSideEffects(*n) || n->num_outputs() == 0) continue;
      auto& bucket = seen[{n->op_type(), n->domain(), n->inputs()}];
      Node* twin = nullptr;
      for (Node* m : bucket)
        if (m->attributes() == n->attributes() && m->num_outputs() == n->num_outputs()) twin = m;
      if (twin == nullptr) {
        bucket.push_back(n);
        continue;
      }
      for (size_t i = 0; i < n->num_outputs(); ++i)
        if (n->output(i) && twin->output(i) && Forward(g, n->output(i), twin->output(i)))
          changed = true;
    }
    return changed;
  }

  // Removes nodes none of whose outputs is used or a graph output.
  static bool Dce(Graph& g) {
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      std::vector<Node*> dead;
      for (const auto& up : g.nodes()) {
        Node* n = up.get();
        bool used = false;
        for (Value* o : n->outputs())
          if (o && (!o->consumers.empty() || g.IsGraphOutput(o))) used = true;
        if (!used) dead.push_back(n);
      }
      for (Node* n : dead) g.RemoveNode(n);
      again = !dead.empty();
      changed |= again;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeCleanupPass() { return std::make_unique<CleanupPass>(); }

}  // namespace mixtrain
