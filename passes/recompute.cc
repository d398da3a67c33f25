// recompute (training pass, the last rewrite of the step; TrainConfig recompute = auto | all):
// parts of the forward pass are computed again in the backward pass instead of kept alive
// between the two, trading arithmetic for memory (ONNX Runtime's layer-wise recompute, PyTorch's
// activation checkpointing).
//
// Segments come from the graph's structure, not from names. Walking the forward in order, a *cut*
// is a point where exactly one activation (a value that depends on the batch) is still needed by
// later forward nodes: between two transformer blocks (the residual stream), between two conv
// stages. The nodes between two cuts are a segment. Recomputing a segment keeps its entry cut
// value alive into the backward and clones, right before the first backward node that reads one
// of its saved values, the nodes that produce those values from the cut value; the backward then
// reads the clones and the originals die in the forward. A segment's net saving is the bytes of
// its saved values, less its entry value's when the backward did not already keep that one.
//
// Whether a segment helps is decided by simulating the step's memory in node order (each value
// from its producer to its last reader, as the planner reuses buffers): a segment whose saved
// values are read by the backward far apart (the steps of an unrolled recurrence, summed at the
// end) would hold its copies longer than the originals lived, and is left alone.
// A segment is kept when it lowers the simulated peak, or keeps it and holds less memory over the
// step (the peak may still be held up by another segment).
//   all:  every segment that helps, in forward order.
//   auto: segments in decreasing order of bytes saved per FLOP (elementwise ops count their
//         outputs' elements as FLOPs), each kept if it helps, until the
//         extra FLOPs reach a third of the forward's: the attention halves of a transformer
//         before its MLP halves, never the classifier over a vocabulary.
//
// A weight's low-precision copy (AMP's Cast of it) read by the backward is a segment of its own,
// cast again right before its first reader after the forward (tried after the activations'
// segments, whose clones read it too).
// What is never recomputed, so a segment's clones start from it: values that do not depend on the
// batch (weights, masks; the casts above only as their own segments), graph outputs, and the outputs of random ops (a
// Dropout's mask is drawn once) or of nodes with subgraphs or collective communication. The
// clones are the same ops with the same attributes on the same inputs, so in fp32 the gradients
// are bit-identical to the step without recompute (tests/passes/recompute_test.cc). The clones
// are named "recompute/<node>" (StepPhase kRecompute: the profiler shows their time apart).
// Symbolic dims count as kNominalDim for the cost model: bytes and FLOPs scale alike with the
// batch, so the order of segments does not depend on it.
#include <algorithm>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"
#include "passes/pass_registry.h"
#include "passes/passes.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

constexpr int64_t kNominalDim = 16;
constexpr char kRecomputePrefix[] = "recompute/";

double Elements(const Value* v) {
  if (v == nullptr || !v->shape.rank_known) return 0;
  double n = 1;
  for (const Dim& d : v->shape.dims) n *= d.known() ? static_cast<double>(d.value) : kNominalDim;
  return n;
}

double Bytes(const Value* v) { return Elements(v) * static_cast<double>(DTypeSize(v->dtype)); }

// Matrix products and convolutions by their shapes (multiply-adds count 2); any other op by the
// elements it writes.
double Flops(const Node& n) {
  const std::string& op = n.op_type();
  double out = 0;
  for (const Value* o : n.outputs()) out += Elements(o);
  const Value* a = n.input(0);
  const Value* w = n.input(1);
  if ((op == "MatMul" || op == "Gemm" || op == "FusedMatMul") && a != nullptr && a->shape.rank_known &&
      a->shape.rank() >= 1) {
    // The contracted length: A's last dim, or its first for a transposed 2-D operand.
    const bool trans = n.attr_int("transA", 0) != 0 || n.attr_ints("perm_a").size() >= 2;
    const Dim& k = trans ? a->shape.dims[a->shape.rank() - 2] : a->shape.dims.back();
    return 2 * Elements(n.output(0)) * (k.known() ? static_cast<double>(k.value) : kNominalDim);
  }
  if ((op == "Conv" || op == "FusedConv") && w != nullptr && w->shape.rank_known && w->shape.rank() >= 2) {
    double per_output = 1;  // Cin/group x kernel elements
    for (int64_t d = 1; d < w->shape.rank(); ++d)
      per_output *= w->shape.dims[d].known() ? static_cast<double>(w->shape.dims[d].value) : kNominalDim;
    return 2 * Elements(n.output(0)) * per_output;
  }
  return out;
}

bool HasSubgraph(const Node& n) {
  for (const Attribute& a : n.attributes())
    if (a.kind == Attribute::Kind::kOpaque) return true;
  return false;
}

// Nodes whose outputs are kept rather than recomputed: a second run would draw other random
// numbers, talk to other ranks, or run a body we do not clone.
bool MustKeepOutputs(const Node& n) {
  return HasOpTraits(n, kOpRandom) || HasSubgraph(n) || PhaseOf(n) == StepPhase::kCommunication;
}


// The step's working memory as node order implies it: every value a node computes, stored from
// its producer to its last reader (a view lives in its source's storage); weights, graph inputs,
// graph outputs (state updates are written into the weights) and values computed from dims alone
// take none. The peak of the sum, and its integral over the nodes (bytes held x nodes held).
struct Footprint {
  double peak = 0, integral = 0;
  // Lower peak, or the same peak held for less: a segment that moves memory off the peak's
  // plateau without lowering it yet (another segment holds the peak up) still counts.
  bool operator<(const Footprint& o) const {
    const double eps = 1e-9 * std::max(1.0, o.peak);
    return peak < o.peak - eps || (peak <= o.peak + eps && integral < o.integral * (1 - 1e-12));
  }
};

Footprint Simulate(const Graph& g) {
  const int64_t n = static_cast<int64_t>(g.num_nodes());
  struct Live {
    double bytes = 0;
    int64_t start = 0, end = 0;
  };
  absl::flat_hash_map<const Value*, Live> live;  // by storage
  auto storage = [](const Value* v) {
    while (v->producer != nullptr && IsViewNode(*v->producer)) v = v->producer->input(0);
    return v;
  };
  auto read = [&](const Value* v, int64_t at) {
    if (v == nullptr) return;
    auto it = live.find(storage(v));
    if (it != live.end()) it->second.end = std::max(it->second.end, at);
  };
  // A graph output's storage (the state updates "state/<w>" are Identity views of the
  // optimizer's outputs, which the planner writes straight into the weights) takes none.
  absl::flat_hash_set<const Value*> outputs;
  for (const Value* o : g.outputs()) outputs.insert(storage(o));
  for (int64_t i = 0; i < n; ++i) {
    const Node& node = *g.nodes()[i];
    if (HasOpTraits(node, kOpReadsOnlyDims)) continue;
    for (const Value* in : node.inputs()) read(in, i);
    if (IsViewNode(node)) continue;
    for (const Value* o : node.outputs())
      if (o != nullptr && !outputs.contains(o)) live[o] = {Bytes(o), i, i};
  }
  std::vector<double> delta(n + 2, 0);
  for (const auto& [v, l] : live) {
    delta[l.start] += l.bytes;
    delta[l.end + 1] -= l.bytes;
  }
  Footprint f;
  double sum = 0;
  for (double d : delta) {
    sum += d;
    f.peak = std::max(f.peak, sum);
    f.integral += sum;
  }
  return f;
}

struct Segment {
  std::vector<Node*> nodes;          // forward order
  Value* entry = nullptr;            // the cut value it starts from (null: the first segment)
  std::vector<Value*> saved;         // its values the backward reads, to be recomputed
  std::vector<Node*> clone;          // the nodes that produce `saved` from kept values, in order
  double bytes = 0, flops = 0;
  bool weight_copy = false;          // a weight's copy (below), tried after the activations
};

// What Apply changed, for Undo.
struct Applied {
  std::vector<Node*> clones;
  struct Read {
    Node* reader;
    size_t input;
    Value* original;
  };
  std::vector<Read> reads;
};

class RecomputePass final : public Pass {
 public:
  explicit RecomputePass(RecomputeOptions o) : o_(o) {}
  absl::string_view name() const override { return "recompute"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    if (o_.mode == RecomputeOptions::Mode::kNone) return false;
    // --- what each node and value is ---
    // The forward: the nodes the loss depends on, in order.
    const Value* loss = g.FindValue(kLossName);
    if (loss == nullptr || loss->producer == nullptr) return false;
    absl::flat_hash_set<const Node*> computes_loss;
    for (std::vector<const Node*> stack = {loss->producer}; !stack.empty();) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!computes_loss.insert(n).second) continue;
      for (const Value* in : n->inputs())
        if (in != nullptr && in->producer != nullptr) stack.push_back(in->producer);
    }
    std::vector<Node*> forward;
    for (const auto& up : g.nodes()) {
      if (PhaseOf(*up) == StepPhase::kRecompute) return false;  // already done
      if (computes_loss.contains(up.get())) forward.push_back(up.get());
    }
    auto is_backward = [](const Node* n) { return IsBackward(n); };
    SinkEarlyBackward(g, forward.back());
    // Activations: values that depend on the contents of a graph input that is not an
    // initializer (not on its dims only: the batch size a Reshape reads is no activation).
    absl::flat_hash_set<const Value*> activation;
    for (const Value* v : g.inputs())
      if (!v->is_initializer()) activation.insert(v);
    for (const auto& up : g.nodes()) {
      if (HasOpTraits(*up, kOpReadsOnlyDims)) continue;
      bool act = false;
      for (const Value* in : up->inputs()) act = act || (in != nullptr && activation.contains(in));
      if (act)
        for (const Value* o : up->outputs())
          if (o != nullptr) activation.insert(o);
    }
    // Views of a graph input (the labels reshaped by the loss) alias memory that lives anyway.
    absl::flat_hash_set<const Value*> input_alias(g.inputs().begin(), g.inputs().end());
    for (const auto& up : g.nodes())
      if (HasOpTraits(*up, kOpView) && up->input(0) != nullptr && input_alias.contains(up->input(0)) &&
          up->output(0) != nullptr)
        input_alias.insert(up->output(0));
    // Kept: never recomputed.
    absl::flat_hash_set<const Value*> kept;
    for (Node* n : forward)
      for (const Value* o : n->outputs()) {
        if (o == nullptr) continue;
        if (!activation.contains(o) || input_alias.contains(o) || g.IsGraphOutput(o) || MustKeepOutputs(*n))
          kept.insert(o);
      }
    auto read_by_backward = [&](const Value* v) {
      return std::any_of(v->consumers.begin(), v->consumers.end(), is_backward);
    };

    // --- cuts: after forward node i, the activations later forward nodes still read ---
    absl::flat_hash_map<const Value*, int64_t> last_forward_use;
    absl::flat_hash_map<const Node*, int64_t> fwd_index;
    for (size_t i = 0; i < forward.size(); ++i) fwd_index[forward[i]] = static_cast<int64_t>(i);
    for (size_t i = 0; i < forward.size(); ++i)
      for (const Value* in : forward[i]->inputs())
        if (in != nullptr && activation.contains(in) && !input_alias.contains(in) && in->producer != nullptr &&
            fwd_index.contains(in->producer))
          last_forward_use[in] = static_cast<int64_t>(i);
    std::vector<Segment> segments(1);
    int64_t live = 0;
    Value* only = nullptr;
    absl::flat_hash_map<int64_t, std::vector<const Value*>> dies_at;
    for (const auto& [v, i] : last_forward_use) dies_at[i].push_back(v);
    for (size_t i = 0; i < forward.size(); ++i) {
      Node* n = forward[i];
      segments.back().nodes.push_back(n);
      live -= static_cast<int64_t>(dies_at[static_cast<int64_t>(i)].size());
      for (Value* o : n->outputs())
        if (o != nullptr && last_forward_use.contains(o)) ++live, only = o;
      // One activation crosses this point (and it is the last one made, so no older one does).
      if (live == 1 && i + 1 < forward.size() && only != nullptr && last_forward_use.contains(only) &&
          last_forward_use[only] > static_cast<int64_t>(i) && only->producer == n) {
        segments.push_back({});
        segments.back().entry = only;
      }
    }

    // The cut values stay: the next segment's clones start from them.
    for (const Segment& s : segments)
      if (s.entry != nullptr) kept.insert(s.entry);

    // --- per segment: what it saves and what recomputing it costs ---
    for (Segment& s : segments) {
      absl::flat_hash_set<const Node*> members(s.nodes.begin(), s.nodes.end());
      for (Node* n : s.nodes)
        for (Value* o : n->outputs())
          if (o != nullptr && !kept.contains(o) && o != s.entry && read_by_backward(o)) s.saved.push_back(o);
      if (s.saved.empty()) continue;
      // The producers of the saved values within the segment, back to kept values and the entry.
      absl::flat_hash_set<const Node*> need;
      std::vector<const Value*> stack(s.saved.begin(), s.saved.end());
      bool closed = true;
      while (!stack.empty()) {
        const Value* v = stack.back();
        stack.pop_back();
        if (v == s.entry || kept.contains(v) || v->producer == nullptr) continue;
        if (!members.contains(v->producer)) {  // an activation from another segment: not a cut
          closed = false;
          break;
        }
        if (!need.insert(v->producer).second) continue;
        for (const Value* in : v->producer->inputs())
          if (in != nullptr) stack.push_back(in);
      }
      if (!closed) {
        s.saved.clear();
        continue;
      }
      for (Node* n : s.nodes)
        if (need.contains(n)) s.clone.push_back(n), s.flops += Flops(*n);
      for (const Value* v : s.saved) s.bytes += Bytes(v);
      if (s.entry != nullptr && !read_by_backward(s.entry)) s.bytes -= Bytes(s.entry);
    }

    // --- weights' low-precision copies: computed again for the backward too ---
    // A node that makes a value from weights alone (AMP's Cast of a weight to bf16) and whose
    // result the backward reads (the input gradient of a product reads the weight) holds it from
    // the forward to the backward: one segment of its own, recomputed from the weight. Cheap (its
    // "FLOPs" are its elements), so auto's budget hardly notices them; each is kept where it
    // lowers the simulated peak.
    for (Node* n : forward) {
      if (n->num_outputs() != 1 || n->output(0) == nullptr || IsViewNode(*n) || MustKeepOutputs(*n) ||
          HasOpTraits(*n, kOpReadsOnlyDims) || n->num_inputs() == 0)
        continue;
      Value* o = n->output(0);
      if (activation.contains(o) || g.IsGraphOutput(o) || !read_by_backward(o)) continue;
      bool from_weights = true;
      for (const Value* in : n->inputs()) from_weights = from_weights && in != nullptr && in->is_initializer();
      if (!from_weights) continue;
      Segment w;
      w.weight_copy = true;
      w.nodes = w.clone = {n};
      w.saved = {o};
      w.bytes = Bytes(o);
      w.flops = Flops(*n);
      segments.push_back(std::move(w));
    }

    // --- choose, by the simulated peak ---
    std::vector<Segment*> candidates;
    for (Segment& s : segments)
      if (!s.saved.empty() && s.bytes > 0) candidates.push_back(&s);
    double budget = 0;
    if (o_.mode == RecomputeOptions::Mode::kAuto) {
      for (const Node* n : forward) budget += Flops(*n) / 3;
      std::stable_sort(candidates.begin(), candidates.end(), [](const Segment* a, const Segment* b) {
        return a->bytes * b->flops > b->bytes * a->flops;
      });
    }
    // Weights' copies last: the clones of recomputed activations read them too, and must exist
    // to be pointed at the copy's clone (else they hold the forward's copy alive).
    std::stable_partition(candidates.begin(), candidates.end(), [](const Segment* s) { return !s->weight_copy; });
    Footprint best = Simulate(g);
    double extra = 0;
    bool changed = false;
    for (Segment* s : candidates) {
      if (o_.mode == RecomputeOptions::Mode::kAuto && extra + s->flops > budget) continue;
      Applied a = Apply(g, *s, forward.back());
      if (a.clones.empty()) continue;
      const Footprint f = Simulate(g);

      if (!(f < best)) {
        Undo(g, a);
        continue;
      }
      best = f;
      extra += s->flops;
      changed = true;
    }
    return changed;
  }

 private:
  // Backward nodes that read a value's contents (Shape and Size read its dims, known at plan
  // time, and need nothing kept).
  static bool IsBackward(const Node* n) {
    return PhaseOf(*n) == StepPhase::kBackward && !HasOpTraits(*n, kOpReadsOnlyDims);
  }
  // Nodes after the forward that read a value: the backward's, and the clones of segments
  // recomputed before (a recomputed product reads its weight's low-precision copy).
  static bool ReadsAfterForward(const Node* n) {
    const StepPhase p = PhaseOf(*n);
    return (p == StepPhase::kBackward || p == StepPhase::kRecompute) && !HasOpTraits(*n, kOpReadsOnlyDims);
  }

  // Backward nodes that read forward values only can sit inside the forward, where autodiff's
  // order put them (a Tanh's 1 - tanh^2 right after the Tanh): there they would read the saved
  // values before the clones exist and pin them. Each moves right before its first reader when
  // that reader comes after the forward, the last first so that chains follow; the arithmetic and
  // its order per value are unchanged.
  static void SinkEarlyBackward(Graph& g, const Node* last_forward) {
    std::vector<Node*> early;
    for (const auto& up : g.nodes()) {
      if (PhaseOf(*up) == StepPhase::kBackward) early.push_back(up.get());
      if (up.get() == last_forward) break;
    }
    if (early.empty()) return;
    absl::flat_hash_map<const Node*, int64_t> order;
    auto renumber = [&] {
      order.clear();
      for (const auto& up : g.nodes()) order[up.get()] = static_cast<int64_t>(order.size());
    };
    renumber();
    for (auto it = early.rbegin(); it != early.rend(); ++it) {
      Node* n = *it;
      Node* first = nullptr;
      for (const Value* o : n->outputs())
        if (o != nullptr)
          for (Node* c : o->consumers)
            if (first == nullptr || order[c] < order[first]) first = c;
      if (first == nullptr || order[first] <= order[last_forward]) continue;
      g.MoveBefore(n, first);
      renumber();
    }
  }

  // Clones s.clone right before the first backward node that reads one of s.saved, and points the
  // backward readers at the clones. A backward view of a saved value (a Reshape autodiff placed
  // next to the forward) reads nothing until its own readers run: it moves behind the clones.
  static Applied Apply(Graph& g, const Segment& s, const Node* last_forward) {
    Applied a;
    absl::flat_hash_map<const Node*, int64_t> order;
    for (const auto& up : g.nodes()) order[up.get()] = static_cast<int64_t>(order.size());
    const int64_t forward_end = order[last_forward];
    Node* first = nullptr;
    std::vector<Node*> views;
    std::vector<const Value*> stack(s.saved.begin(), s.saved.end());
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      for (Node* c : v->consumers) {
        if (!ReadsAfterForward(c)) continue;
        if (IsViewNode(*c) && c->input(0) == v && c->output(0) != nullptr) {
          views.push_back(c);
          stack.push_back(c->output(0));
        } else if (first == nullptr || order[c] < order[first]) {
          first = c;
        }
      }
    }
    // Backward work the passes placed inside the forward (a Transpose of an activation for its
    // weight gradient) is left alone: the clones would land in the forward.
    if (first == nullptr || order[first] <= forward_end) return a;
    // What the clones read from outside the segment must exist before `first`.
    for (const Node* n : s.clone)
      for (const Value* in : n->inputs())
        if (in != nullptr && in->producer != nullptr && order[in->producer] >= order[first] &&
            std::find(s.clone.begin(), s.clone.end(), in->producer) == s.clone.end())
          return a;
    absl::flat_hash_map<const Value*, Value*> copy;
    for (Node* n : s.clone) {
      std::vector<Value*> ins;
      for (Value* in : n->inputs()) {
        auto it = in == nullptr ? copy.end() : copy.find(in);
        ins.push_back(it != copy.end() ? it->second : in);
      }
      std::vector<Value*> outs;
      for (Value* o : n->outputs()) {
        if (o == nullptr) {
          outs.push_back(nullptr);
          continue;
        }
        Value* c = g.AddValue(g.UniqueName(absl::StrCat(kRecomputePrefix, o->name)), o->dtype, o->shape);
        copy[o] = c;
        outs.push_back(c);
      }
      Node* c = g.AddNode(n->op_type(), ins, outs, g.UniqueName(absl::StrCat(kRecomputePrefix, n->name())),
                          n->domain());
      for (const Attribute& attr : n->attributes()) c->SetAttr(attr);
      c->annotations() = n->annotations();
      g.MoveBefore(c, first);
      a.clones.push_back(c);
    }
    std::sort(views.begin(), views.end(), [&](const Node* x, const Node* y) { return order[x] < order[y]; });
    for (Node* v : views) g.MoveBefore(v, first);
    for (Value* v : s.saved) {
      Value* c = copy.at(v);
      for (Node* reader : std::vector<Node*>(v->consumers))
        if (ReadsAfterForward(reader))
          for (size_t i = 0; i < reader->num_inputs(); ++i)
            if (reader->input(i) == v) {
              g.SetInput(reader, i, c);
              a.reads.push_back({reader, i, v});
            }
    }
    return a;
  }

  // Points the readers back at the originals and removes the clones (the views stay moved:
  // where a view sits costs nothing).
  static void Undo(Graph& g, const Applied& a) {
    for (const Applied::Read& r : a.reads) g.SetInput(r.reader, r.input, r.original);
    for (auto it = a.clones.rbegin(); it != a.clones.rend(); ++it) g.RemoveNode(*it);
  }

  RecomputeOptions o_;
};

}  // namespace

std::unique_ptr<Pass> MakeRecomputePass(RecomputeOptions options) {
  return std::make_unique<RecomputePass>(options);
}

MT_REGISTER_PASS(recompute, [] { return MakeRecomputePass({RecomputeOptions::Mode::kAll}); });

}  // namespace mixtrain
