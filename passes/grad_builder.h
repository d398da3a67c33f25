// The one place where gradient code emits nodes: small typed helpers over Graph (constants, the
// opset-dependent forms of ReduceSum/Unsqueeze/Squeeze), undoing numpy broadcasting (SumTo) and
// summing fan-out (Sum). Gradient rules (passes/grad_rules_*.cc) and the loss pass use it, so no
// rule repeats broadcast or opset bookkeeping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mixtrain {

class GradBuilder {
 public:
  explicit GradBuilder(Graph& g) : g_(g) {}
  Graph& graph() { return g_; }
  int64_t opset() const { return g_.opset(""); }
  // Names of emitted nodes start with this ("<forward node>/grad").
  void set_scope(std::string scope) { scope_ = std::move(scope); }
  // Every node this builder created (the autodiff pass prunes the unused ones).
  const absl::flat_hash_set<const Node*>& created() const { return created_; }
  bool created_constant(const Value* v) const { return constants_.contains(v); }

  // op(inputs) -> one new value; dtype and shape come from the op's inference rule, else the
  // dtype of the first input.
  Value* Op(const std::string& op, const std::vector<Value*>& inputs,
            std::vector<Attribute> attrs = {}, const std::string& domain = "");
  // op(inputs) -> outputs; wanted[i] false leaves output i omitted.
  std::vector<Value*> OpN(const std::string& op, const std::vector<Value*>& inputs,
                          const std::vector<bool>& wanted, std::vector<Attribute> attrs = {},
                          const std::string& domain = "");

  // Constants (initializers): a rank-0 scalar of any float dtype; 1-D int64; a bool scalar.
  Value* Scalar(double v, DType dtype);
  Value* Ints(const std::vector<int64_t>& v);
  Value* Bool(bool v);

  Value* Add(Value* a, Value* b) { return Op("Add", {a, b}); }
  Value* Sub(Value* a, Value* b) { return Op("Sub", {a, b}); }
  Value* Mul(Value* a, Value* b) { return Op("Mul", {a, b}); }
  Value* Div(Value* a, Value* b) { return Op("Div", {a, b}); }
  Value* Neg(Value* a) { return Op("Neg", {a}); }
  Value* Cast(Value* a, DType to);
  Value* ShapeOf(Value* a) { return Op("Shape", {a}); }
  // Reshape to the runtime shape of `like`.
  Value* ReshapeLike(Value* a, Value* like) { return Op("Reshape", {a, ShapeOf(like)}); }
  Value* ExpandLike(Value* a, Value* like) { return Op("Expand", {a, ShapeOf(like)}); }
  // Zeros with the runtime shape and the dtype of `like`.
  Value* ZerosLike(Value* like);
  // Where(cond, a, 0) and Where(cond, 0, a).
  Value* MaskKeep(Value* cond, Value* a);
  Value* MaskDrop(Value* cond, Value* a);

  // Opset-aware forms (axes as attribute before opset 13, as an input from 13).
  Value* ReduceSum(Value* x, const std::vector<int64_t>& axes, bool keepdims);
  Value* Unsqueeze(Value* x, const std::vector<int64_t>& axes);
  Value* Squeeze(Value* x, const std::vector<int64_t>& axes);

  // Undoes numpy broadcasting: `grad` (of shape `grad_shape`, as far as known) summed over the
  // axes where `target` was broadcast, reshaped to target's shape. Static ReduceSum/Squeeze when
  // the shapes tell which axes those are, else ai.mixtrain.SumToShape decides at run time.
  absl::StatusOr<Value*> SumTo(Value* grad, const Shape& grad_shape, Value* target);

  // How many elements of x each reduction over `axes` covers, as a keepdims-shaped tensor of x's
  // dtype, computed at run time (for reductions over dims not known statically).
  Value* CountOver(Value* x, const std::vector<int64_t>& axes);

  // Fan-out: the sum of one value's gradient contributions (nullptr for none).
  Value* Sum(const std::vector<Value*>& parts);

 private:
  Node* Emit(const std::string& op, const std::vector<Value*>& inputs,
             const std::vector<Value*>& outputs, std::vector<Attribute> attrs,
             const std::string& domain);
  Graph& g_;
  std::string scope_ = "grad";
  Value* AddConstant(Tensor t);
  absl::flat_hash_set<const Node*> created_;
  absl::flat_hash_set<const Value*> constants_;
};

}  // namespace mixtrain
