// See node_cost.h.
#include "runtime/node_cost.h"

#include <string_view>

namespace mixtrain {
namespace {

double Numel(const TensorView* t) { return t == nullptr ? 0 : static_cast<double>(t->numel()); }

// Product of dims [from, end) of `t`.
double Prod(const TensorView* t, size_t from) {
  double p = 1;
  for (size_t i = from; i < t->dims.size(); ++i) p *= static_cast<double>(t->dims[i]);
  return p;
}

// The contracted length K of a matrix product whose first operand is `a`, after an optional
// permutation `perm` (FusedMatMul's perm_a); a 1-D operand is its own K.
double InnerDim(const TensorView* a, const std::vector<int64_t>& perm, bool transposed) {
  if (a->dims.empty()) return 1;
  if (a->dims.size() == 1) return static_cast<double>(a->dims[0]);
  size_t axis = a->dims.size() - (transposed ? 2 : 1);
  if (perm.size() == a->dims.size()) axis = static_cast<size_t>(perm[axis]);
  return static_cast<double>(a->dims[axis]);
}

// Multiply-adds x 2 of a plain NCHW convolution producing `y` from weights `w` [M, C/g, k...]:
// each output element is a dot product of length C/g * prod(k).
double ConvFlops(const TensorView* y, const TensorView* w) { return 2 * Numel(y) * Prod(w, 1); }

}  // namespace

NodeCost EstimateCost(const Node& node, const std::vector<const TensorView*>& inputs,
                      const std::vector<const TensorView*>& outputs) {
  NodeCost c;
  for (const TensorView* t : inputs)
    if (t != nullptr) c.bytes += static_cast<double>(t->nbytes());
  for (const TensorView* t : outputs)
    if (t != nullptr) c.bytes += static_cast<double>(t->nbytes());
  auto in = [&](size_t i) -> const TensorView* { return i < inputs.size() ? inputs[i] : nullptr; };
  auto out = [&](size_t i) -> const TensorView* { return i < outputs.size() ? outputs[i] : nullptr; };
  const std::string_view op = node.op_type();
  if (in(0) == nullptr || in(1) == nullptr) return c;
  if (op == "ConvGrad") {
    // (dY, X, W) -> dX, dW, dB: backward data and backward weights each cost one forward conv
    // (dY's element count is the same in every layout).
    if (in(2) != nullptr && in(2)->dims.size() >= 3)
      c.flops = ConvFlops(in(0), in(2)) * ((out(0) != nullptr) + (out(1) != nullptr));
    return c;
  }
  if (out(0) == nullptr) return c;
  if (op == "MatMul" || op == "MatMulInteger") {
    c.flops = 2 * Numel(out(0)) * InnerDim(in(0), {}, false);
  } else if (op == "FusedMatMul") {
    c.flops = 2 * Numel(out(0)) * InnerDim(in(0), node.attr_ints("perm_a"), false);
  } else if (op == "Gemm") {
    c.flops = 2 * Numel(out(0)) * InnerDim(in(0), {}, node.attr_int("transA", 0) != 0);
  } else if (op == "Conv" || op == "ConvTranspose" || op == "FusedConv") {
    // Y has as many elements in every layout, but a pool-fused conv's Y is the pooled one.
    if (!node.has_attr("pool_kernel_shape") && in(1)->dims.size() >= 3)
      c.flops = ConvFlops(op == "ConvTranspose" ? in(0) : out(0), in(1));
  }
  return c;
}

}  // namespace mixtrain
