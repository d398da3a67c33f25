// Runs one CPU kernel on host tensors, the way the runtime would, for per-op kernel tests.
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/shape_inference.h"
#include "kernels/registry.h"

namespace mixtrain::testing_util {

// Builds a one-node graph `op(inputs) -> num_outputs` with the given attributes; input i is named
// "in<i>" (an undefined Tensor in `inputs` means an omitted optional input).
struct OneNode {
  std::unique_ptr<Graph> graph;
  Node* node = nullptr;
};
inline OneNode MakeNode(const std::string& op, const std::vector<Tensor>& inputs, int num_outputs,
                        std::vector<Attribute> attrs = {}, const std::string& domain = "") {
  OneNode r;
  r.graph = std::make_unique<Graph>();
  std::vector<Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    Value* v = r.graph->AddValue("in" + std::to_string(i), inputs[i].dtype(),
                                 Shape::Of(inputs[i].dims()));
    r.graph->AddInput(v);
    ins.push_back(v);
  }
  r.node = r.graph->AddNode(op, ins, num_outputs, "node", domain);
  for (Attribute& a : attrs) r.node->SetAttr(std::move(a));
  return r;
}

// Infers output dtypes/shapes from the op's rule (with all input values known), allocates the
// outputs, finds the registered CPU kernel by dtype and runs it.
inline absl::StatusOr<std::vector<Tensor>> RunCpuKernel(const Node& node,
                                                        const std::vector<Tensor>& inputs,
                                                        int64_t opset = 17) {
  std::vector<TypeInfo> in_types;
  std::vector<DType> in_dtypes;
  for (const Tensor& t : inputs) {
    TypeInfo ti;
    if (t.defined()) {
      ti.dtype = t.dtype();
      ti.shape = Shape::Of(t.dims());
      ti.value = &t;
    } else {
      ti.present = false;
    }
    in_dtypes.push_back(t.dtype());
    in_types.push_back(std::move(ti));
  }
  std::vector<TypeInfo> out_types;
  absl::Status st = InferNode(node, opset, in_types, &out_types);
  if (!st.ok()) return st;
  std::vector<DType> out_dtypes;
  std::vector<Tensor> outs;
  for (size_t i = 0; i < node.num_outputs(); ++i) {
    if (node.output(i) == nullptr) {
      outs.emplace_back();
      out_dtypes.push_back(DType::kUndefined);
      continue;
    }
    const TypeInfo& o = out_types.at(i);
    if (o.dtype == DType::kUndefined || !o.shape.fully_known())
      return absl::InternalError("shape inference left output " + std::to_string(i) +
                                 " of " + node.op_type() + " unknown");
    outs.emplace_back(o.dtype, o.shape.sizes());
    out_dtypes.push_back(o.dtype);
  }
  auto def = KernelRegistry::Global().Find(node, DeviceType::kCPU, in_dtypes, out_dtypes);
  if (!def.ok()) return def.status();
  auto kernel = (*def)->factory(node);
  if (!kernel.ok()) return kernel.status();
  std::vector<TensorView> in_views(inputs.size()), out_views(outs.size());
  std::vector<const TensorView*> in_ptrs;
  std::vector<TensorView*> out_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      in_ptrs.push_back(nullptr);
      continue;
    }
    in_views[i] = {inputs[i].dtype(), inputs[i].dims(), const_cast<void*>(inputs[i].data())};
    in_ptrs.push_back(&in_views[i]);
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].defined()) {
      out_ptrs.push_back(nullptr);
      continue;
    }
    out_views[i] = {outs[i].dtype(), outs[i].dims(), outs[i].data()};
    out_ptrs.push_back(&out_views[i]);
  }
  KernelContext ctx(node, DeviceType::kCPU, in_ptrs, out_ptrs, nullptr, opset);
  st = (*kernel)->Compute(ctx);
  if (!st.ok()) return st;
  return outs;
}

}  // namespace mixtrain::testing_util
