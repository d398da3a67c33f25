// The gradient table: one pure rule per op, (node, output grads) -> input grads, emitted through
// GradBuilder. Rules live in passes/grad_rules_*.cc, grouped by concept, and register here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"
#include "passes/grad_builder.h"

namespace mixtrain {

class GradContext {
 public:
  GradContext(const Node& node, GradBuilder& b, std::vector<Value*> dy, std::vector<bool> needs)
      : node_(node), b_(b), dy_(std::move(dy)), needs_(std::move(needs)),
        dx_(node.num_inputs(), nullptr) {}
  const Node& node() const { return node_; }
  GradBuilder& b() { return b_; }
  int64_t opset() const { return b_.opset(); }
  Value* X(size_t i) const { return node_.input(i); }
  Value* Y(size_t i) const { return node_.output(i); }
  // The gradient of output i, or null when nothing downstream needs it (read as zero).
  Value* dY(size_t i) const { return i < dy_.size() ? dy_[i] : nullptr; }
  // Whether the gradient of input i is wanted; rules skip the work for the others.
  bool needs(size_t i) const { return i < needs_.size() && needs_[i]; }
  // Sets input i's gradient (same dtype and shape as the input).
  void SetGrad(size_t i, Value* g) {
    if (i < dx_.size()) dx_[i] = g;
  }
  // Sets input i's gradient from a value of static shape `shape` that may be broadcast.
  absl::Status SetGradSumTo(size_t i, Value* g, const Shape& shape);
  const std::vector<Value*>& grads() const { return dx_; }
  // "node 'n' (Op): msg" for rules that meet a form they do not support.
  absl::Status Error(std::string_view msg) const;

 private:
  const Node& node_;
  GradBuilder& b_;
  std::vector<Value*> dy_;
  std::vector<bool> needs_;
  std::vector<Value*> dx_;
};

using GradRule = absl::Status (*)(GradContext&);

// One row of the table. Inputs outside `differentiable` (a bit per input index; bit 31 stands
// for input 31 and every later one, so the variadic ops' default ~0u covers a Concat or Sum of
// any length) carry no gradient (shapes, indices, running statistics); integer and bool inputs
// never do.
struct GradRuleRow {
  std::string_view op_type;
  std::string_view domain;  // "" = ai.onnx
  GradRule rule;
  uint32_t differentiable = ~0u;
};
inline constexpr uint32_t Inputs(std::initializer_list<int> idx) {
  uint32_t m = 0;
  for (int i : idx) m |= 1u << (i < 31 ? i : 31);
  return m;
}
// Whether input i is in the mask (see GradRuleRow::differentiable).
inline constexpr bool InMask(uint32_t mask, size_t i) { return (mask >> (i < 31 ? i : 31)) & 1u; }

const GradRuleRow* FindGradRule(std::string_view domain, std::string_view op_type);
void RegisterGradRules(std::initializer_list<GradRuleRow> rows);
#define MT_REGISTER_GRAD_RULES(tag, ...) \
  static const bool mt_grad_rules_registered_##tag = (::mixtrain::RegisterGradRules(__VA_ARGS__), true)

}  // namespace mixtrain
