// Small helpers the movement shape rules (graph/ops/movement_*ops.cc) share: reading an int input's
// known value, turning shapes into dim vectors, products of dims, prefixing param errors.
#pragma once

#include "graph/sym_dim.h"

#include <optional>
#include <vector>

#include "graph/shape_inference.h"

namespace mixtrain::movement_infer {

// The contents of int input `i` when known (initializer, constant, folded), else nullopt.
inline std::optional<std::vector<int64_t>> IntsInput(const InferContext& ctx, size_t i) {
  const TypeInfo& t = ctx.input(i);
  if (!t.present) return std::nullopt;
  if (t.value != nullptr) return t.value->ToInt64Vector();
  if (t.data == nullptr) return std::nullopt;
  std::vector<int64_t> out;
  for (const SymInt& s : *t.data) {
    if (!s.known()) return std::nullopt;
    out.push_back(*s.value);
  }
  return out;
}

// The contents of int input `i` as far as known: exact (value) or propagated (data, where
// entries may be symbols or unknown), else nullopt.
inline std::optional<SymInts> SymIntsInput(const InferContext& ctx, size_t i) {
  const TypeInfo& t = ctx.input(i);
  if (!t.present) return std::nullopt;
  if (t.value != nullptr) {
    SymInts out;
    for (int64_t v : t.value->ToInt64Vector()) out.push_back(SymInt{v, ""});
    return out;
  }
  if (t.data != nullptr) return *t.data;
  return std::nullopt;
}

// Sizes with -1 for dims that are not numbers.
inline std::vector<int64_t> DimsOf(const Shape& s) {
  std::vector<int64_t> v;
  for (const Dim& d : s.dims) v.push_back(d.known() ? d.value : -1);
  return v;
}

// Same rank as `s`, every dim unknown.
inline Shape UnknownDims(const Shape& s) {
  if (!s.rank_known) return Shape();
  return Shape(std::vector<Dim>(s.rank()));
}
// For rules whose output rank is the length of a 1-D shape input (Reshape, ConstantOfShape): that
// many unknown dims when the input's length is known, else unknown rank.
inline Shape UnknownDimsOfLength(const Shape& shape_of_shape_input) {
  if (shape_of_shape_input.rank_known && shape_of_shape_input.rank() == 1 &&
      shape_of_shape_input.dims[0].known())
    return Shape(std::vector<Dim>(shape_of_shape_input.dims[0].value));
  return Shape();
}

// Product of dims: a number when all are known; a lone symbol times known 1s stays the symbol;
// symbols and numbers multiply as monomials ("64*N", graph/sym_dim.h); otherwise unknown.
inline Dim Product(const std::vector<Dim>& dims) {
  if (std::optional<sym::Mono> m = sym::ProductOf(dims)) return sym::ToDim(*m);
  int64_t p = 1;
  const Dim* sym = nullptr;
  int unknown = 0;
  for (const Dim& d : dims) {
    if (d.known()) {
      p *= d.value;
    } else {
      ++unknown;
      sym = &d;
    }
  }
  if (unknown == 0) return Dim(p);
  if (p == 0) return Dim(0);
  if (unknown == 1 && p == 1) return *sym;
  return Dim();
}

// Prefixes a parameter error with the node's name and op.
template <typename T>
absl::StatusOr<T> Wrap(const InferContext& ctx, absl::StatusOr<T> v) {
  if (!v.ok()) return ctx.Error(v.status().message());
  return v;
}

}  // namespace mixtrain::movement_infer
