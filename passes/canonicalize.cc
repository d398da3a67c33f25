// The import canonicalization stage (docs/architecture.md, "The pipeline"): what exporters leave for a runtime to
// work out is worked out once, so later passes and autodiff see static ranks and constant
// shape operands. To a fixed point:
//   - shape data: int values whose contents shape arithmetic fully determines (Shape of a
//     statically known tensor, Gather/Slice/Concat/Add... of such) become initializers; values
//     that depend on a dynamic dim keep it as a symbol in the shapes they produce
//     (InferShapes' partial data propagation);
//   - constant folding: a node whose inputs are all constants (Constant nodes, folded values,
//     initializers that do not train and are not state) is run once with the CPU kernels
//     (through the host evaluator the runtime registers) and becomes an initializer;
//   - Constant nodes become initializers (counted as folded), so every rule, autodiff
//     included, reads a constant one way;
//   - simplification: Identity and Dropout(ratio 0) are bypassed (an Identity giving a BatchNorm's
//     statistics a name of their own becomes a copy: each BN updates its own), CastLike becomes Cast,
//     sequences of a known length become their pieces (SplitToSequence a Split, SequenceAt
//     the piece: canonicalize_sequences.cc), exporters' random-mask dropout becomes Dropout
//     (canonicalize_dropout.cc), and Gathers of one tensor at constant scalar indices become
//     one Split (torch's q/k/v select);
//   - dead nodes and initializers nothing uses are removed.
// Parameters are never folded into anything, so what trains stays what the framework trains.
#include <algorithm>
#include <deque>
#include <map>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/shape_inference.h"
#include "passes/canonicalize.h"
#include "passes/canonicalize_rules.h"

namespace mixtrain {
namespace {

// Ops whose result is not a function of their inputs (random, or unknown here), that training
// changes (BatchNormalization's statistics), or that hold graphs or sequences.
bool NeverFold(const Node& n) {
  const std::string& op = n.op_type();
  return !n.domain().empty() || MayDiffer(n) || op == "Constant" || op == "BatchNormalization" ||
         op == "SplitToSequence" || op == "SequenceAt" || op == "SequenceConstruct" ||
         op == "ConcatFromSequence" || op == "SequenceLength" || op == "If" || op == "Loop" || op == "Scan";
}

int64_t Elements(const Shape& s) {
  if (!s.fully_known()) return -1;
  int64_t p = 1;
  for (const Dim& d : s.dims) p *= d.value;
  return p;
}

// The tensor of an int value whose contents are fully known, shaped as the value (0-D or 1-D).
std::optional<Tensor> DataTensor(const Value* v, const SymInts& data) {
  if (!v->shape.rank_known || v->shape.rank() > 1) return std::nullopt;
  std::vector<int64_t> ints;
  for (const SymInt& s : data) {
    if (!s.known()) return std::nullopt;
    ints.push_back(*s.value);
  }
  std::vector<int64_t> dims;
  if (v->shape.rank() == 1) {
    dims.push_back(static_cast<int64_t>(ints.size()));
  } else if (ints.size() != 1) {
    return std::nullopt;
  }
  switch (v->dtype) {
    case DType::kI64: return Tensor::FromVector<int64_t>(DType::kI64, dims, ints);
    case DType::kI32: {
      std::vector<int32_t> v32(ints.begin(), ints.end());
      return Tensor::FromVector<int32_t>(DType::kI32, dims, v32);
    }
    case DType::kBool: {
      std::vector<uint8_t> b;
      for (int64_t x : ints) b.push_back(x != 0);
      return Tensor::FromVector<uint8_t>(DType::kBool, dims, b);
    }
    default: return std::nullopt;
  }
}

class CanonicalizePass final : public Pass {
 public:
  explicit CanonicalizePass(CanonicalizeOptions o) : opt_(std::move(o)) {}
  absl::string_view name() const override { return "canonicalize"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    CanonicalizeReport report;
    bool changed = false;
    for (int round = 0; round < 16; ++round) {
      MT_RETURN_IF_ERROR(g.TopoSort());
      ShapeData data;
      MT_RETURN_IF_ERROR(InferShapes(g, &data));
      MT_ASSIGN_OR_RETURN(keep_, KeptInitializers(g));
      bool again = Simplify(g, report);
      ApplyPending(g);
      again |= FoldShapeData(g, data, report);
      MT_ASSIGN_OR_RETURN(bool folded, FoldConstants(g, report));
      ApplyPending(g);
      again |= folded;
      again |= RemoveDead(g, report);
      changed |= again;
      if (!again) break;
    }
    MT_RETURN_IF_ERROR(g.TopoSort());
    MT_RETURN_IF_ERROR(InferShapes(g));
    if (opt_.report != nullptr) *opt_.report = std::move(report);
    return changed;
  }

 private:
  // Initializers folding must leave alone: what trains, state, and overridable graph inputs.
  absl::StatusOr<absl::flat_hash_set<const Value*>> KeptInitializers(const Graph& g) const {
    MT_ASSIGN_OR_RETURN(absl::flat_hash_set<const Value*> keep, SelectTrainable(g, opt_.params));
    for (const auto& [v, c] : ClassifyInitializers(g))
      if (c.role == InitializerRole::kState) keep.insert(v);
    for (const Value* v : g.inputs()) keep.insert(v);
    return keep;
  }

  // The contents of v when it is a constant here, else null.
  const Tensor* ConstantOf(const Value* v) {
    if (auto it = pending_.find(v); it != pending_.end()) return &it->second;
    if (v->is_initializer()) return keep_.contains(v) ? nullptr : &*v->initializer;
    if (v->producer == nullptr) return nullptr;
    std::optional<Tensor> t = ConstantNodeValue(*v->producer);
    if (!t) return nullptr;
    scratch_.push_back(std::move(*t));
    return &scratch_.back();
  }

  // Output i of node n (not a graph output) becomes an initializer holding t, keeping its name,
  // once the sweep is over (ApplyPending); until then ConstantOf already reads t.
  void Materialize(Node* n, size_t i, Tensor t) {
    pending_.emplace(n->output(i), std::move(t));
    if (std::find(pending_nodes_.begin(), pending_nodes_.end(), n) == pending_nodes_.end())
      pending_nodes_.push_back(n);
  }

  void ApplyPending(Graph& g) {
    for (Node* n : pending_nodes_) {
      std::vector<std::pair<Value*, Tensor>> outs;
      for (Value* o : n->outputs()) {
        auto it = pending_.find(o);
        if (o != nullptr && it != pending_.end() && !o->consumers.empty())
          outs.emplace_back(o, std::move(it->second));
      }
      const std::string op = n->op_type();
      g.RemoveNode(n);  // outputs still used stay, without a producer
      for (auto& [v, t] : outs) {
        g.SetInitializer(v, std::move(t));
        v->metadata[kFoldedMetadata] = op;
      }
    }
    pending_.clear();
    pending_nodes_.clear();
  }

  bool FoldShapeData(Graph& g, const ShapeData& data, CanonicalizeReport& report) {
    bool changed = false;
    for (const auto& up : g.nodes()) {
      Node* n = up.get();
      if (n->num_outputs() != 1 || n->output(0) == nullptr || NeverFold(*n)) continue;
      Value* v = n->output(0);
      if (v->consumers.empty() || g.IsGraphOutput(v)) continue;
      auto it = data.find(v);
      if (it == data.end()) continue;
      std::optional<Tensor> t = DataTensor(v, it->second);
      if (!t) continue;
      Materialize(n, 0, std::move(*t));
      ++report.shape_values;
      changed = true;
    }
    return changed;
  }

  absl::StatusOr<bool> FoldConstants(Graph& g, CanonicalizeReport& report) {
    const HostEvaluator eval = opt_.evaluator;
    if (eval == nullptr) return false;
    bool changed = false;
    for (const auto& up : g.nodes()) {
      Node* n = up.get();
      if (NeverFold(*n) || n->num_inputs() == 0) continue;
      bool used = false, output_is_graph_output = false;
      int64_t elements = 0;
      for (Value* o : n->outputs()) {
        if (o == nullptr) continue;
        used |= !o->consumers.empty();
        output_is_graph_output |= g.IsGraphOutput(o);
        int64_t e = Elements(o->shape);
        elements = e < 0 || elements < 0 ? -1 : elements + e;
      }
      if (!used || output_is_graph_output) continue;
      if (elements < 0 || elements > opt_.fold_limit_elements) continue;
      std::vector<const Tensor*> args;
      bool all_constant = true;
      for (Value* in : n->inputs()) {
        const Tensor* t = in == nullptr ? nullptr : ConstantOf(in);
        if (in != nullptr && t == nullptr) all_constant = false;
        args.push_back(t);
      }
      if (!all_constant) continue;
      absl::StatusOr<std::vector<Tensor>> outs = eval(*n, g.opset(n->domain()), args);
      if (!outs.ok()) {  // no kernel for these types, say: the node stays, and says why
        report.not_folded.push_back(absl::StrCat(n->name(), " (", n->op_type(), "): ", outs.status().message()));
        continue;
      }
      for (size_t i = 0; i < n->num_outputs() && i < outs->size(); ++i)
        if (n->output(i) != nullptr) Materialize(n, i, std::move((*outs)[i]));
      ++report.folded_nodes;
      changed = true;
    }
    scratch_.clear();
    return changed;
  }

  bool Simplify(Graph& g, CanonicalizeReport& report) {
    bool changed = false;
    const ConstantLookup constant = [this](const Value* v) { return ConstantOf(v); };
    std::vector<Node*> nodes;
    for (const auto& up : g.nodes()) nodes.push_back(up.get());
    for (Node* n : nodes) {
      if (!n->domain().empty()) continue;
      const std::string& op = n->op_type();
      Value* out = n->output(0);
      if (out == nullptr || g.IsGraphOutput(out)) continue;
      if (op == "Constant") {  // an initializer, so every rule reads constants one way
        if (std::optional<Tensor> t = ConstantNodeValue(*n)) {
          Materialize(n, 0, std::move(*t));
          ++report.folded_nodes;
          changed = true;
        }
        continue;
      }
      if (n->input(0) == nullptr) continue;
      if (op == "Identity" && CopiesStatistics(*n)) {
        // BatchNorm running statistics under a name of their own: an exporter that merges equal
        // initializers (TorchScript in eval mode: every fresh BN's zeros and ones) reads one
        // tensor through Identities; training updates each BN's own, as the framework does.
        Value* source = n->input(0);
        Tensor own = source->initializer->Clone();
        const auto metadata = source->metadata;
        g.RemoveNode(n);  // `out` stays, without a producer
        g.SetInitializer(out, std::move(own));
        for (const auto& [k, v] : metadata) out->metadata.emplace(k, v);
        ++report.simplified;
        changed = true;
      } else if (op == "Identity" || (op == "Dropout" && DropsNothing(*n))) {
        g.ReplaceAllUsesWith(out, n->input(0));
        ++report.simplified;
        changed = true;
      } else if (op == "CastLike" && n->input(1) != nullptr &&
                 n->input(1)->dtype != DType::kUndefined) {
        Value* x = n->input(0);
        Node* cast = g.AddNode("Cast", {x}, 1, g.UniqueName(n->name()));
        cast->SetAttr(Attribute::Int("to", ToOnnxType(n->input(1)->dtype)));
        g.MoveBefore(cast, n);
        g.ReplaceAllUsesWith(out, cast->output(0));
        ++report.simplified;
        changed = true;
      } else if (op == "SplitToSequence" || op == "SequenceConstruct") {
        if (SequenceToTensors(g, n, constant)) {
          ++report.simplified;
          changed = true;
        }
      } else if (op == "RandomUniformLike") {
        if (RandomMaskToDropout(g, n, constant)) {
          ++report.simplified;
          changed = true;
        }
      } else if (op == "Gather") {
        changed |= GathersToSplit(g, n->input(0), report);
      }
    }
    return changed;
  }

  // An Identity of an initializer whose every reader takes it as a BatchNormalization's running
  // mean or variance (inputs 3 and 4).
  static bool CopiesStatistics(const Node& n) {
    const Value* in = n.input(0);
    const Value* out = n.output(0);
    if (in == nullptr || !in->is_initializer() || out == nullptr || out->consumers.empty()) return false;
    for (const Node* c : out->consumers) {
      if (c->op_type() != "BatchNormalization" || !c->domain().empty()) return false;
      for (size_t i = 0; i < c->num_inputs(); ++i)
        if (c->input(i) == out && i != 3 && i != 4) return false;
    }
    return true;
  }

  // Dropout whose ratio is a constant 0, or that has no training_mode input (inference
  // semantics) and whose mask nothing reads. A Dropout with a ratio stays for train_mode.
  bool DropsNothing(const Node& n) {
    if (n.num_outputs() > 1 && n.output(1) != nullptr && !n.output(1)->consumers.empty()) return false;
    const Tensor* ratio = n.input(1) ? ConstantOf(n.input(1)) : nullptr;
    bool zero = false;
    if (n.input(1) == nullptr) {
      zero = n.has_attr("ratio") && n.attr_float("ratio", 0.5f) == 0.0f;
    } else if (ratio != nullptr && ratio->numel() == 1) {
      zero = ratio->GetDouble(0) == 0.0;
    }
    scratch_.clear();
    return zero;
  }

  // X read only by Gathers at constant scalar indices along one axis, covering at least half of
  // it (torch's MultiheadAttention selects q, k and v so from its stacked projection) -> one
  // Split of X into pieces of 1 and a Squeeze per Gather. The same values; but the gradient is
  // one Concat of the pieces, where each Gather's is a zero tensor of X's size with one slice
  // written, and the sum of those takes an Add of X's size per further Gather.
  bool GathersToSplit(Graph& g, Value* x, CanonicalizeReport& report) {
    const Shape& s = x->shape;
    if (x->consumers.size() < 2 || !s.rank_known || g.opset("") < 13) return false;
    int64_t axis = -1;
    std::vector<std::pair<Node*, int64_t>> reads;
    std::vector<bool> used;
    for (Node* c : x->consumers) {
      if (c->op_type() != "Gather" || !c->domain().empty() || c->input(0) != x ||
          c->input(1) == x || c->output(0) == nullptr || g.IsGraphOutput(c->output(0)))
        return false;
      int64_t a = c->attr_int("axis", 0);
      if (a < 0) a += s.rank();
      if (a < 0 || a >= s.rank() || (axis >= 0 && a != axis) || !s.dims[a].known()) return false;
      axis = a;
      const int64_t dim = s.dims[a].value;
      const Tensor* t = ConstantOf(c->input(1));
      if (t == nullptr || t->rank() != 0) return false;
      int64_t k = t->ToInt64Vector()[0];
      if (k < 0) k += dim;
      if (k < 0 || k >= dim) return false;
      used.resize(dim, false);
      used[k] = true;
      reads.emplace_back(c, k);
    }
    scratch_.clear();
    const int64_t dim = static_cast<int64_t>(used.size());
    if (2 * std::count(used.begin(), used.end(), true) < dim) return false;
    Node* first = reads.front().first;
    Value* sizes = g.AddInitializer(g.UniqueName(x->name + "_pieces"),
                                    Tensor::FromVector<int64_t>(DType::kI64, {dim}, std::vector<int64_t>(dim, 1)));
    Node* split = g.AddNode("Split", {x, sizes}, static_cast<int>(dim), g.UniqueName(x->name + "_split"));
    split->SetAttr(Attribute::Int("axis", axis));
    g.MoveBefore(split, first);
    Value* axes = g.AddInitializer(g.UniqueName(x->name + "_axis"),
                                   Tensor::FromVector<int64_t>(DType::kI64, {1}, {axis}));
    for (auto [c, k] : reads) {
      Node* sq = g.AddNode("Squeeze", {split->output(k), axes}, 1, g.UniqueName(c->name()));
      g.MoveBefore(sq, first);
      g.ReplaceAllUsesWith(c->output(0), sq->output(0));
    }
    ++report.simplified;
    return true;
  }

  bool RemoveDead(Graph& g, CanonicalizeReport& report) {
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      std::vector<Node*> dead;
      for (const auto& up : g.nodes()) {
        bool used = false;
        for (Value* o : up->outputs())
          if (o && (!o->consumers.empty() || g.IsGraphOutput(o))) used = true;
        if (!used) dead.push_back(up.get());
      }
      for (Node* n : dead) g.RemoveNode(n);
      report.removed_nodes += static_cast<int>(dead.size());
      again = !dead.empty();
      changed |= again;
    }
    std::vector<Value*> unused;
    for (Value* v : g.initializers())
      if (v->consumers.empty() && !g.IsGraphOutput(v) &&
          std::find(g.inputs().begin(), g.inputs().end(), v) == g.inputs().end())
        unused.push_back(v);
    for (Value* v : unused) {
      g.RemoveInitializer(v);
      g.RemoveValue(v);
      ++report.removed_initializers;
      changed = true;
    }
    return changed;
  }

  CanonicalizeOptions opt_;
  absl::flat_hash_set<const Value*> keep_;
  std::deque<Tensor> scratch_;  // contents of Constant nodes read during one sweep
  std::map<const Value*, Tensor> pending_;  // values to become initializers after the sweep
  std::vector<Node*> pending_nodes_;
};

}  // namespace

std::unique_ptr<Pass> MakeCanonicalizePass(CanonicalizeOptions options) {
  return std::make_unique<CanonicalizePass>(std::move(options));
}

}  // namespace mixtrain
