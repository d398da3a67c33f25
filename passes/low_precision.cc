// Lowering a model to compute in fp16/bf16 (see low_precision.h).
#include "passes/low_precision.h"

#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"

namespace mixtrain {

absl::Status LowerFloatModel(Graph& g, DType low) {
  if (low != DType::kF16 && low != DType::kBF16)
    return absl::InvalidArgumentError(absl::StrCat("cannot lower a model to ", DTypeName(low)));
  for (Value* v : g.initializers())
    if (v->initializer->dtype() == DType::kF32) {
      g.SetInitializer(v, ConvertFloat(*v->initializer, low));
      v->dtype = low;
    }
  for (Value* v : g.inputs())
    if (v->dtype == DType::kF32) v->dtype = low;
  for (const auto& up : g.nodes()) {
    Node& n = *up;
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    if (n.op_type() == "Cast" && n.attr_int("to", 0) == ToOnnxType(DType::kF32))
      n.SetAttr(Attribute::Int("to", ToOnnxType(low)));
    // Constant and ConstantOfShape carry fp32 tensors in attributes.
    if (const Attribute* a = n.attr("value"); a != nullptr && a->kind == Attribute::Kind::kTensor &&
                                              a->t.dtype() == DType::kF32)
      n.SetAttr(Attribute::TensorAttr("value", ConvertFloat(a->t, low)));
    if (n.op_type() == "Constant" && n.has_attr("value_float")) {
      Tensor t = ConvertFloat(Tensor::Scalar(n.attr_float("value_float", 0)), low);
      n.RemoveAttr("value_float");
      n.SetAttr(Attribute::TensorAttr("value", t));
    }
    if (n.op_type() == "Constant" && n.has_attr("value_floats")) {
      std::vector<float> f = n.attr_floats("value_floats");
      Tensor t = Tensor::FromVector<float>(DType::kF32, {static_cast<int64_t>(f.size())}, f);
      n.RemoveAttr("value_floats");
      n.SetAttr(Attribute::TensorAttr("value", ConvertFloat(t, low)));
    }
  }
  // Every value computed from the lowered ones now has the low type too; passes that run next
  // (the inference fusions) read those dtypes.
  return InferShapes(g);
}

}  // namespace mixtrain
