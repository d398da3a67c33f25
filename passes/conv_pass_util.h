// Small graph queries shared by the inference conv passes (fuse_conv, conv_layout,
// conv_transposes, conv_flatten_weights): which values are exactly safe to swallow or rewrite.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "passes/fusion_match.h"

namespace mixtrain::conv_pass {

using fusion::ConstantTensor;
using fusion::Determined;
using fusion::IsFloatType;
using fusion::IsMixtrain;
using fusion::IsOnnx;
using fusion::SoleConsumer;
using fusion::ToFixedPoint;
using fusion::TransposePerm;

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
