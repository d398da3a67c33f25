// Index arithmetic of Resize shared by the forward kernels (kernels/cpu/resize.cc,
// kernels/cuda/resize_kernels.cc) and their adjoint ai.mixtrain.ResizeGrad
// (kernels/cpu/grad_shape_kernels.cc), so the taps the gradient scatters to are exactly the taps
// the forward read.
//
// Interpolation is separable: each output coordinate of each axis maps to a few input taps with
// weights, computed once per axis; an output element is the weighted sum over the product of its
// axes' taps. The tap rules follow ONNX's reference (onnx/reference/ops/op_resize.py): the
// original coordinate x is split as x = i + r with r in (0, 1], taps i-1..i+2 (cubic) or i, i+1,
// out-of-range taps read the edge element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/elementwise.h"
#include "kernels/common/separable_map.h"
#include "kernels/registry.h"

namespace mixtrain::resize {

struct Taps {
  std::vector<int64_t> idx;   // per output coordinate: `width` input indices, clamped
  std::vector<double> w;      // and their weights
  std::vector<bool> outside;  // tf_crop_and_resize: the coordinate maps outside the input
  int width = 1;
};

struct Params {
  std::string mode, coord, nearest;
  double cubic_a = -0.75, extrapolation = 0;
  bool exclude_outside = false;
};

// The node's attributes; `legacy` (Upsample, Resize-10) fixes the coordinate mode to asymmetric
// and nearest rounding to floor, as those versions had no attributes for them.
inline absl::StatusOr<Params> ParamsOf(const KernelContext& ctx, bool legacy) {
  const Node& node = ctx.node();
  Params p;
  p.mode = node.attr_string("mode", "nearest");
  p.coord = legacy ? "asymmetric" : node.attr_string("coordinate_transformation_mode", "half_pixel");
  p.nearest = legacy ? "floor" : node.attr_string("nearest_mode", "round_prefer_floor");
  p.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  p.extrapolation = node.attr_float("extrapolation_value", 0.0f);
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic")
    return ctx.Error(absl::StrCat("unsupported mode '", p.mode, "'"));
  return p;
}

// Maps output coordinate x of an axis of input length `len` resized by `scale` to the input.
inline double Original(const Params& p, double x, int64_t len, double scale, double roi_start,
                       double roi_end) {
  const double out_len = scale * static_cast<double>(len);  // as the reference: not rounded
  if (p.coord == "align_corners") return out_len == 1 ? 0 : x * (len - 1) / (out_len - 1);
  if (p.coord == "asymmetric") return x / scale;
  if (p.coord == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (p.coord == "pytorch_half_pixel") return out_len == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (p.coord == "tf_crop_and_resize") {
    const double span = (roi_end - roi_start) * (len - 1);
    return roi_start * (len - 1) + (out_len == 1 ? span / 2 : x * span / (out_len - 1));
  }
  return (x + 0.5) / scale - 0.5;  // half_pixel
}

// Weights of the taps for the fractional part r in (0, 1].
inline std::vector<double> Coeffs(const Params& p, double r) {
  if (p.mode == "nearest") {
    if (r == 1) return {0, 1};
    if (p.nearest == "floor") return {1, 0};
    if (p.nearest == "ceil") return {0, 1};
    if (p.nearest == "round_prefer_ceil") return {r < 0.5 ? 1.0 : 0.0, r >= 0.5 ? 1.0 : 0.0};
    return {r <= 0.5 ? 1.0 : 0.0, r > 0.5 ? 1.0 : 0.0};  // round_prefer_floor
  }
  if (p.mode == "linear") return {1 - r, r};
  const double a = p.cubic_a;
  auto near = [a](double t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };           // |t| <= 1
  auto far = [a](double t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };      // 1 < |t| < 2
  return {far(r + 1), near(r), near(1 - r), far(2 - r)};
}

inline Taps AxisTaps(const Params& p, int64_t len, int64_t out_len, double scale,
                     double roi_start, double roi_end) {
  Taps t;
  t.width = p.mode == "cubic" ? 4 : 2;
  for (int64_t x = 0; x < out_len; ++x) {
    const double xo = Original(p, static_cast<double>(x), len, scale, roi_start, roi_end);
    t.outside.push_back(p.coord == "tf_crop_and_resize" && (xo < 0 || xo > len - 1));
    const double i = std::ceil(xo) - 1;  // x = i + r, r in (0, 1]
    std::vector<double> c = Coeffs(p, xo - i);
    const int64_t first = static_cast<int64_t>(i) - (t.width == 4 ? 1 : 0);
    if (p.exclude_outside) {
      double sum = 0;
      for (int k = 0; k < t.width; ++k) {
        if (first + k < 0 || first + k >= len) c[k] = 0;
        sum += c[k];
      }
      for (double& v : c) v = sum != 0 ? v / sum : 0;
    }
    for (int k = 0; k < t.width; ++k) {
      t.idx.push_back(std::min<int64_t>(std::max<int64_t>(first + k, 0), len - 1));
      t.w.push_back(c[k]);
    }
  }
  return t;
}

// A tensor's elements as doubles (empty for an omitted input).
inline absl::StatusOr<std::vector<double>> Doubles(const KernelContext& ctx, const TensorView* t) {
  std::vector<double> v;
  if (t == nullptr) return v;
  v.resize(t->numel());
  auto read = [&](auto tag) {
    using S = decltype(tag);
    const S* p = static_cast<const S*>(t->data);
    for (int64_t i = 0; i < t->numel(); ++i) v[i] = static_cast<double>(ew::Io<S>::Load(p[i]));
  };
  switch (t->dtype) {
    case DType::kF32: read(float{}); break;
    case DType::kF64: read(double{}); break;
    case DType::kF16: read(ew::f16{}); break;
    case DType::kBF16: read(ew::bf16{}); break;
    case DType::kI32: read(int32_t{}); break;
    case DType::kI64: read(int64_t{}); break;
    default: return ctx.Error(absl::StrCat("a ", DTypeName(t->dtype), " input where numbers are read"));
  }
  return v;
}

// The taps of every axis resizing `in` to `out`. Scales come from `scales_in` or, when that is
// absent or empty, the node's `scales` attribute (Upsample-7); with neither, sizes decided the
// output and scale = out / in. `roi_in` (2 * rank entries) serves tf_crop_and_resize.
inline absl::StatusOr<std::vector<Taps>> AllTaps(const KernelContext& ctx, const Params& p,
                                                 const std::vector<int64_t>& in,
                                                 const std::vector<int64_t>& out,
                                                 const TensorView* scales_in,
                                                 const TensorView* roi_in) {
  MT_ASSIGN_OR_RETURN(std::vector<double> scales, Doubles(ctx, scales_in));
  if (scales.empty() && ctx.node().has_attr("scales"))
    for (float s : ctx.node().attr_floats("scales")) scales.push_back(s);
  MT_ASSIGN_OR_RETURN(std::vector<double> roi, Doubles(ctx, roi_in));
  const int64_t rank = static_cast<int64_t>(in.size());
  if (static_cast<int64_t>(out.size()) != rank) return ctx.Error("input and output ranks differ");
  if (!scales.empty() && static_cast<int64_t>(scales.size()) != rank)
    return ctx.Error("scales must have one entry per dim");
  const bool has_roi = static_cast<int64_t>(roi.size()) == 2 * rank;
  std::vector<Taps> taps(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (in[d] == 0 && out[d] > 0) return ctx.Error("cannot resize an empty dim");
    const double scale = scales.empty() ? static_cast<double>(out[d]) / in[d] : scales[d];
    taps[d] = AxisTaps(p, in[d], out[d], scale, has_roi ? roi[d] : 0, has_roi ? roi[rank + d] : 1);
  }
  return taps;
}

// The axes of ResizeGrad's adjoint (kernels/common/separable_map.h) for input dims `in`: the taps,
// with coordinates outside the crop box weighing 0 (they read the extrapolation constant).
inline std::vector<sep::Axis> AdjointAxes(const std::vector<Taps>& taps, const std::vector<int64_t>& in) {
  std::vector<sep::Axis> axes(taps.size());
  for (size_t d = 0; d < taps.size(); ++d) {
    const Taps& t = taps[d];
    axes[d].in_len = in[d];
    axes[d].width = t.width;
    axes[d].idx = t.idx;
    axes[d].w = t.w;
    for (size_t o = 0; o < t.outside.size(); ++o)
      if (t.outside[o])
        for (int k = 0; k < t.width; ++k) axes[d].w[o * t.width + k] = 0;
  }
  return axes;
}

}  // namespace mixtrain::resize
