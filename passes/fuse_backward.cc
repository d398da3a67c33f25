// fuse_backward (training pass, after autodiff): fusions of the backward graph, each exact.
//   ReluGrad(MaxPoolGrad(dP, Z), Z)  =>  MaxPoolGrad(dP, Z, relu = 1)
// Conv -> Relu -> MaxPool (every CNN) differentiates to a MaxPoolGrad that writes a full-size
// gradient of Z = Relu(C) and a ReluGrad that reads it and Z again to mask it: two passes over
// the largest tensors of the step. MaxPoolGrad already reads Z to find each window's maximum,
// and dZ is non-zero only there, so it masks in the same pass: the winner's gradient is kept
// when Z there is > 0 (ReluGrad's rule), which is exactly ReluGrad's output. CIFAR-style CNN at
// batch 256: one full pass over 32 MB saved per pool.
#include <vector>

#include "passes/fusion_match.h"
#include "passes/pass_registry.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

using fusion::IsMixtrain;
using fusion::SoleConsumer;

class FuseBackwardPass final : public Pass {
 public:
  absl::string_view name() const override { return "fuse_backward"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    std::vector<Node*> relu_grads;
    for (const auto& n : g.nodes())
      if (IsMixtrain(*n, "ReluGrad") && n->num_inputs() == 2) relu_grads.push_back(n.get());
    bool changed = false;
    for (Node* rg : relu_grads) {
      Value* dz = rg->input(0);
      Value* z = rg->input(1);
      Node* pool = dz->producer;
      if (pool == nullptr || !IsMixtrain(*pool, "MaxPoolGrad") || pool->num_inputs() != 2 ||
          pool->input(1) != z || SoleConsumer(g, dz) != rg || pool->attr_int("relu", 0) != 0 ||
          rg->output(0) == nullptr || rg->output(0)->dtype != dz->dtype ||
          g.IsGraphOutput(rg->output(0)))  // outputs keep their names ("grad/<param>")
        continue;
      g.ReplaceAllUsesWith(rg->output(0), dz);
      g.RemoveNode(rg);
      pool->SetAttr(Attribute::Int("relu", 1));
      changed = true;
    }
    if (changed) MT_RETURN_IF_ERROR(g.TopoSort());
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseBackwardPass() { return std::make_unique<FuseBackwardPass>(); }

MT_REGISTER_PASS(fuse_backward, [] { return MakeFuseBackwardPass(); });

}  // namespace mixtrain
