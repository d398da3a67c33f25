// ONNX OpSchemas of the ai.mixtrain domain, so onnx::checker accepts graphs that use our own ops
// (gradient ops such as ConvGrad here; files that add other ops register theirs with
// MT_REGISTER_ONNX_SCHEMAS, see mixtrain_schemas.h).
#include "graph/mixtrain_schemas.h"

#include <mutex>
#include <vector>

#include "graph/onnx_export.h"
#include "onnx/defs/schema.h"

namespace mixtrain {
namespace {

std::vector<SchemaHook>& Hooks() {
  static auto* h = new std::vector<SchemaHook>();
  return *h;
}

}  // namespace

bool AddMixtrainSchemaHook(SchemaHook hook) {
  Hooks().push_back(hook);
  return true;
}

void AddMixtrainSchema(const char* op, std::initializer_list<SchemaIo> ins,
                       std::initializer_list<SchemaIo> outs) {
  // Our ops carry attributes verbatim (a gradient op copies its forward node's), hence
  // AllowUncheckedAttributes.
  onnx::OpSchema s(op, __FILE__, __LINE__);
  s.SetDomain(kMixtrainDomain).SinceVersion(1).AllowUncheckedAttributes();
  int i = 0;
  for (const SchemaIo& io : ins)
    s.Input(i++, io.name, "", io.type, io.optional ? onnx::OpSchema::Optional : onnx::OpSchema::Single);
  i = 0;
  for (const SchemaIo& io : outs)
    s.Output(i++, io.name, "", io.type, io.optional ? onnx::OpSchema::Optional : onnx::OpSchema::Single);
  s.TypeConstraint("T", {"tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)"},
                   "float tensors");
  s.TypeConstraint("U", {"tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)"},
                   "float parameters (may differ from T)");
  s.TypeConstraint("I", {"tensor(int32)", "tensor(int64)"}, "indices / labels");
  onnx::RegisterSchema(std::move(s));
}

void RegisterMixtrainSchemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The checker refuses a domain it has no version range for.
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(kMixtrainDomain,
                                                                                 1, 1);
    for (SchemaHook h : Hooks()) h();
  });
}

// Gradient ops of the autodiff pass (passes/grad_rules_*.cc; shapes in graph/ops/grad_ops.cc).
MT_REGISTER_ONNX_SCHEMAS(grad_ops) {
  AddMixtrainSchema("ConvGrad", {{"dY", "T", false}, {"X", "T", false}, {"W", "T", false}},
      {{"dX", "T", true}, {"dW", "U", true}, {"dB", "U", true}});
  AddMixtrainSchema("MaxPoolGrad", {{"dY", "T", false}, {"X", "T", false}}, {{"dX", "T", false}});
  AddMixtrainSchema("ReluGrad", {{"dY", "T", false}, {"Y", "T", false}}, {{"dX", "T", false}});
  AddMixtrainSchema("AveragePoolGrad", {{"dY", "T", false}, {"X", "T", false}}, {{"dX", "T", false}});
  AddMixtrainSchema("BatchNormalizationGrad",
      {{"dY", "T", false}, {"X", "T", false}, {"scale", "U", false}, {"mean", "U", false},
       {"var", "U", false}},
      {{"dX", "T", true}, {"dScale", "U", true}, {"dBias", "U", true}});
  AddMixtrainSchema("LayerNormalizationGrad", {{"dY", "T", false}, {"X", "T", false}, {"scale", "U", false}},
      {{"dX", "T", true}, {"dScale", "U", true}, {"dBias", "U", true}});
  AddMixtrainSchema("SoftmaxCrossEntropyLossGrad",
      {{"dL", "T", false}, {"scores", "T", false}, {"labels", "I", false},
       {"weights", "T", true}},
      {{"dScores", "T", false}});
  AddMixtrainSchema("NegativeLogLikelihoodLossGrad",
      {{"dL", "T", false}, {"input", "T", false}, {"target", "I", false},
       {"weight", "T", true}},
      {{"dInput", "T", false}});
  AddMixtrainSchema("GeluGrad", {{"dY", "T", false}, {"X", "T", false}}, {{"dX", "T", false}});
  AddMixtrainSchema("SoftmaxGrad",
      {{"dY", "T", false}, {"Y", "T", false}, {"mask", "tensor(bool)", true}},
      {{"dX", "T", false}});
  AddMixtrainSchema("SumToShape", {{"grad", "T", false}, {"shape", "tensor(int64)", false}},
      {{"summed", "T", false}});
  AddMixtrainSchema("GatherGrad", {{"dY", "T", false}, {"indices", "I", false}, {"X", "T", false}},
      {{"dX", "T", false}});
  AddMixtrainSchema("GatherGradAdd", {{"A", "T", false}, {"dY", "T", false}, {"indices", "I", false}},
      {{"Y", "T", false}});
}

}  // namespace mixtrain
