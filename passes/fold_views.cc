// fold_views (forward fusion before autodiff, and inference pass 5): chains of layout-only ops
// fold into one copy at most, next to the op that reads it.
//
// Exporters spell attention's head split as chains of Reshape, Transpose, Squeeze and Unsqueeze:
// torch's nn.MultiheadAttention (both exporters) goes [T, N, 3D] -> Reshape [T, N, 3, D] ->
// Unsqueeze -> Transpose -> Squeeze -> Split -> Squeeze -> Reshape [T, N*H, d] -> Transpose ->
// Reshape [N, H, T, d], and for K once more Reshape [N*H, T, d] -> Transpose -> Reshape, then
// Mul by a constant scale; Hugging Face's dynamo exports reshape 4-D to 3-D around the K
// transpose. Each Transpose is a copy of the activation (and one more in the backward), and
// none of them sits next to the MatMul, so fuse_matmul cannot read it in place (perm_a/perm_b).
// Three exact rewrites, to a fixed point:
//   - a chain of view ops (each result read only by the next) from X to Y is one permutation of
//     a factorization of X's dims: Y = Reshape(Transpose(Reshape(X, F), P), dims(Y)), with the
//     reshapes and the transpose left out where they are identities and the factors that stay
//     neighbours merged. Dims are products of a number and named symbols ("4*N" splits into N
//     and 4 against "N"), so symbolic batch dims fold too; a chain whose dims do not factor into
//     each other is left alone;
//   - Split(view chain, axis a), where axis a is one factor of the source: the split moves to the
//     source (Reshape(X, F) split along that factor) and each piece gets the chain's
//     permutation, which the first rule then folds into whatever view ops read the piece;
//   - Mul/Div(Transpose(X), constant scalar) => Transpose(Mul/Div(X, scalar)): the scale of
//     attention's Q and K moves before the transpose, which then feeds the MatMul.
// On transformer_cls (torch.export of nn.TransformerEncoder, 4 layers) the training step's 56
// Transposes become 16 and its 766 nodes 600; the 8 forward ones left feed weight gradients or
// the residual stream. fuse_matmul then takes Q, K and V as perms; oneDNN 2.6 reads batch-first
// heads in place but copies sequence-first ones inside the matmul (docs/architecture.md).
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/shape_inference.h"
#include "graph/sym_dim.h"
#include "passes/fusion_match.h"
#include "passes/inference.h"
#include "passes/pass_registry.h"

namespace mixtrain {
namespace {

using fusion::IsOnnx;
using sym::Mono;
using sym::MonoOf;
using sym::Times;
using sym::Divide;
using sym::ToDim;

std::optional<std::vector<Mono>> MonosOf(const Shape& s) {
  if (!s.rank_known) return std::nullopt;
  std::vector<Mono> out;
  for (const Dim& d : s.dims) {
    std::optional<Mono> m = MonoOf(d);
    if (!m) return std::nullopt;
    out.push_back(*m);
  }
  return out;
}

// A value seen as a permutation of a factorization of a source value: `fine` are the factors of
// the source's dims in the source's (row-major) order, none of them 1; dim i of the value is the
// factors groups[i], in that order (empty for a dim of size 1).
struct View {
  Value* source = nullptr;
  std::vector<Mono> fine;
  std::vector<std::vector<int>> groups;
};

std::optional<View> ViewOf(Value* x) {
  std::optional<std::vector<Mono>> dims = MonosOf(x->shape);
  if (!dims) return std::nullopt;
  View v;
  v.source = x;
  for (const Mono& m : *dims) {
    v.groups.emplace_back();
    if (m.one()) continue;
    v.groups.back().push_back(static_cast<int>(v.fine.size()));
    v.fine.push_back(m);
  }
  return v;
}

std::vector<int> Order(const View& v) {
  std::vector<int> seq;
  for (const auto& g : v.groups) seq.insert(seq.end(), g.begin(), g.end());
  return seq;
}

// Splits factor f into (major, minor), both != 1: the minor part becomes factor f + 1.
void SplitFactor(View& v, int f, const Mono& major, const Mono& minor,
                 std::vector<std::vector<int>>* more_groups, std::vector<int>* seq) {
  auto bump = [&](std::vector<int>& list) {
    for (int& i : list) i += i > f ? 1 : 0;
  };
  for (auto& g : v.groups) bump(g);
  for (auto& g : *more_groups) bump(g);
  bump(*seq);
  v.fine[f] = major;
  v.fine.insert(v.fine.begin() + f + 1, minor);
  auto it = std::find(seq->begin(), seq->end(), f);
  seq->insert(it + 1, f + 1);
}

// The view reshaped (row-major) to `dims`: consecutive factors group, a factor that a new dim
// takes only the major part of splits. False when the dims do not factor into the view's.
bool Reshape(View& v, const std::vector<Mono>& dims) {
  std::vector<int> seq = Order(v);
  std::vector<std::vector<int>> out;
  size_t k = 0;
  for (const Mono& m : dims) {
    out.emplace_back();
    Mono cur;
    while (!(cur == m)) {
      if (k >= seq.size()) return false;
      const int f = seq[k];
      std::optional<Mono> rest = Divide(m, cur);
      if (!rest) return false;
      if (Divide(*rest, v.fine[f])) {
        out.back().push_back(f);
        std::optional<Mono> next = Times(cur, v.fine[f]);
        if (!next) return false;
        cur = *next;
        ++k;
      } else if (std::optional<Mono> minor = Divide(v.fine[f], *rest)) {
        SplitFactor(v, f, *rest, *minor, &out, &seq);
        out.back().push_back(f);
        cur = m;
        ++k;  // seq[k] is now the minor part, for the next dim
      } else {
        return false;
      }
    }
  }
  if (k != seq.size()) return false;
  v.groups = std::move(out);
  return true;
}

// The ops whose chains this pass composes: the views (IsViewNode) and Transpose, which moves bytes
// but only permutes the head split's dims.
bool IsReshapeOrTranspose(const Node& n) {
  if (!n.domain().empty() || n.input(0) == nullptr || n.output(0) == nullptr) return false;
  const std::string& op = n.op_type();
  return op == "Reshape" || op == "Transpose" || op == "Squeeze" || op == "Unsqueeze" ||
         op == "Flatten";
}

// The view of node n's output given the view of its input (reshape-like ops by the output's
// inferred shape, Transpose by its permutation).
bool Apply(View& v, const Node& n) {
  if (n.op_type() == "Transpose") {
    const std::vector<int64_t> perm = fusion::TransposePerm(n, static_cast<int64_t>(v.groups.size()));
    if (perm.size() != v.groups.size()) return false;
    std::vector<std::vector<int>> g(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(v.groups.size())) return false;
      g[i] = v.groups[perm[i]];
    }
    v.groups = std::move(g);
    return true;
  }
  std::optional<std::vector<Mono>> dims = MonosOf(n.output(0)->shape);
  return dims && Reshape(v, *dims);
}

// A constant Reshape target for `dims` read from a tensor of shape `from`: numbers as they are,
// one symbolic dim as -1, further ones as 0 where `from` has the same dim at that index.
std::optional<std::vector<int64_t>> Target(const std::vector<Mono>& dims, const std::vector<Mono>* from) {
  std::vector<int64_t> t;
  bool inferred = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].known()) {
      t.push_back(dims[i].coef);
    } else if (from != nullptr && i < from->size() && (*from)[i] == dims[i]) {
      t.push_back(0);
    } else if (!inferred) {
      t.push_back(-1);
      inferred = true;
    } else {
      return std::nullopt;
    }
  }
  return t;
}

// What Emit makes of a view: an optional reshape of the source, an optional transpose, an
// optional reshape to the output's dims.
struct Plan {
  std::optional<std::vector<int64_t>> reshape_in;
  std::vector<Mono> merged;  // the source's merged factors
  std::vector<int64_t> perm;  // empty: none
  std::vector<Mono> permuted;  // the transpose's output dims, when there is one
  std::optional<std::vector<int64_t>> reshape_out;
  int nodes() const { return (reshape_in ? 1 : 0) + (perm.empty() ? 0 : 1) + (reshape_out ? 1 : 0); }
};

// The plan for a view whose source has dims `src`, producing `out_dims`.
std::optional<Plan> MakePlan(const View& v, const std::vector<Mono>& src, const std::vector<Mono>& out_dims) {
  const std::vector<int> seq = Order(v);
  const int n = static_cast<int>(v.fine.size());
  std::vector<int> pos(n, -1), group_of(n, -1);
  for (size_t k = 0; k < seq.size(); ++k) pos[seq[k]] = static_cast<int>(k);
  for (size_t i = 0; i < v.groups.size(); ++i)
    for (int f : v.groups[i]) group_of[f] = static_cast<int>(i);
  // Factors of one output dim that are neighbours in the source merge; factors of different
  // output dims stay apart, so that the transpose, when there is one, makes the output's dims
  // and needs no reshape after it (which would keep fuse_matmul from reading it in place).
  std::vector<int> merged_of(n);
  Plan p;
  for (int f = 0; f < n; ++f) {
    if (f > 0 && pos[f] == pos[f - 1] + 1 && group_of[f] == group_of[f - 1]) {
      merged_of[f] = merged_of[f - 1];
      std::optional<Mono> m = Times(p.merged.back(), v.fine[f]);
      if (!m) return std::nullopt;
      p.merged.back() = *m;
    } else {
      merged_of[f] = static_cast<int>(p.merged.size());
      p.merged.push_back(v.fine[f]);
    }
  }
  std::vector<int64_t> perm;
  for (int f : seq)
    if (perm.empty() || perm.back() != merged_of[f]) perm.push_back(merged_of[f]);
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  std::vector<Mono> cur = src;
  if (!identity) {  // a pure regrouping needs no reshape of the source, only one to the output
    if (!(src == p.merged)) {
      p.reshape_in = Target(p.merged, &src);
      if (!p.reshape_in) return std::nullopt;
      cur = p.merged;
    }
    p.perm = perm;
    for (int64_t i : perm) p.permuted.push_back(cur[i]);
    cur = p.permuted;
  }
  if (!(cur == out_dims)) {
    p.reshape_out = Target(out_dims, &cur);
    if (!p.reshape_out) return std::nullopt;
  }
  return p;
}

Shape ShapeOf(const std::vector<Mono>& dims) {
  std::vector<Dim> d;
  for (const Mono& m : dims) d.push_back(ToDim(m));
  return Shape(std::move(d));
}

Value* AddReshape(Graph& g, Value* x, const std::vector<int64_t>& target, Value* out,
                  const std::vector<Mono>& out_dims, const std::string& base) {
  Value* shape = g.AddInitializer(g.UniqueName(base + "_shape"),
                                  Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(target.size())}, target));
  if (out == nullptr) out = g.AddValue(g.UniqueName(base), x->dtype, ShapeOf(out_dims));
  g.AddNode("Reshape", {x, shape}, {out}, g.UniqueName(base + "_reshape"));
  return out;
}

// Builds `plan` from the view's source into `out` (which has no producer now).
void Emit(Graph& g, const View& v, const Plan& plan, Value* out, const std::string& base) {
  std::optional<std::vector<Mono>> out_dims = MonosOf(out->shape);
  MT_CHECK(out_dims.has_value());
  Value* cur = v.source;
  std::vector<Mono> cur_dims = *MonosOf(v.source->shape);
  const int steps = plan.nodes();
  int made = 0;
  auto last = [&] { return ++made == steps; };
  if (steps == 0) {  // the chain is no change of layout at all: a free reshape keeps `out`
    AddReshape(g, cur, *Target(*out_dims, &cur_dims), out, *out_dims, base);
    return;
  }
  if (plan.reshape_in) {
    cur_dims = plan.merged;
    cur = AddReshape(g, cur, *plan.reshape_in, last() ? out : nullptr, cur_dims, base);
  }
  if (!plan.perm.empty()) {
    cur_dims = plan.permuted;
    Value* y = last() ? out : g.AddValue(g.UniqueName(base + "_t"), cur->dtype, ShapeOf(cur_dims));
    Node* tr = g.AddNode("Transpose", {cur}, {y}, g.UniqueName(base + "_transpose"));
    tr->SetAttr(Attribute::Ints("perm", plan.perm));
    cur = y;
  }
  if (plan.reshape_out) {
    MT_CHECK(last());
    AddReshape(g, cur, *plan.reshape_out, out, *out_dims, base);
  }
}

int Transposes(const std::vector<Node*>& chain) {
  int n = 0;
  for (const Node* c : chain) n += c->op_type() == "Transpose";
  return n;
}

// Whether node n goes away once the nodes in `removed` do: every use of its results dies too.
// (Exporters read intermediate shapes, Shape -> Slice -> Concat, only to build the chain's own
// Reshape targets; those die with the chain.)
bool Dies(const Graph& g, Node* n, const absl::flat_hash_set<Node*>& removed,
          absl::flat_hash_map<Node*, bool>& memo) {
  if (removed.contains(n)) return true;
  if (auto it = memo.find(n); it != memo.end()) return it->second;
  memo[n] = false;  // a DAG has no cycles; this only stops repeated work
  bool dies = true;
  for (Value* o : n->outputs()) {
    if (o == nullptr) continue;
    if (g.IsGraphOutput(o)) dies = false;
    for (Node* c : o->consumers) dies = dies && Dies(g, c, removed, memo);
    if (!dies) break;
  }
  memo[n] = dies;
  return dies;
}

// The view ops that make `y`, top first, each result read only by the next (and by Shape ops,
// collected in *shape_readers), none a graph output.
std::vector<Node*> ChainInto(const Graph& g, Value* y, std::vector<Node*>* shape_readers) {
  std::vector<Node*> chain;
  for (Node* p = y->producer; p != nullptr && IsReshapeOrTranspose(*p);) {
    chain.push_back(p);
    Value* in = p->input(0);
    Node* up = in->producer;
    if (up == nullptr || !IsReshapeOrTranspose(*up) || g.IsGraphOutput(in)) break;
    bool only_p = true;
    std::vector<Node*> readers;
    for (Node* c : in->consumers) {
      if (c == p) continue;
      if (IsOnnx(*c, "Shape")) readers.push_back(c);
      else only_p = false;
    }
    if (!only_p || std::count(in->consumers.begin(), in->consumers.end(), p) != 1) break;
    shape_readers->insert(shape_readers->end(), readers.begin(), readers.end());
    p = up;
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

// The nodes to remove with `chain` (the chain, the Shape readers of its intermediate results and
// what only they feed), consumers first; nullopt when a Shape reader outlives the chain.
std::optional<std::vector<Node*>> Removal(const Graph& g, const std::vector<Node*>& chain,
                                          const std::vector<Node*>& shape_readers, Node* also = nullptr) {
  absl::flat_hash_set<Node*> removed(chain.begin(), chain.end());
  if (also != nullptr) removed.insert(also);
  absl::flat_hash_map<Node*, bool> memo;
  std::vector<Node*> order;
  std::vector<Node*> stack(shape_readers.begin(), shape_readers.end());
  for (Node* r : shape_readers)
    if (!Dies(g, r, removed, memo)) return std::nullopt;
  // Everything reachable from the readers dies; collect it.
  absl::flat_hash_set<Node*> dead;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (removed.contains(n) || !dead.insert(n).second) continue;
    for (Value* o : n->outputs())
      if (o != nullptr)
        for (Node* c : o->consumers) stack.push_back(c);
  }
  std::vector<Node*> all(dead.begin(), dead.end());
  if (also != nullptr) all.push_back(also);
  all.insert(all.end(), chain.begin(), chain.end());
  // Consumers first: repeatedly take a node whose results nothing left in the set reads.
  absl::flat_hash_set<Node*> left(all.begin(), all.end());
  while (!left.empty()) {
    bool progress = false;
    for (Node* n : all) {
      if (!left.contains(n)) continue;
      bool free = true;
      for (Value* o : n->outputs())
        if (o != nullptr)
          for (Node* c : o->consumers) free = free && !left.contains(c);
      if (!free) continue;
      order.push_back(n);
      left.erase(n);
      progress = true;
    }
    MT_CHECK(progress) << "fold_views: a cycle among removed nodes";
  }
  return order;
}

std::optional<View> ViewOfChain(const std::vector<Node*>& chain) {
  std::optional<View> v = ViewOf(chain.front()->input(0));
  if (!v) return std::nullopt;
  for (const Node* n : chain)
    if (!Apply(*v, *n)) return std::nullopt;
  return v;
}

void RemoveAll(Graph& g, const std::vector<Node*>& nodes) {
  for (Node* n : nodes) g.RemoveNode(n);
}

bool EndsChain(const Graph& g, const Node& n) {
  Value* y = n.output(0);
  Node* next = fusion::SoleConsumer(g, y);
  return next == nullptr || !IsReshapeOrTranspose(*next) || next->input(0) != y;
}

// Rule 1: a chain of two or more view ops ending at n becomes fewer nodes.
bool FoldChain(Graph& g, Node* n) {
  if (!IsReshapeOrTranspose(*n) || !EndsChain(g, *n)) return false;
  std::vector<Node*> readers;
  const std::vector<Node*> chain = ChainInto(g, n->output(0), &readers);
  if (chain.size() < 2) return false;
  std::optional<View> v = ViewOfChain(chain);
  if (!v) return false;
  Value* y = n->output(0);
  std::optional<std::vector<Mono>> out_dims = MonosOf(y->shape);
  std::optional<std::vector<Mono>> src = MonosOf(v->source->shape);
  if (!out_dims || !src) return false;
  std::optional<Plan> plan = MakePlan(*v, *src, *out_dims);
  if (!plan || std::max(plan->nodes(), 1) >= static_cast<int>(chain.size())) return false;
  if ((plan->perm.empty() ? 0 : 1) > Transposes(chain)) return false;
  std::optional<std::vector<Node*>> removal = Removal(g, chain, readers);
  if (!removal) return false;
  const std::string base = n->name();
  RemoveAll(g, *removal);
  Emit(g, *v, *plan, y, base);
  return true;
}

// Rule 2: Split along one factor of the source of a view chain that transposes.
bool SplitThroughChain(Graph& g, Node* s) {
  if (!IsOnnx(*s, "Split") || s->input(0) == nullptr) return false;
  Value* y = s->input(0);
  if (fusion::SoleConsumer(g, y) != s || y->producer == nullptr || !IsReshapeOrTranspose(*y->producer))
    return false;
  std::vector<Node*> readers;
  const std::vector<Node*> chain = ChainInto(g, y, &readers);
  if (chain.empty() || Transposes(chain) == 0) return false;
  std::optional<View> v = ViewOfChain(chain);
  if (!v) return false;
  const int64_t rank = static_cast<int64_t>(v->groups.size());
  int64_t axis = s->attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || v->groups[axis].size() != 1) return false;
  const int f = v->groups[axis][0];
  if (!v->fine[f].known()) return false;
  // The pieces' sizes along the axis, from the outputs' shapes (split input or num_outputs).
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (Value* o : s->outputs()) {
    if (o == nullptr || !o->shape.rank_known || o->shape.rank() != rank || !o->shape.dims[axis].known())
      return false;
    if (!MonosOf(o->shape)) return false;
    sizes.push_back(o->shape.dims[axis].value);
    total += sizes.back();
  }
  if (total != v->fine[f].coef) return false;
  std::optional<std::vector<Mono>> src = MonosOf(v->source->shape);
  if (!src) return false;
  std::optional<std::vector<int64_t>> target;
  if (!(*src == v->fine)) {
    target = Target(v->fine, &*src);
    if (!target) return false;
  }
  // Every piece's plan first: nothing changes unless all of them can be built. Piece i is the
  // source's factors with factor f resized to its size (a dim of 1 stays in the piece's shape
  // but is no factor of its view).
  std::vector<View> pieces;
  std::vector<std::vector<Mono>> piece_dims;
  std::vector<Plan> plans;
  for (size_t i = 0; i < sizes.size(); ++i) {
    View p = *v;
    std::vector<Mono> dims = v->fine;
    dims[f] = Mono{sizes[i], {}};
    if (sizes[i] == 1) {
      p.fine.erase(p.fine.begin() + f);
      for (auto& grp : p.groups) {
        grp.erase(std::remove(grp.begin(), grp.end(), f), grp.end());
        for (int& k : grp) k -= k > f ? 1 : 0;
      }
    } else {
      p.fine[f] = dims[f];
    }
    std::optional<Plan> plan = MakePlan(p, dims, *MonosOf(s->output(i)->shape));
    if (!plan) return false;
    pieces.push_back(std::move(p));
    piece_dims.push_back(std::move(dims));
    plans.push_back(*plan);
  }
  std::optional<std::vector<Node*>> removal = Removal(g, chain, readers, s);
  if (!removal) return false;
  const std::string base = s->name();
  std::vector<Value*> outs(s->outputs().begin(), s->outputs().end());
  Value* x = v->source;
  RemoveAll(g, *removal);
  if (target) x = AddReshape(g, x, *target, nullptr, v->fine, base + "_src");
  std::vector<Value*> piece_values;
  for (size_t i = 0; i < sizes.size(); ++i)
    piece_values.push_back(g.AddValue(g.UniqueName(base + "_piece"), outs[i]->dtype, ShapeOf(piece_dims[i])));
  Node* split;
  if (g.opset("") >= 13) {  // the sizes are an input from opset 13, an attribute before
    Value* split_sizes = g.AddInitializer(
        g.UniqueName(base + "_split"),
        Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(sizes.size())}, sizes));
    split = g.AddNode("Split", {x, split_sizes}, piece_values, g.UniqueName(base));
  } else {
    split = g.AddNode("Split", {x}, piece_values, g.UniqueName(base));
    split->SetAttr(Attribute::Ints("split", sizes));
  }
  split->SetAttr(Attribute::Int("axis", f));
  for (size_t i = 0; i < sizes.size(); ++i) {
    pieces[i].source = piece_values[i];
    Emit(g, pieces[i], plans[i], outs[i], absl::StrCat(base, "_", i));
  }
  return true;
}

// Rule 3: Mul/Div(Transpose(X), scalar) => Transpose(Mul/Div(X, scalar)).
bool ScaleBeforeTranspose(Graph& g, Node* e) {
  if (!(IsOnnx(*e, "Mul") || IsOnnx(*e, "Div")) || e->num_inputs() != 2 || e->output(0) == nullptr)
    return false;
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && e->op_type() == "Div") break;  // scalar / Transpose is not a scale
    Value* a = e->input(i);
    Value* c = e->input(1 - i);
    Node* t = a->producer;
    if (t == nullptr || !IsOnnx(*t, "Transpose") || fusion::SoleConsumer(g, a) != e) continue;
    if (!a->shape.rank_known || !(e->output(0)->shape == a->shape) || a->dtype != c->dtype) continue;
    if (!fusion::ConstantScalar(g, c, a->shape.rank())) continue;
    Value* x = t->input(0);
    const std::vector<int64_t> perm = fusion::TransposePerm(*t, a->shape.rank());
    const std::string base = e->name();
    Value* y = e->output(0);
    const std::string op = e->op_type();
    g.RemoveNode(e);
    g.RemoveNode(t);
    Value* scaled = g.AddValue(g.UniqueName(base + "_scaled"), x->dtype, x->shape);
    std::vector<Value*> ins = i == 0 ? std::vector<Value*>{x, c} : std::vector<Value*>{c, x};
    g.AddNode(op, ins, {scaled}, g.UniqueName(base));
    Node* tr = g.AddNode("Transpose", {scaled}, {y}, g.UniqueName(base + "_transpose"));
    tr->SetAttr(Attribute::Ints("perm", perm));
    return true;
  }
  return false;
}

class FoldViewsPass final : public Pass {
 public:
  absl::string_view name() const override { return "fold_views"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    MT_RETURN_IF_ERROR(InferShapes(g));
    bool changed = false;
    for (bool again = true; again;) {
      again = fusion::ToFixedPoint(g, SplitThroughChain);
      again |= fusion::ToFixedPoint(g, FoldChain);
      again |= fusion::ToFixedPoint(g, ScaleBeforeTranspose);
      changed |= again;
    }
    if (!changed) return false;
    MT_RETURN_IF_ERROR(g.TopoSort());
    MT_RETURN_IF_ERROR(InferShapes(g));
    return true;
  }
};

}  // namespace

MT_REGISTER_INFERENCE_PASS(fold_views, 5, [] { return std::make_unique<FoldViewsPass>(); });

}  // namespace mixtrain
