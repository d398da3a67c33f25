// See host_evaluator.h.
#include "kernels/host_evaluator.h"

#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace mixtrain {
namespace {

TensorView ViewOf(const Tensor& t) { return {t.dtype(), t.dims(), const_cast<void*>(t.data())}; }

std::vector<DType> DTypesOf(const std::vector<TypeInfo>& t) {
  std::vector<DType> d;
  for (const TypeInfo& x : t) d.push_back(x.present ? x.dtype : DType::kUndefined);
  return d;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> ComputeOnHost(const Node& node, int64_t opset, const KernelDef& def,
                                                  const std::vector<const TensorView*>& inputs,
                                                  const std::vector<TypeInfo>& out_types) {
  std::vector<Tensor> outs(node.num_outputs());
  std::vector<TensorView> out_views(outs.size());
  std::vector<TensorView*> out_ptrs(outs.size(), nullptr);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (node.output(i) == nullptr) continue;
    outs[i] = Tensor(out_types[i].dtype, out_types[i].shape.sizes());
    out_views[i] = {outs[i].dtype(), outs[i].dims(), outs[i].data()};
    out_ptrs[i] = &out_views[i];
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> kernel, def.factory(node));
  KernelContext ctx(node, DeviceType::kCPU, inputs, out_ptrs, nullptr, opset);
  MT_RETURN_IF_ERROR(kernel->Compute(ctx));
  return outs;
}

absl::StatusOr<std::vector<Tensor>> EvaluateOnHost(const Node& node, int64_t opset,
                                                   const std::vector<const Tensor*>& inputs) {
  std::vector<TypeInfo> ins(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) {
      ins[i].present = false;
      continue;
    }
    ins[i].dtype = inputs[i]->dtype();
    ins[i].shape = Shape::Of(inputs[i]->dims());
    ins[i].value = inputs[i];
  }
  std::vector<TypeInfo> outs;
  MT_RETURN_IF_ERROR(InferNode(node, opset, ins, &outs));
  for (size_t i = 0; i < node.num_outputs(); ++i)
    if (node.output(i) != nullptr && (i >= outs.size() || !outs[i].shape.fully_known()))
      return absl::InvalidArgumentError(absl::StrCat("node '", node.name(), "' (", node.op_type(),
                                                     "): cannot determine output ", i, "'s shape"));
  MT_ASSIGN_OR_RETURN(const KernelDef* def,
                      KernelRegistry::Global().Find(node, DeviceType::kCPU, DTypesOf(ins), DTypesOf(outs)));
  std::vector<TensorView> views(inputs.size());
  std::vector<const TensorView*> args(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] != nullptr) {
      views[i] = ViewOf(*inputs[i]);
      args[i] = &views[i];
    }
  return ComputeOnHost(node, opset, *def, args, outs);
}

}  // namespace mixtrain
