// Small graph queries shared by the inference conv passes (fuse_conv, conv_layout,
// conv_transposes, conv_flatten_weights): which values are exactly safe to swallow or rewrite.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace mixtrain::conv_pass {

inline bool IsOnnx(const Node& n, const char* op) {
  return n.op_type() == op && n.domain().empty();
}
inline bool IsMixtrain(const Node& n, const char* op) {
  return n.op_type() == op && n.domain() == "ai.mixtrain";
}

inline bool IsFloatType(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

// The node that alone uses `v`, when a rewrite may make v vanish: one use, no graph output.
inline Node* SoleConsumer(const Graph& g, const Value* v) {
  if (v == nullptr || v->consumers.size() != 1 || g.IsGraphOutput(v)) return nullptr;
  return v->consumers[0];
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

// Every dim known or named: two such shapes that compare equal are equal at run time.
inline bool Determined(const Shape& s) {
  if (!s.rank_known) return false;
  for (const Dim& d : s.dims)
    if (!d.known() && d.symbol.empty()) return false;
  return true;
}

// Drops `v` when it is an initializer nothing reads any more (no graph input or output).
inline void DropIfDeadInitializer(Graph& g, Value* v) {
  if (v == nullptr || !v->is_initializer() || !v->consumers.empty() || g.IsGraphOutput(v))
    return;
  const auto& in = g.inputs();
  if (std::find(in.begin(), in.end(), v) != in.end()) return;
  g.RemoveInitializer(v);
  g.RemoveValue(v);
}

// Removes `n` and the initializers only it read (a Reshape's shape, a replaced weight).
inline void RemoveNodeAndDeadInitializers(Graph& g, Node* n) {
  const std::vector<Value*> inputs = n->inputs();
  g.RemoveNode(n);
  for (Value* v : inputs) DropIfDeadInitializer(g, v);
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

// [N, C, sp...] -> [N, sp..., C] as a Transpose perm, and its inverse.
inline std::vector<int64_t> ToChannelsLastPerm(int64_t rank) {
  std::vector<int64_t> p = {0};
  for (int64_t i = 2; i < rank; ++i) p.push_back(i);
  p.push_back(1);
  return p;
}
inline std::vector<int64_t> ToChannelsFirstPerm(int64_t rank) {
  std::vector<int64_t> p = {0, rank - 1};
  for (int64_t i = 1; i < rank - 1; ++i) p.push_back(i);
  return p;
}

// out[i] = in[perm[i]].
inline Shape PermuteShape(const Shape& s, const std::vector<int64_t>& perm) {
  if (!s.rank_known) return s;
  std::vector<Dim> d;
  for (int64_t p : perm) d.push_back(s.dims[p]);
  return Shape(std::move(d));
}

}  // namespace mixtrain::conv_pass
