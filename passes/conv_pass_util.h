// Small graph queries shared by the conv passes (fuse_conv, conv_layout, conv_transposes,
// conv_flatten_weights, conv_layout_train): which values are exactly safe to swallow or rewrite,
// and the conversions to and from the channel-blocked layout.
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

// ---- the channel-blocked layout (conv_layout, conv_layout_train) -------------------------------
// [N, C, sp...] stored as [N, C/b, sp..., b] (oneDNN's nC<sp>16c, b = 16, the default; or 8),
// converted by
//   ToBlocked(x)   = Transpose(Reshape(x, [N, C/b, b, sp...]), [0, 1, 3.., 2])
//   FromBlocked(b) = Reshape(Transpose(b, [0, 1, r, 2..]), [N, C, sp...])
inline constexpr int64_t kBlock = 16;

// Transpose(x, perm) into `out` (a new value when null).
inline Value* AddTranspose(Graph& g, Value* x, const std::vector<int64_t>& perm, Value* out,
                           const char* suffix = "_nhwc") {
  if (out == nullptr)
    out = g.AddValue(g.UniqueName(x->name + suffix), x->dtype, PermuteShape(x->shape, perm));
  Node* t = g.AddNode("Transpose", {x}, {out}, g.UniqueName(x->name + "_transpose"));
  t->SetAttr(Attribute::Ints("perm", perm));
  return out;
}

// Reshape(x, shape) into `out` (a new value of `out_shape` when null).
inline Value* AddReshape(Graph& g, Value* x, const std::vector<int64_t>& shape, Shape out_shape,
                         Value* out) {
  if (out == nullptr) out = g.AddValue(g.UniqueName(x->name + "_split"), x->dtype, out_shape);
  Value* s = g.AddInitializer(g.UniqueName(x->name + "_shape"),
                              Tensor::FromVector<int64_t>(DType::kI64,
                                                          {static_cast<int64_t>(shape.size())},
                                                          shape));
  g.AddNode("Reshape", {x, s}, {out}, g.UniqueName(x->name + "_reshape"));
  return out;
}

// [N, C, sp...] (rank r) split as [N, C/b, b, sp...]; 0 keeps N, whatever it is.
inline std::vector<int64_t> SplitShape(const Shape& s, int64_t block = kBlock) {
  std::vector<int64_t> r = {0, s.dims[1].value / block, block};
  for (int64_t i = 2; i < s.rank(); ++i) r.push_back(s.dims[i].value);
  return r;
}
// [N, C/16, 16, sp...] -> [N, C/16, sp..., 16] and back, as Transpose perms.
inline std::vector<int64_t> ToBlockedPerm(int64_t rank) {
  std::vector<int64_t> p = {0, 1};
  for (int64_t i = 3; i < rank + 1; ++i) p.push_back(i);
  p.push_back(2);
  return p;
}
inline std::vector<int64_t> FromBlockedPerm(int64_t rank) {
  std::vector<int64_t> p = {0, 1, rank};
  for (int64_t i = 2; i < rank; ++i) p.push_back(i);
  return p;
}
inline Shape SplitDims(const Shape& s, int64_t block = kBlock) {
  std::vector<Dim> d = {s.dims[0], Dim(s.dims[1].value / block), Dim(block)};
  d.insert(d.end(), s.dims.begin() + 2, s.dims.end());
  return Shape(std::move(d));
}
// The stored shape of [N, C, sp...] `s` blocked.
inline Shape BlockedShape(const Shape& s, int64_t block = kBlock) {
  return PermuteShape(SplitDims(s, block), ToBlockedPerm(s.rank()));
}

// [N, C, sp...] -> [N, C/b, sp..., b] (C known, a multiple of b).
inline Value* ToBlocked(Graph& g, Value* x, int64_t block = kBlock) {
  const int64_t rank = x->shape.rank();
  Value* split = AddReshape(g, x, SplitShape(x->shape, block), SplitDims(x->shape, block), nullptr);
  return AddTranspose(g, split, ToBlockedPerm(rank), nullptr, "_blocked");
}
// Blocked `b` back into [N, C, sp...] value `y`.
inline void FromBlocked(Graph& g, Value* b, Value* y) {
  const int64_t rank = y->shape.rank();
  Value* merged = AddTranspose(g, b, FromBlockedPerm(rank), nullptr, "_split");
  std::vector<int64_t> shape = {0};
  for (int64_t i = 1; i < rank; ++i) shape.push_back(y->shape.dims[i].value);
  AddReshape(g, merged, shape, y->shape, y);
}

}  // namespace mixtrain::conv_pass
