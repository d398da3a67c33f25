// Loss scaling: multiply the loss by an fp32 state scalar before autodiff, so small fp16
// gradients do not flush to zero (PyTorch's GradScaler, Apex's dynamic scaler).
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "passes/passes.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

class LossScalePass final : public Pass {
 public:
  explicit LossScalePass(LossScaleOptions o) : options_(o) {}
  absl::string_view name() const override { return "loss_scale"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    Value* loss = g.FindValue(kLossName);
    if (loss == nullptr)
      return absl::InvalidArgumentError("no value named 'loss': run the loss pass first");
    if (loss->dtype != DType::kF32)
      return absl::InvalidArgumentError(
          absl::StrCat("the loss must be f32 to scale it, it is ", DTypeName(loss->dtype)));
    if (g.FindValue(kLossScaleName) != nullptr)
      return absl::InvalidArgumentError("the graph already has a 'loss_scale' value");
    Value* scale = g.AddInitializer(kLossScaleName, Tensor::Scalar(options_.init_scale));
    Value* scaled = g.AddValue(kScaledLossName, DType::kF32, loss->shape);
    g.AddNode("Mul", {loss, scale}, {scaled}, "loss_scale/mul");
    return true;
  }

 private:
  LossScaleOptions options_;
};

}  // namespace

std::unique_ptr<Pass> MakeLossScalePass(LossScaleOptions options) {
  return std::make_unique<LossScalePass>(options);
}

}  // namespace mixtrain

#include "passes/pass_registry.h"

namespace mixtrain {
MT_REGISTER_PASS(loss_scale, [] { return MakeLossScalePass(); });
}  // namespace mixtrain
