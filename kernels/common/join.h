// Concat and Split as one byte layout, shared by both backends: the whole tensor is `outer` rows
// of `row` bytes, each row the concatenation of every part's `chunk` bytes (the part's dims from
// `axis` on) at byte `start` of the row. Concat's parts are its present inputs; Split's are its
// outputs, whose sizes the shape rule resolved (attribute, input or num_outputs) into their
// planned dims. Inline vectors: no heap allocation for up to 8 parts.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "kernels/registry.h"

namespace mixtrain::join {

using Parts = absl::InlinedVector<const TensorView*, 8>;

struct Layout {
  int64_t outer = 1, row = 0;  // rows of the whole and their bytes
  absl::InlinedVector<int64_t, 8> chunk, start;  // per part, bytes
};

// Concat's inputs or Split's outputs.
inline absl::StatusOr<Parts> PartsOf(const KernelContext& ctx, bool concat) {
  Parts parts;
  if (concat) {
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      if (ctx.input(i) != nullptr) parts.push_back(ctx.input(i));
    return parts;
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (ctx.output(i) == nullptr) return ctx.Error("every Split output must be used");
    parts.push_back(ctx.output(i));
  }
  return parts;
}

// The layout of `parts` in `whole` along the node's axis; errors name the node.
inline absl::StatusOr<Layout> MakeLayout(const KernelContext& ctx, const TensorView& whole, const Parts& parts) {
  const int64_t esize = static_cast<int64_t>(DTypeSize(whole.dtype));
  if (esize == 0) return ctx.Error(absl::StrCat("cannot move ", DTypeName(whole.dtype), " tensors"));
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", 0), whole.rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  const auto product = [](const std::vector<int64_t>& d, size_t from, size_t to) {
    int64_t p = 1;
    for (size_t i = from; i < to; ++i) p *= d[i];
    return p;
  };
  Layout l;
  l.outer = product(whole.dims, 0, *axis);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]->rank() != whole.rank() || parts[i]->dtype != whole.dtype)
      return ctx.Error(absl::StrCat("part ", i, " has another rank or dtype"));
    l.chunk.push_back(product(parts[i]->dims, *axis, parts[i]->dims.size()) * esize);
    l.start.push_back(l.row);
    l.row += l.chunk.back();
  }
  if (l.row != product(whole.dims, *axis, whole.dims.size()) * esize)
    return ctx.Error("part sizes do not add up to the whole");
  return l;
}

}  // namespace mixtrain::join
