// Small pattern-matching helpers shared by the inference fusions (fuse_gelu, fuse_matmul,
// fuse_softmax, and the conv passes through conv_pass_util.h): who alone uses a value, constants
// and constant scalars compared by value, shapes that are equal at run time.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "graph/graph.h"

namespace mixtrain::fusion {

inline bool IsOnnx(const Node& n, const char* op) {
  return n.op_type() == op && n.domain().empty();
}

inline bool IsMixtrain(const Node& n, const char* op) {
  return n.op_type() == op && n.domain() == "ai.mixtrain";
}

inline bool IsFloatType(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

// The node that alone uses `v`, when a fusion may swallow v: one use, not a graph output.
inline Node* SoleConsumer(const Graph& g, const Value* v) {
  if (v == nullptr || v->consumers.size() != 1 || g.IsGraphOutput(v)) return nullptr;
  return v->consumers[0];
}

// The input of binary node n that is not `v` (null when both are v or n is not binary).
inline Value* OtherInput(const Node& n, const Value* v) {
  if (n.num_inputs() != 2) return nullptr;
  if (n.input(0) == v && n.input(1) != v) return n.input(1);
  if (n.input(1) == v && n.input(0) != v) return n.input(0);
  return nullptr;
}

// The contents of a value that never changes: an initializer that is no graph input (a graph
// input may be fed) or a Constant node's tensor.
inline const Tensor* ConstantTensor(const Graph& g, const Value* v) {
  if (v == nullptr) return nullptr;
  if (v->is_initializer()) {
    const auto& in = g.inputs();
    return std::find(in.begin(), in.end(), v) == in.end() ? &*v->initializer : nullptr;
  }
  if (v->producer != nullptr && IsOnnx(*v->producer, "Constant")) {
    const Attribute* a = v->producer->attr("value");
    if (a != nullptr && a->kind == Attribute::Kind::kTensor) return &a->t;
  }
  return nullptr;
}

// The value of a one-element float constant whose rank does not exceed `max_rank` (so using it
// as a binary operand does not grow the other operand's shape); nullopt otherwise.
inline std::optional<double> ConstantScalar(const Graph& g, const Value* v, int64_t max_rank) {
  const Tensor* t = ConstantTensor(g, v);
  if (t == nullptr || t->numel() != 1 || t->rank() > max_rank || !IsFloatType(t->dtype()))
    return std::nullopt;
  return t->GetDouble(0);
}

// Relative tolerance for constants of a graph in dtype t: a bf16- or fp16-lowered graph holds
// its constants rounded to that type (1/sqrt(2) is 0.70703125 in bf16).
inline double ConstantTolerance(DType t) {
  switch (t) {
    case DType::kBF16: return 1.0 / 256;
    case DType::kF16: return 1.0 / 2048;
    default: return 1e-6;
  }
}

inline bool Near(std::optional<double> v, double want, double rel_tol) {
  return v.has_value() && std::fabs(*v - want) <= rel_tol * std::fabs(want);
}

// Every dim known or named: two such shapes that compare equal are equal at run time.
inline bool Determined(const Shape& s) {
  if (!s.rank_known) return false;
  for (const Dim& d : s.dims)
    if (!d.known() && d.symbol.empty()) return false;
  return true;
}

// Transpose's permutation (absent attribute: reversed dims).
inline std::vector<int64_t> TransposePerm(const Node& t, int64_t rank) {
  std::vector<int64_t> perm = t.attr_ints("perm");
  if (perm.empty()) {
    perm.resize(rank);
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  return perm;
}

// Applies `rule` (Graph&, Node*) -> bool to some node until it fires nowhere; rescans after each
// hit, since a rewrite may remove nodes. True when it fired at all.
template <typename Rule>
bool ToFixedPoint(Graph& g, Rule rule) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    std::vector<Node*> nodes;
    for (const auto& n : g.nodes()) nodes.push_back(n.get());
    for (Node* n : nodes) {
      if (rule(g, n)) {
        again = changed = true;
        break;
      }
    }
  }
  return changed;
}

}  // namespace mixtrain::fusion
