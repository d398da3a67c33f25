// loss_reads_low (CPU training steps under AMP): the cross-entropy loss and its gradient read
// AMP's low-type logits where the forward produced them, the loss written in fp32 and the
// gradient in the logits' type, instead of an fp32 copy the precision pass casts for the loss
// (which lived into the backward) and an fp32 gradient cast back:
//   s = Cast(x_low, f32); loss = SoftmaxCrossEntropyLoss(s, t); ...
//   ds = SoftmaxCrossEntropyLossGrad(dL, s, t); dx_low = Cast(ds, low)
//     =>  loss = ai.mixtrain.SoftmaxCrossEntropyLoss(x_low, t)   (the loss fp32)
//         dx_low = SoftmaxCrossEntropyLossGrad(dL, x_low, t)     (the Casts gone)
// The Cast stays only where something else reads the fp32 logits (the step's `logits` output,
// which a step's run does not fetch), so neither the fp32 logits nor the fp32 gradient is
// materialized: at a language model's N x T x V logits these are the
// largest tensors of the step (GPT-2 small, batch 16 x 128: 393 MiB each). The values are the
// same: the low type widens exactly into fp32, and the kernel computes in fp32 from it and rounds
// once on store (kernels/cpu/grad_loss.cc), as the fp32 kernel and the Cast did.
#include "graph/check.h"
#include "graph/onnx_export.h"
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
      // The forward loss on the same scores, without its log_prob output: its fp32 form.
      for (Node* loss : std::vector<Node*>(scores->consumers.begin(), scores->consumers.end())) {
        if (!IsOnnx(*loss, "SoftmaxCrossEntropyLoss") || loss->input(0) != scores) continue;
        if (loss->num_outputs() > 1 && loss->output(1) != nullptr) continue;
        std::vector<Value*> ins(loss->inputs().begin(), loss->inputs().end());
        ins[0] = low;
        std::vector<Attribute> attrs = loss->attributes();
        Node* fused = g.ReplaceNode(loss, "SoftmaxCrossEntropyLoss", ins, kMixtrainDomain);
        for (Attribute& a : attrs) fused->SetAttr(std::move(a));
        // Where the forward ends, not after the backward (nothing there reads the loss): the
        // logits then die with the gradient, the backward's first node.
        g.MoveBefore(fused, grad);
      }
      changed = true;
    }
    if (!changed) return false;
    if (!g.opset_imports.contains(kMixtrainDomain)) g.opset_imports[kMixtrainDomain] = 1;
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeLossReadsLowPass() { return std::make_unique<LossReadsLowPass>(); }

}  // namespace mixtrain
