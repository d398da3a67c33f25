#include "passes/grad_builder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/shape_inference.h"
#include "graph/half.h"

namespace mixtrain {

namespace {

// A tensor of `dims` with every element `v`.
Tensor FilledTensor(double v, DType dtype, std::vector<int64_t> dims) {
  Tensor t(dtype, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dtype) {
      case DType::kF32: t.data_as<float>()[i] = static_cast<float>(v); break;
      case DType::kF64: t.data_as<double>()[i] = v; break;
      case DType::kF16: t.data_as<uint16_t>()[i] = FloatToHalf(static_cast<float>(v)); break;
      case DType::kBF16: t.data_as<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(v)); break;
      case DType::kI64: t.data_as<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::kI32: t.data_as<int32_t>()[i] = static_cast<int32_t>(v); break;
      default: MT_CHECK(false) << "FilledTensor of dtype " << DTypeName(dtype);
    }
  }
  return t;
}

}  // namespace

Node* GradBuilder::Emit(const std::string& op, const std::vector<Value*>& inputs,
                        const std::vector<Value*>& outputs, std::vector<Attribute> attrs,
                        const std::string& domain) {
  if (!domain.empty() && !g_.opset_imports.contains(domain)) g_.opset_imports[domain] = 1;
  std::string name = g_.UniqueName(absl::StrCat(scope_, "/", op));
  Node* n = g_.AddNode(op, inputs, outputs, name, domain);
  for (Attribute& a : attrs) n->SetAttr(std::move(a));
  created_.insert(n);
  // Infer as we go: later rules read static shapes of what earlier rules emitted. An op whose
  // rule is missing or fails here keeps the fallback dtype; the runtime's planner re-infers
  // every node and reports errors with the node's name.
  std::vector<TypeInfo> ins;
  for (Value* v : inputs) {
    TypeInfo t;
    if (v == nullptr) {
      t.present = false;
    } else {
      t.dtype = v->dtype;
      t.shape = v->shape;
      if (v->is_initializer()) t.value = &*v->initializer;
    }
    ins.push_back(std::move(t));
  }
  std::vector<TypeInfo> outs;
  DType fallback = inputs.empty() || inputs[0] == nullptr ? DType::kUndefined : inputs[0]->dtype;
  if (InferNode(*n, g_.opset(domain), std::move(ins), &outs).ok()) {
    for (size_t i = 0; i < outputs.size() && i < outs.size(); ++i) {
      if (outputs[i] == nullptr) continue;
      outputs[i]->dtype = outs[i].dtype;
      outputs[i]->shape = outs[i].shape;
    }
  }
  for (Value* o : outputs)
    if (o && o->dtype == DType::kUndefined) o->dtype = fallback;
  return n;
}

Value* GradBuilder::Op(const std::string& op, const std::vector<Value*>& inputs,
                       std::vector<Attribute> attrs, const std::string& domain) {
  return OpN(op, inputs, {true}, std::move(attrs), domain)[0];
}

std::vector<Value*> GradBuilder::OpN(const std::string& op, const std::vector<Value*>& inputs,
                                     const std::vector<bool>& wanted,
                                     std::vector<Attribute> attrs, const std::string& domain) {
  std::vector<Value*> outs;
  for (size_t i = 0; i < wanted.size(); ++i)
    outs.push_back(wanted[i] ? g_.AddValue(g_.UniqueName(absl::StrCat(scope_, "/", op, "_out")))
                             : nullptr);
  // Trailing omitted outputs are dropped rather than written as "".
  while (!outs.empty() && outs.back() == nullptr) outs.pop_back();
  Emit(op, inputs, outs, std::move(attrs), domain);
  outs.resize(wanted.size(), nullptr);
  return outs;
}

Value* GradBuilder::Scalar(double v, DType dtype) {
  return AddConstant(FilledTensor(v, dtype, {}));
}

Value* GradBuilder::AddConstant(Tensor t) {
  Value* v = g_.AddInitializer(g_.UniqueName(absl::StrCat(scope_, "/const")), std::move(t));
  constants_.insert(v);
  return v;
}

Value* GradBuilder::Ints(const std::vector<int64_t>& v) {
  return AddConstant(
      Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(v.size())}, v));
}

Value* GradBuilder::Bool(bool v) {
  Tensor t(DType::kBool, {});
  *t.data_as<uint8_t>() = v ? 1 : 0;
  return AddConstant(std::move(t));
}

Value* GradBuilder::Cast(Value* a, DType to) {
  if (a->dtype == to) return a;
  return Op("Cast", {a}, {Attribute::Int("to", ToOnnxType(to))});
}

Value* GradBuilder::ZerosLike(Value* like) {
  return Op("ConstantOfShape", {ShapeOf(like)},
            {Attribute::TensorAttr("value", FilledTensor(0.0, like->dtype, {1}))});
}

Value* GradBuilder::MaskKeep(Value* cond, Value* a) {
  return Op("Where", {cond, a, Scalar(0, a->dtype)});
}

Value* GradBuilder::MaskDrop(Value* cond, Value* a) {
  return Op("Where", {cond, Scalar(0, a->dtype), a});
}

Value* GradBuilder::ReduceSum(Value* x, const std::vector<int64_t>& axes, bool keepdims) {
  if (axes.empty()) return x;
  Attribute kd = Attribute::Int("keepdims", keepdims ? 1 : 0);
  if (opset() >= 13) return Op("ReduceSum", {x, Ints(axes)}, {kd});
  return Op("ReduceSum", {x}, {Attribute::Ints("axes", axes), kd});
}

Value* GradBuilder::Unsqueeze(Value* x, const std::vector<int64_t>& axes) {
  if (axes.empty()) return x;
  if (opset() >= 13) return Op("Unsqueeze", {x, Ints(axes)});
  return Op("Unsqueeze", {x}, {Attribute::Ints("axes", axes)});
}

Value* GradBuilder::Squeeze(Value* x, const std::vector<int64_t>& axes) {
  if (axes.empty()) return x;
  if (opset() >= 13) return Op("Squeeze", {x, Ints(axes)});
  return Op("Squeeze", {x}, {Attribute::Ints("axes", axes)});
}

absl::StatusOr<Value*> GradBuilder::SumTo(Value* grad, const Shape& grad_shape, Value* target) {
  const Shape& ts = target->shape;
  if (ts == grad_shape && ts.rank_known) return grad;
  // Statically: the leading axes target lacks, and the axes where it has a 1 the grad does not.
  // When static shapes cannot tell (unknown ranks, different symbols), the ai.mixtrain
  // SumToShape op decides at run time from the two shapes.
  bool decidable = ts.rank_known && grad_shape.rank_known && ts.rank() <= grad_shape.rank();
  const int64_t lead = decidable ? grad_shape.rank() - ts.rank() : 0;
  std::vector<int64_t> axes;
  for (int64_t i = 0; decidable && i < grad_shape.rank(); ++i) {
    if (i < lead) {
      axes.push_back(i);
      continue;
    }
    const Dim& t = ts.dims[i - lead];
    const Dim& o = grad_shape.dims[i];
    if (t == o && (t.known() || !t.symbol.empty())) continue;
    if (t.known() && t.value == 1) {
      axes.push_back(i);  // broadcast from 1 (summing a dim that is 1 at run time is harmless)
      continue;
    }
    decidable = false;
  }
  if (!decidable) return Op("SumToShape", {grad, ShapeOf(target)}, {}, "ai.mixtrain");
  Value* summed = ReduceSum(grad, axes, /*keepdims=*/true);
  if (lead == 0) return summed;
  std::vector<int64_t> lead_axes;
  for (int64_t i = 0; i < lead; ++i) lead_axes.push_back(i);
  return Squeeze(summed, lead_axes);
}

Value* GradBuilder::CountOver(Value* x, const std::vector<int64_t>& axes) {
  Value* ones = Op("ConstantOfShape", {ShapeOf(x)},
                   {Attribute::TensorAttr("value", FilledTensor(1.0, x->dtype, {1}))});
  return ReduceSum(ones, axes, /*keepdims=*/true);
}

Value* GradBuilder::Sum(const std::vector<Value*>& parts) {
  Value* acc = nullptr;
  for (Value* p : parts) acc = acc == nullptr ? p : Add(acc, p);
  return acc;
}

}  // namespace mixtrain
