// conv_pool (inference pass, position 48): a channel-blocked region's first conv, which reads
// an image's few NC<sp> channels, swallows the MaxPool after it:
//   ai.mixtrain.MaxPool(FusedConv(X, W, B)) => FusedConv(X, W, B) with pool_kernel_shape,
//                                              pool_strides
// (kernels/cpu/conv_pool.cc): such a conv is bound by writing its full-resolution map, which
// the pool reads back; folded, only the pooled map is written (fashion_cnn's conv1 + pool1,
// fp32 batch 64: 0.15 + 0.065 ms standalone, more inside the model; the whole model ran
// 0.3 ms faster folded, interleaved A/B runs). fp32 only: the folded kernel computes in fp32,
// and bf16's oneDNN conv writes half the bytes at twice the arithmetic rate (the bf16 model
// ran as fast folded as not, 0.76-0.79 ms, with kernels/cpu/conv_pool_stem.cc). Fires only when the conv (2-D, group 1, no Z, undilated, a
// non-decreasing activation) feeds nothing but the pool and the pool has no pads, dilations,
// ceil_mode or Indices.
#include <algorithm>

#include "graph/check.h"
#include "passes/conv_pass_util.h"
#include "kernels/cpu/passes/cpu_passes.h"

namespace mixtrain {
namespace {

using conv_pass::IsMixtrain;
using conv_pass::SoleConsumer;

bool AllOnes(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
}
bool AllZeros(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
}

bool Foldable(const Node& conv) {
  if (!IsMixtrain(conv, "FusedConv") || conv.attr_int("channel_block", 0) != 16 ||
      conv.attr_int("input_channel_block", 0) != 0 || conv.has_attr("pool_kernel_shape") ||
      conv.attr_int("group", 1) != 1 || !AllOnes(conv.attr_ints("dilations")) ||
      conv.attr_string("auto_pad", "NOTSET") != "NOTSET")
    return false;
  if (conv.num_inputs() > 3 && conv.input(3) != nullptr) return false;
  const Value* x = conv.input(0);
  if (x == nullptr || x->dtype != DType::kF32 || !x->shape.rank_known || x->shape.rank() != 4)
    return false;
  const std::string act = conv.attr_string("activation", "");
  const std::vector<float> p = conv.attr_floats("activation_params");
  if (act == "LeakyRelu" && !p.empty() && p[0] < 0) return false;
  return true;
}

bool FoldablePool(const Node& pool) {
  if (!IsMixtrain(pool, "MaxPool") || pool.attr_int("channel_block", 0) != 16) return false;
  if (pool.num_outputs() > 1 && pool.output(1) != nullptr) return false;
  const std::vector<int64_t> k = pool.attr_ints("kernel_shape");
  return k.size() == 2 && AllZeros(pool.attr_ints("pads")) &&
         AllOnes(pool.attr_ints("dilations")) && pool.attr_int("ceil_mode", 0) == 0 &&
         pool.attr_string("auto_pad", "NOTSET") == "NOTSET";
}

bool Fold(Graph& g, Node* conv) {
  if (!Foldable(*conv)) return false;
  Node* pool = SoleConsumer(g, conv->output(0));
  if (pool == nullptr || !FoldablePool(*pool)) return false;
  const std::vector<int64_t> k = pool->attr_ints("kernel_shape");
  std::vector<int64_t> s = pool->attr_ints("strides");
  if (s.empty()) s.assign(k.size(), 1);
  Value* y = pool->output(0);
  if (y->consumers.empty() && !g.IsGraphOutput(y)) return false;  // dead: left to cleanup
  g.RemoveNode(pool);
  g.SetNodeOutput(conv, 0, y);  // drops the conv's unpooled output
  conv->SetAttr(Attribute::Ints("pool_kernel_shape", k));
  conv->SetAttr(Attribute::Ints("pool_strides", s));
  return true;
}

class ConvPoolPass final : public Pass {
 public:
  absl::string_view name() const override { return "conv_pool"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    std::vector<Node*> convs;
    for (const auto& n : g.nodes())
      if (IsMixtrain(*n, "FusedConv")) convs.push_back(n.get());
    bool changed = false;
    for (Node* c : convs) changed |= Fold(g, c);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeConvPoolPass() { return std::make_unique<ConvPoolPass>(); }

}  // namespace mixtrain
