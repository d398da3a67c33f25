// conv_layout (inference pass, position 45): convolutions and pools run channels-last.
//   Conv / FusedConv(X, W, B, Z)   => Transpose(FusedConv'(T(X), W, B, T(Z)), to NC<sp>)
//   MaxPool / AveragePool / GlobalAveragePool(X)
//                                  => Transpose(ai.mixtrain pool'(T(X)), to NC<sp>)
// where T moves C last and the primed ops have channels_last = 1. oneDNN's fastest CPU conv
// kernels (brgconv) read and write [N, spatial..., C] directly, and pooling that layout is ~10x
// faster than NC<spatial>. The Transposes this inserts around every op are what
// conv_transposes then cancels inside a region of such ops (connected directly or through
// elementwise ops), so only the region's boundaries keep one.
#include "graph/check.h"
#include "passes/conv_pass_util.h"
#include "passes/inference.h"

namespace mixtrain {
namespace {

using conv_pass::IsFloatType;
using conv_pass::IsMixtrain;
using conv_pass::IsOnnx;
using conv_pass::PermuteShape;
using conv_pass::ToChannelsFirstPerm;
using conv_pass::ToChannelsLastPerm;

// The channels-last op `n` becomes ("" when it stays as it is).
const char* ChannelsLastOp(const Node& n) {
  if (n.output(0) == nullptr || n.input(0) == nullptr) return "";
  const Value* x = n.input(0);
  if (!x->shape.rank_known || x->shape.rank() < 3 || !n.output(0)->shape.rank_known ||
      !IsFloatType(x->dtype))
    return "";
  if (IsOnnx(n, "Conv") && n.input(1) != nullptr && n.num_outputs() == 1) return "FusedConv";
  if (IsMixtrain(n, "FusedConv") && n.attr_int("channels_last", 0) == 0) return "FusedConv";
  // MaxPool's Indices are NC<spatial> offsets: only the pool without them moves.
  if (IsOnnx(n, "MaxPool") && (n.num_outputs() == 1 || n.output(1) == nullptr)) return "MaxPool";
  if (IsOnnx(n, "AveragePool")) return "AveragePool";
  if (IsOnnx(n, "GlobalAveragePool")) return "GlobalAveragePool";
  return "";
}

Value* AddTranspose(Graph& g, Value* x, const std::vector<int64_t>& perm, Value* out) {
  if (out == nullptr)
    out = g.AddValue(g.UniqueName(x->name + "_nhwc"), x->dtype, PermuteShape(x->shape, perm));
  Node* t = g.AddNode("Transpose", {x}, {out}, g.UniqueName(x->name + "_transpose"));
  t->SetAttr(Attribute::Ints("perm", perm));
  return out;
}

// Rewrites `n` as `op` with channels_last = 1 between Transposes.
void MoveChannelsLast(Graph& g, Node* n, const char* op) {
  const int64_t rank = n->input(0)->shape.rank();
  const std::vector<int64_t> to_last = ToChannelsLastPerm(rank);
  std::vector<Value*> inputs = n->inputs();
  inputs[0] = AddTranspose(g, inputs[0], to_last, nullptr);
  if (inputs.size() > 3 && inputs[3] != nullptr)  // FusedConv's Z
    inputs[3] = AddTranspose(g, inputs[3], to_last, nullptr);
  Value* y = n->output(0);
  Value* y_last =
      g.AddValue(g.UniqueName(y->name + "_nhwc"), y->dtype, PermuteShape(y->shape, to_last));
  const std::string name = n->name();
  std::vector<Attribute> attrs = n->attributes();
  g.RemoveNode(n);
  Node* m = g.AddNode(op, inputs, {y_last}, name, "ai.mixtrain");
  for (Attribute& a : attrs) m->SetAttr(std::move(a));
  m->SetAttr(Attribute::Int("channels_last", 1));
  AddTranspose(g, y_last, ToChannelsFirstPerm(rank), y);
}

class ConvLayoutPass final : public Pass {
 public:
  absl::string_view name() const override { return "conv_layout"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    std::vector<std::pair<Node*, const char*>> moves;
    for (const auto& n : g.nodes()) {
      const char* op = ChannelsLastOp(*n);
      // A node whose result nothing reads is left to dead-code elimination.
      Value* y = n->output(0);
      if (*op != '\0' && (!y->consumers.empty() || g.IsGraphOutput(y)))
        moves.push_back({n.get(), op});
    }
    for (auto& [n, op] : moves) MoveChannelsLast(g, n, op);
    if (moves.empty()) return false;
    if (!g.opset_imports.contains("ai.mixtrain")) g.opset_imports["ai.mixtrain"] = 1;
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }
};

}  // namespace

MT_REGISTER_INFERENCE_PASS(conv_layout, 45, [] { return std::make_unique<ConvLayoutPass>(); });

}  // namespace mixtrain
