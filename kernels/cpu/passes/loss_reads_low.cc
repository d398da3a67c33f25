// loss_reads_low (CPU training steps under AMP): the cross-entropy gradient reads AMP's low-type
// logits where the forward produced them and writes its gradient in that type, instead of reading
// the fp32 copy the precision pass casts for the loss and writing an fp32 gradient that is then
// cast back:
//   s = Cast(x_low, f32); loss = SoftmaxCrossEntropyLoss(s, t); ...
//   ds = SoftmaxCrossEntropyLossGrad(dL, s, t); dx_low = Cast(ds, low)
//     =>  ds_low = SoftmaxCrossEntropyLossGrad(dL, x_low, t)   (dx_low, the Cast gone)
// The fp32 logits then die with the forward loss instead of living into the backward, and the
// fp32 gradient is never materialized: at a language model's N x T x V logits these are the
// largest tensors of the step (GPT-2 small, batch 16 x 128: 393 MiB each). The values are the
// same: the low type widens exactly into fp32, and the kernel computes in fp32 from it and rounds
// once on store (kernels/cpu/grad_loss.cc), as the fp32 kernel and the Cast did.
#include "graph/check.h"
#include "kernels/cpu/passes/cpu_passes.h"
#include "passes/fusion_match.h"

namespace mixtrain {
namespace {

using fusion::IsMixtrain;
using fusion::IsOnnx;
using fusion::SoleConsumer;

constexpr int64_t kOnnxFloat = 1;  // TensorProto.FLOAT

class LossReadsLowPass final : public Pass {
 public:
  absl::string_view name() const override { return "loss_reads_low"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    std::vector<Node*> grads;
    for (const auto& n : g.nodes())
      if (IsMixtrain(*n, "SoftmaxCrossEntropyLossGrad")) grads.push_back(n.get());
    bool changed = false;
    for (Node* grad : grads) {
      Value* scores = grad->input(1);
      Node* cast = scores != nullptr ? scores->producer : nullptr;
      if (cast == nullptr || !IsOnnx(*cast, "Cast") || cast->attr_int("to", 0) != kOnnxFloat) continue;
      Value* low = cast->input(0);
      if (low == nullptr || !IsLowFloat(low->dtype)) continue;
      // The gradient, fp32, read only by a Cast back to the logits' type.
      Value* ds = grad->output(0);
      Node* back = SoleConsumer(g, ds);
      if (back == nullptr || !IsOnnx(*back, "Cast") || back->output(0) == nullptr ||
          back->output(0)->dtype != low->dtype)
        continue;
      g.SetInput(grad, 1, low);
      Value* ds_low = back->output(0);
      g.RemoveNode(back);
      g.SetNodeOutput(grad, 0, ds_low);  // ds, read by nothing now, goes
      changed = true;
    }
    if (changed) MT_RETURN_IF_ERROR(g.TopoSort());
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeLossReadsLowPass() { return std::make_unique<LossReadsLowPass>(); }

}  // namespace mixtrain
