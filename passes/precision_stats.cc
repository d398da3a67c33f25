// The precision debugger's in-graph statistics (passes/training.h, MakePrecisionStatsPass); the
// step phases by node name (PhaseOf) are in passes/step_names.cc.
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"
#include "graph/ops/precision_stats_row.h"
#include "passes/passes.h"
#include "passes/training.h"

namespace mixtrain {

namespace {

constexpr char kMt[] = "ai.mixtrain";

// A Cast that turns a wider float into f16/bf16: where values overflow or flush.
bool CastsDown(const Node& n) {
  if (n.op_type() != "Cast" || !n.domain().empty() || n.input(0) == nullptr || n.output(0) == nullptr) return false;
  const DType from = n.input(0)->dtype, to = n.output(0)->dtype;
  return IsLowFloat(to) && IsFloat(from) && !IsLowFloat(from);
}

class PrecisionStatsPass final : public Pass {
 public:
  absl::string_view name() const override { return "precision_stats"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    if (g.FindValue(kPrecisionStatsName) != nullptr)
      return absl::InvalidArgumentError("the graph already has a 'precision_stats' value");
    struct Watch {
      Value* measured;
      const Node* after;  // placed right after this node (null: before the first)
      std::string value, node;
      DType range;
      bool cast_input;
    };
    std::vector<Watch> watches;
    for (Value* in : g.inputs())
      if (!in->is_initializer() && IsFloat(in->dtype)) watches.push_back({in, nullptr, in->name, "", in->dtype, false});
    for (const auto& up : g.nodes()) {
      const Node& n = *up;
      const StepPhase phase = PhaseOf(n);
      if (phase == StepPhase::kOptimizer || phase == StepPhase::kDebug || phase == StepPhase::kCommunication ||
          phase == StepPhase::kRecompute)
        continue;
      if (HasOpTraits(n, kOpView)) continue;  // the same bytes as its input, already watched
      if (CastsDown(n)) {
        watches.push_back({n.input(0), &n, n.output(0)->name, n.name(), n.output(0)->dtype, true});
        continue;
      }
      for (Value* out : n.outputs())
        if (out != nullptr && IsFloat(out->dtype)) watches.push_back({out, &n, out->name, n.name(), out->dtype, false});
    }
    if (watches.empty()) return false;

    // Where each new node goes: before the node that followed its anchor in the original order.
    absl::flat_hash_map<const Node*, const Node*> next;
    const Node* first = g.nodes().empty() ? nullptr : g.nodes().front().get();
    for (size_t i = 0; i + 1 < g.nodes().size(); ++i) next[g.nodes()[i].get()] = g.nodes()[i + 1].get();

    std::vector<Value*> rows;
    for (size_t k = 0; k < watches.size(); ++k) {
      const Watch& w = watches[k];
      Value* row = g.AddValue(g.UniqueName(absl::StrCat(kPrecisionStatsName, "/", k)), DType::kF32,
                              Shape(std::vector<Dim>{Dim(1), Dim(kNumStatFields)}));
      Node* s = g.AddNode("PrecisionStats", {w.measured}, {row}, absl::StrCat(kPrecisionStatsName, "/", w.value), kMt);
      s->SetAttr(Attribute::Int("to", ToOnnxType(w.range)));
      s->SetAttr(Attribute::String("value", w.value));
      s->SetAttr(Attribute::String("node", w.node));
      s->SetAttr(Attribute::Int("cast_input", w.cast_input ? 1 : 0));
      const Node* before = w.after == nullptr ? first : (next.contains(w.after) ? next.at(w.after) : nullptr);
      if (before != nullptr) g.MoveBefore(s, before);
      rows.push_back(row);
    }
    Value* out = g.AddValue(kPrecisionStatsName, DType::kF32,
                            Shape(std::vector<Dim>{Dim(static_cast<int64_t>(rows.size())), Dim(kNumStatFields)}));
    Node* concat = g.AddNode("Concat", rows, {out}, absl::StrCat(kPrecisionStatsName, "/concat"));
    concat->SetAttr(Attribute::Int("axis", 0));
    g.AddOutput(out);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> MakePrecisionStatsPass() { return std::make_unique<PrecisionStatsPass>(); }

}  // namespace mixtrain

#include "passes/pass_registry.h"

namespace mixtrain {
MT_REGISTER_PASS(precision_stats, [] { return MakePrecisionStatsPass(); });
}  // namespace mixtrain
