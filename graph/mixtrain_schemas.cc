// ONNX OpSchemas of the ai.mixtrain domain, so onnx::checker accepts graphs that use our own ops
// (gradient ops such as ConvGrad, optimizer updates, loss-scale ops).
#include <mutex>

#include "graph/onnx_export.h"
#include "onnx/defs/schema.h"

namespace mixtrain {

void RegisterMixtrainSchemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The checker refuses a domain it has no version range for.
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(kMixtrainDomain,
                                                                                 1, 1);
    // Gradient ops of the autodiff pass (passes/grad_rules_*.cc; shapes in graph/ops/grad_ops.cc).
    // They carry the forward node's attributes verbatim, hence AllowUncheckedAttributes.
    struct Io {
      const char* name;
      const char* type;
      bool optional;
    };
    auto add = [](const char* op, std::initializer_list<Io> ins, std::initializer_list<Io> outs) {
      onnx::OpSchema s(op, __FILE__, __LINE__);
      s.SetDomain(kMixtrainDomain).SinceVersion(1).AllowUncheckedAttributes();
      int i = 0;
      for (const Io& io : ins)
        s.Input(i++, io.name, "", io.type,
                io.optional ? onnx::OpSchema::Optional : onnx::OpSchema::Single);
      i = 0;
      for (const Io& io : outs)
        s.Output(i++, io.name, "", io.type,
                 io.optional ? onnx::OpSchema::Optional : onnx::OpSchema::Single);
      s.TypeConstraint("T", {"tensor(float)", "tensor(float16)", "tensor(bfloat16)",
                             "tensor(double)"}, "float tensors");
      s.TypeConstraint("U", {"tensor(float)", "tensor(float16)", "tensor(bfloat16)",
                             "tensor(double)"}, "float parameters (may differ from T)");
      s.TypeConstraint("I", {"tensor(int32)", "tensor(int64)"}, "indices / labels");
      onnx::RegisterSchema(std::move(s));
    };
    add("ConvGrad", {{"dY", "T", false}, {"X", "T", false}, {"W", "T", false}},
        {{"dX", "T", true}, {"dW", "T", true}});
    add("MaxPoolGrad", {{"dY", "T", false}, {"X", "T", false}}, {{"dX", "T", false}});
    add("AveragePoolGrad", {{"dY", "T", false}, {"X", "T", false}}, {{"dX", "T", false}});
    add("BatchNormalizationGrad",
        {{"dY", "T", false}, {"X", "T", false}, {"scale", "U", false}, {"mean", "U", false},
         {"var", "U", false}},
        {{"dX", "T", true}, {"dScale", "U", true}, {"dBias", "U", true}});
    add("LayerNormalizationGrad", {{"dY", "T", false}, {"X", "T", false}, {"scale", "U", false}},
        {{"dX", "T", true}, {"dScale", "U", true}, {"dBias", "U", true}});
    add("SoftmaxCrossEntropyLossGrad",
        {{"dL", "T", false}, {"scores", "T", false}, {"labels", "I", false},
         {"weights", "T", true}},
        {{"dScores", "T", false}});
    add("NegativeLogLikelihoodLossGrad",
        {{"dL", "T", false}, {"input", "T", false}, {"target", "I", false},
         {"weight", "T", true}},
        {{"dInput", "T", false}});
    add("GeluGrad", {{"dY", "T", false}, {"X", "T", false}}, {{"dX", "T", false}});
    add("SumToShape", {{"grad", "T", false}, {"shape", "tensor(int64)", false}},
        {{"summed", "T", false}});
    add("GatherGrad", {{"dY", "T", false}, {"indices", "I", false}, {"X", "T", false}},
        {{"dX", "T", false}});
  });
}

}  // namespace mixtrain
