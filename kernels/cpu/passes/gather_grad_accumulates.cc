// gather_grad_accumulates (CPU training steps): a gather's weight gradient added to another
// gradient of the same weight (a tied embedding: GPT-2's token embedding is also its classifier)
// is scatter-added into that gradient in place, instead of a zeroed gradient of the whole table
// added to it:
//   dW_gather = GatherGrad(dY, indices, W); dW = Add(dW_other, dW_gather)
//     =>  dW = ai.mixtrain.GatherGradAdd(dW_other, dY, indices)      (over dW_other's buffer)
// At GPT-2 small that is a 154 MB fp32 table (50257 x 768) less at the end of the backward, where
// every gradient is live and the step's peak is, and two passes over it less (the zeros and the
// Add). The sums are the same up to their order: each row of dY is added to the other gradient
// as it comes instead of to zero first (fp32 rounding of a different order).
#include "graph/onnx_export.h"
#include "kernels/cpu/passes/cpu_passes.h"
#include "passes/fusion_match.h"

namespace mixtrain {
namespace {

using fusion::IsMixtrain;
using fusion::IsOnnx;
using fusion::SoleConsumer;

class GatherGradAccumulatesPass final : public Pass {
 public:
  absl::string_view name() const override { return "gather_grad_accumulates"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    std::vector<Node*> grads;
    for (const auto& n : g.nodes())
      if (IsMixtrain(*n, "GatherGrad")) grads.push_back(n.get());
    bool changed = false;
    for (Node* gg : grads) {
      Value* d = gg->output(0);
      Node* add = d != nullptr ? SoleConsumer(g, d) : nullptr;
      if (add == nullptr || !IsOnnx(*add, "Add") || add->num_inputs() != 2 || add->input(0) == add->input(1) ||
          g.IsGraphOutput(d))
        continue;
      Value* other = add->input(0) == d ? add->input(1) : add->input(0);
      Value* sum = add->output(0);
      // Same type and shape on both sides and out (no broadcast), and the other gradient a value
      // the step computes (not a weight or an input the planner may not write over).
      if (other == nullptr || sum == nullptr || other->producer == nullptr || other->dtype != d->dtype ||
          sum->dtype != d->dtype || !other->shape.rank_known || !(other->shape == d->shape) ||
          !(sum->shape == d->shape))
        continue;
      Value* dy = gg->input(0);
      Value* indices = gg->input(1);
      if (dy == nullptr || indices == nullptr || dy->dtype != d->dtype) continue;
      const int64_t axis = gg->attr_int("axis", 0);
      Node* fused = g.ReplaceNode(add, "GatherGradAdd", {other, dy, indices}, kMixtrainDomain);
      fused->SetAttr(Attribute::Int("axis", axis));
      g.RemoveNode(gg);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeGatherGradAccumulatesPass() { return std::make_unique<GatherGradAccumulatesPass>(); }

}  // namespace mixtrain
