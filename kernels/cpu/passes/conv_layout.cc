// conv_layout (inference pass, position 45): convolutions and pools run channels-last.
//   Conv / FusedConv(X, W, B, Z)   => Transpose(FusedConv'(T(X), W, B, T(Z)), to NC<sp>)
//   MaxPool / AveragePool / GlobalAveragePool(X)
//                                  => Transpose(ai.mixtrain pool'(T(X)), to NC<sp>)
// where T moves C last and the primed ops have channels_last = 1. oneDNN's fastest CPU conv
// kernels (brgconv) read and write [N, spatial..., C] directly, and pooling that layout is ~10x
// faster than NC<spatial>. The Transposes this inserts around every op are what
// conv_transposes then cancels inside a region of such ops (connected directly or through
// elementwise ops), so only the region's boundaries keep one.
//
// When every such op of the graph can, they run channel-blocked instead ([N, C/16, sp..., 16],
// oneDNN's nC<sp>16c; channel_block = 16 in graph/ops/fused_conv_ops.cc), with
//   T(x) = Transpose(Reshape(x, [N, C/16, 16, sp...]), [0, 1, 3.., 2])
// and its inverse around each op instead. That layout is what oneDNN's Winograd kernel needs
// (fashion_cnn's 32->64 3x3 conv: 0.70 ms vs 0.97 ms channels-last, fp32, batch 64) and its
// first-conv kernel reads an image's few NC<sp> channels directly into it (1->32: 0.146 ms
// fp32, 0.080 bf16 vs 0.15 / 0.14 channels-last), but converting at a boundary costs as much
// (0.05-0.27 ms per reorder), so it is chosen only for a closed region: every conv has output
// channels in multiples of 16 (group 1) and reads either another region op's output or, as an
// image's first conv, at most 4 NC<sp> channels; every pool (Max/AveragePool) reads a region
// op's output with channels in multiples of 16; the graph has no global pool. It pays for
// bf16 too (fashion_cnn bf16, batch 64, interleaved runs: 1.54-1.56 ms blocked vs 1.61-1.67 ms
// channels-last; the direct bf16 kernels are on par, 0.51 vs 0.49 ms for the 32->64 conv, and
// the first conv is faster blocked). The blocked
// Transposes cancel like the channels-last ones (conv_transposes merges the Reshapes between
// them), and conv_flatten_weights folds the last one into the classifier's weights.
// Only where oneDNN has kernels for that layout (AVX-512; TargetCapabilities::channel_blocked): on an AVX2 CPU
// nChw16c convs run oneDNN's reference code (fashion_cnn, batch 64: 4.96 s per forward instead
// of 2.4 ms), so there the regions stay channels-last.
#include "graph/check.h"
#include "passes/conv_pass_util.h"
#include "kernels/cpu/passes/cpu_passes.h"

namespace mixtrain {
namespace {

using conv_pass::IsFloatType;
using conv_pass::IsMixtrain;
using conv_pass::IsOnnx;
using conv_pass::PermuteShape;
using conv_pass::ToChannelsFirstPerm;
using conv_pass::ToChannelsLastPerm;
using conv_pass::AddTranspose;
using conv_pass::FromBlocked;
using conv_pass::BlockedShape;
using conv_pass::ToBlocked;

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

using conv_pass::kBlock;
// An image's first conv reads this many NC<sp> channels at most into blocked Y.
constexpr int64_t kMaxPlainInputChannels = 4;

// Known channels (dim 1) and spatial dims of a rank >= 3 value, or false.
bool KnownChannelsAndSpatial(const Value* v) {
  if (v == nullptr || !v->shape.rank_known || v->shape.rank() < 3 || v->shape.rank() > 5)
    return false;
  for (int64_t i = 1; i < v->shape.rank(); ++i)
    if (!v->shape.dims[i].known()) return false;
  return true;
}

// Whether the ops in `moves` can all run channel-blocked (see the header).
bool RegionCanBlock(const Graph& g, const std::vector<std::pair<Node*, const char*>>& moves) {
  std::vector<const Node*> region;
  for (const auto& [n, op] : moves) region.push_back(n);
  const auto in_region = [&](const Value* v) {
    return v->producer != nullptr &&
           std::find(region.begin(), region.end(), v->producer) != region.end();
  };
  for (const auto& [n, op] : moves) {
    const Value* x = n->input(0);
    const Value* y = n->output(0);
    if (!KnownChannelsAndSpatial(x) || !KnownChannelsAndSpatial(y)) return false;
    if (x->dtype != DType::kF32 && x->dtype != DType::kBF16) return false;
    const int64_t c = x->shape.dims[1].value, m = y->shape.dims[1].value;
    if (std::string(op) == "FusedConv") {
      if (n->attr_int("group", 1) != 1 || m % kBlock != 0) return false;
      if (!(in_region(x) && c % kBlock == 0) && c > kMaxPlainInputChannels) return false;
    } else if (std::string(op) == "GlobalAveragePool" || !in_region(x) || c % kBlock != 0) {
      return false;
    }
  }
  return !moves.empty();
}

// A blocked region's first conv, which reads an NC<sp> X with few channels.
bool ReadsPlainInput(const Node& n) {
  return n.input(0)->shape.dims[1].value <= kMaxPlainInputChannels;
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

// Rewrites `n` as `op` with channel_block = 16 between the blocked conversions.
void MoveBlocked(Graph& g, Node* n, const char* op) {
  const bool is_conv = std::string(op) == "FusedConv";
  const bool plain_x = is_conv && ReadsPlainInput(*n);
  std::vector<Value*> inputs = n->inputs();
  if (!plain_x) inputs[0] = ToBlocked(g, inputs[0]);
  if (inputs.size() > 3 && inputs[3] != nullptr) inputs[3] = ToBlocked(g, inputs[3]);
  Value* y = n->output(0);
  Value* y_blocked = g.AddValue(g.UniqueName(y->name + "_blocked"), y->dtype, BlockedShape(y->shape));
  const std::string name = n->name();
  std::vector<Attribute> attrs = n->attributes();
  g.RemoveNode(n);
  Node* m = g.AddNode(op, inputs, {y_blocked}, name, "ai.mixtrain");
  for (Attribute& a : attrs) m->SetAttr(std::move(a));
  m->SetAttr(Attribute::Int("channel_block", kBlock));
  if (is_conv) m->SetAttr(Attribute::Int("input_channel_block", plain_x ? 0 : kBlock));
  FromBlocked(g, y_blocked, y);
}

class ConvLayoutPass final : public Pass {
 public:
  explicit ConvLayoutPass(bool channel_blocked) : channel_blocked_(channel_blocked) {}
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
    const bool blocked = channel_blocked_ && RegionCanBlock(g, moves);
    for (auto& [n, op] : moves) blocked ? MoveBlocked(g, n, op) : MoveChannelsLast(g, n, op);
    if (moves.empty()) return false;
    if (!g.opset_imports.contains("ai.mixtrain")) g.opset_imports["ai.mixtrain"] = 1;
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }

 private:
  bool channel_blocked_;
};

}  // namespace

std::unique_ptr<Pass> MakeConvLayoutPass(bool channel_blocked) {
  return std::make_unique<ConvLayoutPass>(channel_blocked);
}

}  // namespace mixtrain
