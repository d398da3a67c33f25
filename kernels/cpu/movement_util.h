// The copy engines the CPU data-movement kernels (kernels/cpu/movement_*.cc) are built on. They
// move elements by size only, so one code path serves every dtype. Each first simplifies its
// layout (drops size-1 dims, merges dims that are contiguous in both source and destination) so
// that contiguous runs become single memcpy calls, then splits rows across threads.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <span>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "kernels/common/pad_source.h"
#include "kernels/registry.h"

namespace mixtrain::cpu_movement {

// Dims or strides inside the engines: up to 8 inline, so a call allocates nothing.
using DimVec = absl::InlinedVector<int64_t, 8>;
using Dims = std::span<const int64_t>;

// Dims with their source strides after dropping size-1 dims and merging neighbours that are
// contiguous in the source (the destination is dense, so they are contiguous there too).
struct Layout {
  DimVec dims, strides;
  bool empty = false;  // some dim is 0: nothing to copy
};
Layout Simplify(Dims dims, Dims strides);
// Offset of row `row` of the index space `dims` in a layout with `strides`.
int64_t OffsetOf(int64_t row, Dims dims, Dims strides);
// A ParallelFor grain (in rows) giving each thread enough bytes to be worth waking.
int64_t RowGrain(int64_t row_bytes);

// The contents of an int32/int64 tensor as int64 (Slice starts, Pad pads, axes...).
absl::StatusOr<std::vector<int64_t>> ReadInts(const KernelContext& ctx, const TensorView& t);

// Row-major strides (in elements) of dims.
DimVec StridesOf(Dims dims);

// Copies nbytes from src to dst with both cores when large; nothing when they alias exactly (the
// planner may run Reshape-like ops in place).
void CopyBytes(void* dst, const void* src, size_t nbytes);

// Fills `count` elements of `esize` bytes at dst with the element at `value`.
void FillElements(void* dst, const void* value, size_t esize, int64_t count);

// dst is dense with `dims`; element (i_0..i_k) is read from
// src + esize * sum(i_d * src_strides[d]). Strides may be 0 (broadcast: Expand, Tile) or negative
// (Slice with negative steps).
void StridedCopy(void* dst, const void* src, size_t esize, Dims dims, Dims src_strides);

// Transpose of a dense src with `in_dims` into dst: output dim d is input dim perm[d]. Uses
// cache-blocked tiles when the innermost output dim is not the innermost input dim.
void TransposeCopy(void* dst, const void* src, size_t esize, Dims in_dims, Dims perm);

// dst is dense with `out_dims`; maps[d][o] is the source index along dim d for output index o, or
// -1 for "fill with `fill`" (Pad: constant, edge, reflect and wrap modes are all such maps).
void IndexMapCopy(void* dst, const void* src, size_t esize, const std::vector<int64_t>& in_dims,
                  const std::vector<int64_t>& out_dims,
                  const std::vector<std::vector<int64_t>>& maps, const void* fill);

// `value` converted to `dtype`'s bytes (for fill values given as floats: Pad's opset-2 `value`).
std::vector<uint8_t> ScalarBytes(DType dtype, double value);

// Pad: the source index along one dim for output index o (pads `begin` before, n input
// elements), or -1 for the constant fill. Pad and its gradient (PadGrad) share it.
inline int64_t PadSource(const std::string& mode, int64_t o, int64_t begin, int64_t n) {
  return pad::Source(pad::ModeOf(mode), o, begin, n);
}

}  // namespace mixtrain::cpu_movement
