// The train-mode pass (docs/architecture.md, "The pipeline"): exported models come in eval form.
//   BatchNormalization -> batch statistics; the updated running mean/var become graph outputs
//     "state/<initializer>" that the runtime writes back after each step (momentum as exported).
//     Opset >= 14: training_mode=1 and outputs (Y, running_mean, running_var); before 14 the
//     training form is the one with the running-stat outputs (the opset-9 multi-output form).
//   Dropout -> training form: ratio kept, training_mode=true, a seed of its own, mask output
//     added so the gradient can reuse the mask. Each node's seed mixes the configured seed with
//     the node's name, so two dropout layers of one shape draw different masks and a rerun (or
//     a resumed run) draws the same ones.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "passes/pass_registry.h"
#include "passes/passes.h"

namespace mixtrain {

std::vector<std::pair<std::string, std::string>> StateUpdates(const Graph& g) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const Value* v : g.outputs()) {
    if (!absl::StartsWith(v->name, kStatePrefix)) continue;
    std::string init = v->name.substr(sizeof(kStatePrefix) - 1);
    const Value* iv = g.FindValue(init);
    if (iv && iv->is_initializer()) pairs.emplace_back(v->name, init);
  }
  return pairs;
}

namespace {

// The configured seed mixed with FNV-1a of the node's name (splitmix64's finalizer), kept
// non-negative for the int attribute.
int64_t NodeSeed(int64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  uint64_t z = h + static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<int64_t>((z ^ (z >> 31)) >> 1);
}

class TrainModePass final : public Pass {
 public:
  explicit TrainModePass(TrainModeOptions o) : opt_(o) {}
  absl::string_view name() const override { return "train_mode"; }
  absl::StatusOr<bool> Run(Graph& g) override {
    bool changed = false;
    std::vector<Node*> nodes;
    for (const auto& n : g.nodes()) nodes.push_back(n.get());
    for (Node* n : nodes) {
      if (!n->domain().empty()) continue;
      if (n->op_type() == "BatchNormalization") changed |= BatchNorm(g, n);
      if (n->op_type() == "Dropout") changed |= Dropout(g, n);
    }
    return changed;
  }

 private:
  // Running mean/var: make outputs 1 and 2 exist and, when the running stats are initializers,
  // expose them as "state/<initializer>".
  bool BatchNorm(Graph& g, Node* n) {
    bool changed = false;
    if (g.opset() >= 14 && n->attr_int("training_mode", 0) == 0) {
      n->SetAttr(Attribute::Int("training_mode", 1));
      changed = true;
    }
    for (size_t i : {1, 2}) {
      Value* stat = n->input(i + 2);
      if (n->output(i) == nullptr) {
        std::string base = stat ? stat->name : absl::StrCat(n->name(), "_running", i);
        Value* out = g.AddValue(g.UniqueName(absl::StrCat(kStatePrefix, base)), stat ? stat->dtype : DType::kUndefined,
                                stat ? stat->shape : Shape());
        g.SetNodeOutput(n, i, out);
        changed = true;
      }
      Value* out = n->output(i);
      if (stat && stat->is_initializer() && !g.IsGraphOutput(out)) {
        Value* state = out;
        if (out->name != absl::StrCat(kStatePrefix, stat->name)) {
          state = g.AddValue(g.UniqueName(absl::StrCat(kStatePrefix, stat->name)), out->dtype, out->shape);
          g.AddNode("Identity", {out}, {state}, g.UniqueName(absl::StrCat(n->name(), "/state", i)));
        }
        g.AddOutput(state);
        changed = true;
      }
    }
    return changed;
  }

  bool Dropout(Graph& g, Node* n) {
    bool changed = false;
    if (g.opset() >= 12) {
      if (n->input(2) == nullptr || !n->input(2)->is_initializer() ||
          n->input(2)->initializer->GetInt(0) == 0) {
        Tensor t(DType::kBool, {});
        *t.data_as<uint8_t>() = 1;
        Value* on = g.AddInitializer(g.UniqueName(absl::StrCat(n->name(), "/training_mode")), t);
        g.SetInput(n, 2, on);
        changed = true;
      }
      const int64_t seed = NodeSeed(opt_.seed, n->name());
      if (n->attr_int("seed", -1) != seed) {
        n->SetAttr(Attribute::Int("seed", seed));
        changed = true;
      }
    }
    if (n->output(1) == nullptr) {
      Value* mask = g.AddValue(g.UniqueName(absl::StrCat(n->name(), "/mask")), DType::kBool,
                               n->input(0)->shape);
      g.SetNodeOutput(n, 1, mask);
      changed = true;
    }
    return changed;
  }

  TrainModeOptions opt_;
};

}  // namespace

std::unique_ptr<Pass> MakeTrainModePass(TrainModeOptions options) {
  return std::make_unique<TrainModePass>(options);
}

MT_REGISTER_PASS(train_mode, [] { return MakeTrainModePass(); });

}  // namespace mixtrain
