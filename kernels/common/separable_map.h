// The adjoint of a separable linear map (each output coordinate of each axis reads a few input
// coordinates with weights: Pad, Resize) as the CUDA kernels apply it (kernels/cuda/pad_slice.cu,
// AdjointKernel): per axis, the list of (output coordinate, weight) reading each input coordinate,
// packed as offsets into one list. kernels/cuda/pad_slice_kernels.cc and resize_kernels.cc build
// their tables with it and the GPU kernel sums with AdjointAt; tests/kernels/separable_map_test.cc
// runs the same on the CPU (ApplyAdjoint) against the CPU kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/half.h"  // MT_HD
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

// Element i of dX: the sum over the product of its axes' reader lists of the weights' product
// times dY there. `load(off)` reads dY[off] as float. The GPU's AdjointKernel
// (kernels/cuda/pad_slice.cu) calls this per element; ApplyAdjoint below, on the host, for tests.
// rank <= 8; `weights` null means every weight is 1.
template <typename Load>
MT_HD float AdjointAt(int rank, const int64_t* dy_dims, const int64_t* dx_dims, const int64_t* base,
                      const int64_t* offsets, const int64_t* lists, const float* weights, int64_t i, Load load) {
  int64_t lo[8], hi[8], at[8];
  bool any = true;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t k = i % dx_dims[d];
    i /= dx_dims[d];
    lo[d] = offsets[base[d] + k];
    hi[d] = offsets[base[d] + k + 1];
    at[d] = lo[d];
    any &= hi[d] > lo[d];
  }
  float s = 0;
  while (any) {  // an odometer over the lists
    int64_t off = 0;
    float w = 1;
    for (int d = 0; d < rank; ++d) {
      off = off * dy_dims[d] + lists[at[d]];
      if (weights != nullptr) w *= weights[at[d]];
    }
    s += w * load(off);
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++at[d] < hi[d]) break;
      at[d] = lo[d];
    }
    any = d >= 0;
  }
  return s;
}

// Reads element off of a float array (AdjointAt's `load` for float dY).
struct FloatLoad {
  const float* p;
  MT_HD float operator()(int64_t off) const { return p[off]; }
};

// dx (dims: the axes' in_len) from dy (dims: their out_len), element by element with AdjointAt.
inline void ApplyAdjoint(const Adjoint& a, const std::vector<int64_t>& dy_dims, const std::vector<int64_t>& dx_dims,
                         const float* dy, float* dx) {
  int64_t n = 1;
  for (int64_t d : dx_dims) n *= d;
  for (int64_t i = 0; i < n; ++i)
    dx[i] = AdjointAt(static_cast<int>(dx_dims.size()), dy_dims.data(), dx_dims.data(), a.base.data(),
                      a.offsets.data(), a.lists.data(), a.weights.empty() ? nullptr : a.weights.data(), i,
                      FloatLoad{dy});
}

}  // namespace mixtrain::sep
