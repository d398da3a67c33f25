// CPU kernel for Resize (opsets 10-13+) and its predecessor Upsample (7-9): nearest (four
// rounding modes), n-linear and cubic interpolation under every coordinate transformation mode,
// with exclude_outside and tf_crop_and_resize's extrapolation value.
//
// Interpolation is separable: each output coordinate of each axis maps to a few input taps with
// weights, computed once per axis; an output element is the weighted sum over the product of its
// axes' taps. The tap rules follow ONNX's reference (onnx/reference/ops/op_resize.py): the
// original coordinate x is split as x = i + r with r in (0, 1], taps i-1..i+2 (cubic) or i, i+1,
// out-of-range taps read the edge element. Values go through double, once converted.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

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

// Maps output coordinate x of an axis of input length `len` resized by `scale` to the input.
double Original(const Params& p, double x, int64_t len, double scale, double roi_start,
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
std::vector<double> Coeffs(const Params& p, double r) {
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

Taps AxisTaps(const Params& p, int64_t len, int64_t out_len, double scale, double roi_start,
              double roi_end) {
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

absl::StatusOr<std::vector<double>> Doubles(const KernelContext& ctx, const TensorView* t) {
  std::vector<double> v;
  if (t == nullptr) return v;
  v.resize(t->numel());
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, t->dtype, t->data, DType::kF64, v.data(), t->numel()));
  return v;
}

absl::Status ResizeKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr || x->rank() != y->rank())
    return ctx.Error("needs X and an output of X's rank");
  const Node& node = ctx.node();
  const bool upsample = node.op_type() == "Upsample";
  const bool v10 = upsample || (ctx.opset() > 0 && ctx.opset() < 11);
  Params p;
  p.mode = node.attr_string("mode", "nearest");
  p.coord = v10 ? "asymmetric" : node.attr_string("coordinate_transformation_mode", "half_pixel");
  // Upsample and Resize-10 pick input[floor(x / scale)] for nearest.
  p.nearest = v10 ? "floor" : node.attr_string("nearest_mode", "round_prefer_floor");
  p.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  p.extrapolation = node.attr_float("extrapolation_value", 0.0f);
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic")
    return ctx.Error(absl::StrCat("unsupported mode '", p.mode, "'"));
  // Scales: the attribute (Upsample-7), input 1 (Upsample-9, Resize-10) or input 2; when
  // absent or empty, sizes decided the output and scale = out / in.
  const TensorView* scales_in = v10 ? ctx.input(1) : ctx.input(2);
  MT_ASSIGN_OR_RETURN(std::vector<double> scales, Doubles(ctx, scales_in));
  if (scales.empty() && node.has_attr("scales"))
    for (float s : node.attr_floats("scales")) scales.push_back(s);
  MT_ASSIGN_OR_RETURN(std::vector<double> roi, Doubles(ctx, v10 ? nullptr : ctx.input(1)));
  const int64_t rank = x->rank();
  if (!scales.empty() && static_cast<int64_t>(scales.size()) != rank)
    return ctx.Error("scales must have one entry per dim");
  std::vector<Taps> taps(rank);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t len = x->dims[d], out = y->dims[d];
    if (len == 0 && out > 0) return ctx.Error("cannot resize an empty dim");
    const double scale = scales.empty() ? static_cast<double>(out) / len : scales[d];
    const bool has_roi = static_cast<int64_t>(roi.size()) == 2 * rank;
    taps[d] = AxisTaps(p, len, out, scale, has_roi ? roi[d] : 0, has_roi ? roi[rank + d] : 1);
  }
  MT_ASSIGN_OR_RETURN(std::vector<double> in, Doubles(ctx, x));
  std::vector<int64_t> stride(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * x->dims[d + 1];
  std::vector<double> out(y->numel());
  ParallelFor(y->numel(), 1024, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> c(rank), k(rank);
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t d = rank - 1, r = i; d >= 0; --d) {
        c[d] = r % y->dims[d];
        r /= y->dims[d];
      }
      bool outside = false;
      for (int64_t d = 0; d < rank; ++d) outside = outside || taps[d].outside[c[d]];
      if (outside) {
        out[i] = p.extrapolation;
        continue;
      }
      // Sum over every combination of the axes' taps (an odometer over k).
      double sum = 0;
      std::fill(k.begin(), k.end(), 0);
      while (true) {
        double w = 1;
        int64_t src = 0;
        for (int64_t d = 0; d < rank && w != 0; ++d) {
          const Taps& t = taps[d];
          w *= t.w[c[d] * t.width + k[d]];
          src += t.idx[c[d] * t.width + k[d]] * stride[d];
        }
        if (w != 0) sum += w * in[src];
        int64_t d = rank - 1;
        while (d >= 0 && ++k[d] == taps[d].width) k[d--] = 0;
        if (d < 0) break;
      }
      out[i] = sum;
    }
  });
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), y->dtype, y->data, y->numel());
}

}  // namespace

MT_REGISTER_KERNELS(cpu_extra_resize) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> t = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                                DType::kI8,  DType::kI32, DType::kI64,  DType::kU8};
  r.Register({"Resize", "", cpu, t, 0, FnKernel(ResizeKernel)});
  r.Register({"Upsample", "", cpu, t, 0, FnKernel(ResizeKernel)});
}

}  // namespace mixtrain::cpu
