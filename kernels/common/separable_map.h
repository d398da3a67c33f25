// The adjoint of a separable linear map (each output coordinate of each axis reads a few input
// coordinates with weights: Pad, Resize) as the CUDA kernels apply it (kernels/cuda/pad_slice.cu,
// AdjointKernel): per axis, the list of (output coordinate, weight) reading each input coordinate,
// packed as offsets into one list. Plain C++: kernels/cuda/pad_slice_kernels.cc and
// resize_kernels.cc build their tables with it, and tests/kernels/separable_map_test.cc carries the
// tables out on the CPU (ApplyAdjoint, the GPU kernel's loop) against the CPU kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/pad_source.h"

namespace mixtrain::sep {

// One axis: output coordinate o reads input idx[o * width + k] (< 0 or >= in_len: nothing) with
// weight w[o * width + k] (w empty: 1).
struct Axis {
  int64_t in_len = 0;
  int width = 1;
  std::vector<int64_t> idx;
  std::vector<double> w;
  int64_t out_len() const { return width > 0 ? static_cast<int64_t>(idx.size()) / width : 0; }
};

// The packed readers of every axis: for axis d and input coordinate k, the readers are entries
// offsets[base[d] + k] .. offsets[base[d] + k + 1] of `lists` (output coordinates) and `weights`.
struct Adjoint {
  std::vector<int64_t> base, offsets, lists;
  std::vector<float> weights;  // empty when every weight is 1
};

// Pad's axes: output coordinate o of dim d reads pad::Source(mode, o, begin_d, n_d), where dY has
// `dy_dims` and `pads` = [begin_0.., end_0..] (n_d = dy_d - begin_d - end_d, the input's length).
inline std::vector<Axis> PadAxes(int mode, const std::vector<int64_t>& dy_dims, const std::vector<int64_t>& pads) {
  const size_t r = dy_dims.size();
  std::vector<Axis> axes(r);
  for (size_t d = 0; d < r; ++d) {
    axes[d].in_len = dy_dims[d] - pads[d] - pads[r + d];
    for (int64_t o = 0; o < dy_dims[d]; ++o) axes[d].idx.push_back(pad::Source(mode, o, pads[d], axes[d].in_len));
  }
  return axes;
}

// Readers in output order; zero weights are left out.
inline Adjoint BuildAdjoint(const std::vector<Axis>& axes) {
  Adjoint a;
  bool weighted = false;
  for (const Axis& ax : axes) weighted |= !ax.w.empty();
  for (const Axis& ax : axes) {
    a.base.push_back(static_cast<int64_t>(a.offsets.size()));
    std::vector<std::vector<std::pair<int64_t, double>>> readers(ax.in_len);
    for (int64_t o = 0; o < ax.out_len(); ++o)
      for (int k = 0; k < ax.width; ++k) {
        const int64_t j = o * ax.width + k, i = ax.idx[j];
        const double w = ax.w.empty() ? 1.0 : ax.w[j];
        if (i >= 0 && i < ax.in_len && w != 0) readers[i].push_back({o, w});
      }
    for (const auto& r : readers) {
      a.offsets.push_back(static_cast<int64_t>(a.lists.size()));
      for (const auto& [o, w] : r) {
        a.lists.push_back(o);
        if (weighted) a.weights.push_back(static_cast<float>(w));
      }
    }
    a.offsets.push_back(static_cast<int64_t>(a.lists.size()));
  }
  return a;
}

// dx (dims: the axes' in_len) from dy (dims: their out_len), element by element as the GPU's
// AdjointKernel does: each dx element sums over the product of its axes' reader lists.
inline void ApplyAdjoint(const Adjoint& a, const std::vector<int64_t>& dy_dims, const std::vector<int64_t>& dx_dims,
                         const float* dy, float* dx) {
  const int rank = static_cast<int>(dx_dims.size());
  int64_t n = 1;
  for (int64_t d : dx_dims) n *= d;
  std::vector<int64_t> lo(rank), hi(rank), at(rank);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i;
    bool any = true;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t k = rem % dx_dims[d];
      rem /= dx_dims[d];
      lo[d] = a.offsets[a.base[d] + k];
      hi[d] = a.offsets[a.base[d] + k + 1];
      at[d] = lo[d];
      any &= hi[d] > lo[d];
    }
    float s = 0;
    while (any) {
      int64_t off = 0;
      float w = 1;
      for (int d = 0; d < rank; ++d) {
        off = off * dy_dims[d] + a.lists[at[d]];
        if (!a.weights.empty()) w *= a.weights[at[d]];
      }
      s += w * dy[off];
      int d = rank - 1;
      for (; d >= 0; --d) {
        if (++at[d] < hi[d]) break;
        at[d] = lo[d];
      }
      any = d >= 0;
    }
    dx[i] = s;
  }
}

}  // namespace mixtrain::sep
