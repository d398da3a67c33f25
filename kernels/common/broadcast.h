// Numpy-style broadcasting of concrete dims, shared by every kernel that broadcasts (elementwise
// ops, Expand, Where, losses) and by both backends. MakeBroadcastLayout drops size-1 output dims
// and merges adjacent dims that are contiguous in every operand, so [N,C,H,W] + [C,1,1] becomes a
// rank-2 loop ([N*C, H*W], bias stride [1, 0]) and same-shape operands become one flat dim.
// BroadcastLayout is a fixed-size POD so it can be passed by value to a CUDA kernel.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/half.h"

namespace mixtrain {

inline constexpr int kMaxBroadcastRank = 8;    // after merging dims
inline constexpr int kMaxBroadcastInputs = 4;

// The numpy broadcast of two dim lists, or an error naming both.
absl::StatusOr<std::vector<int64_t>> BroadcastDims(std::span<const int64_t> a,
                                                   std::span<const int64_t> b);

// Element strides of a dense row-major tensor with dims `in`, read as if broadcast to `out`:
// right-aligned, 0 where `in` lacks the dim or has size 1. Requires `in` to broadcast to `out`.
std::vector<int64_t> BroadcastStrides(std::span<const int64_t> in, std::span<const int64_t> out);

struct BroadcastLayout {
  int rank = 0;        // merged rank; 0 when the output has one element (or none)
  int num_inputs = 0;
  int64_t numel = 0;   // output elements
  int64_t dims[kMaxBroadcastRank] = {};
  int64_t strides[kMaxBroadcastInputs][kMaxBroadcastRank] = {};

  // Element offset into input `in` of output element `out_index` (CUDA threads use this).
  MT_HD int64_t InputOffset(int in, int64_t out_index) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (out_index % dims[d]) * strides[in][d];
      out_index /= dims[d];
    }
    return off;
  }
  // Length and per-input stride (0 or 1) of the innermost dim: the CPU's row loop.
  int64_t inner() const { return rank == 0 ? 1 : dims[rank - 1]; }
  int64_t inner_stride(int in) const { return rank == 0 ? 0 : strides[in][rank - 1]; }
};

// Layout of inputs (each of which must broadcast to `out`) read at every output element.
// Fails when an input does not broadcast to `out` or too many dims remain after merging.
// Allocates nothing when it succeeds (kernels call it on every run).
absl::StatusOr<BroadcastLayout> MakeBroadcastLayout(std::span<const std::span<const int64_t>> inputs,
                                                    std::span<const int64_t> out);
inline absl::StatusOr<BroadcastLayout> MakeBroadcastLayout(const std::vector<std::span<const int64_t>>& inputs,
                                                           std::span<const int64_t> out) {
  return MakeBroadcastLayout(std::span<const std::span<const int64_t>>(inputs), out);
}

// Walks output elements [begin, end) row by row: calls fn(out_offset, in_offsets, len) for each
// piece of an innermost row, where in_offsets[i] is input i's element offset at out_offset and
// input i advances by layout.inner_stride(i) per element. Host only.
template <typename Fn>
void ForEachRow(const BroadcastLayout& l, int64_t begin, int64_t end, const Fn& fn) {
  if (begin >= end) return;
  int64_t offs[kMaxBroadcastInputs] = {};
  if (l.rank == 0) {
    fn(begin, offs, end - begin);
    return;
  }
  const int r = l.rank;
  const int64_t inner = l.dims[r - 1];
  // Multi-index of `begin` (the row and the position within it).
  int64_t idx[kMaxBroadcastRank] = {};
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % l.dims[d];
    rem /= l.dims[d];
  }
  for (int i = 0; i < l.num_inputs; ++i)
    for (int d = 0; d < r; ++d) offs[i] += idx[d] * l.strides[i][d];
  int64_t pos = begin;
  while (pos < end) {
    int64_t len = inner - idx[r - 1];
    if (len > end - pos) len = end - pos;
    fn(pos, offs, len);
    pos += len;
    if (pos >= end) break;
    // Advance to the start of the next row: carry through the outer dims.
    for (int i = 0; i < l.num_inputs; ++i) offs[i] -= idx[r - 1] * l.strides[i][r - 1];
    idx[r - 1] = 0;
    for (int d = r - 2; d >= 0; --d) {
      ++idx[d];
      for (int i = 0; i < l.num_inputs; ++i) offs[i] += l.strides[i][d];
      if (idx[d] < l.dims[d]) break;
      for (int i = 0; i < l.num_inputs; ++i) offs[i] -= idx[d] * l.strides[i][d];
      idx[d] = 0;
    }
  }
}

}  // namespace mixtrain
