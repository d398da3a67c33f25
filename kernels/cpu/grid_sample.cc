// CPU kernel for GridSample (opset 16, 4-D): samples X [N, C, H, W] at the normalized (x, y)
// points of grid [N, Ho, Wo, 2] with nearest, bilinear or bicubic interpolation and zeros,
// border or reflection padding. Follows ONNX's reference (onnx/reference/ops/op_grid_sample.py)
// step for step: denormalize, clamp or reflect the point, then read the taps with the padding
// rule. Values go through double.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {
namespace {

struct Sampler {
  const double* img;  // one [H, W] plane
  int64_t h, w;
  bool align_corners;
  std::string padding;

  // The valid coordinate range of an axis of `len` pixels, for reflection.
  double Lo() const { return align_corners ? 0 : -0.5; }
  double Hi(int64_t len) const { return align_corners ? len - 1 : len - 0.5; }

  static double Reflect(double x, double lo, double hi) {
    const double range = hi - lo;
    if (range <= 0) return lo;
    if (x < lo) {
      const double dx = lo - x;
      const int64_t n = static_cast<int64_t>(dx / range);
      const double r = dx - n * range;
      return n % 2 == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
      const double dx = x - hi;
      const int64_t n = static_cast<int64_t>(dx / range);
      const double r = dx - n * range;
      return n % 2 == 0 ? hi - r : lo + r;
    }
    return x;
  }

  double Pixel(int64_t r, int64_t c) const {
    if (padding == "zeros") return (r >= 0 && r < h && c >= 0 && c < w) ? img[r * w + c] : 0.0;
    if (padding == "border") {
      r = std::min<int64_t>(std::max<int64_t>(r, 0), h - 1);
      c = std::min<int64_t>(std::max<int64_t>(c, 0), w - 1);
    } else {  // reflection
      c = static_cast<int64_t>(Reflect(static_cast<double>(c), Lo(), Hi(w)));
      r = static_cast<int64_t>(Reflect(static_cast<double>(r), Lo(), Hi(h)));
    }
    return img[r * w + c];
  }
};

double Denormalize(double n, int64_t len, bool align_corners) {
  return align_corners ? (n + 1) / 2 * (len - 1) : ((n + 1) * len - 1) / 2;
}

void CubicCoeffs(double t, double c[4]) {
  const double a = -0.75;
  auto near = [a](double v) { return ((a + 2) * v - (a + 3)) * v * v + 1; };
  auto far = [a](double v) { return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a; };
  c[0] = far(t + 1);
  c[1] = near(t);
  c[2] = near(1 - t);
  c[3] = far(2 - t);
}

absl::Status GridSampleKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* grid = ctx.input(1);
  TensorView* y = ctx.output(0);
  if (x == nullptr || grid == nullptr || y == nullptr || x->rank() != 4 || grid->rank() != 4 ||
      grid->dims[3] != 2 || grid->dims[0] != x->dims[0])
    return ctx.Error("needs X [N, C, H, W] and grid [N, Ho, Wo, 2]");
  const std::string mode = ctx.node().attr_string("mode", "bilinear");
  const std::string padding = ctx.node().attr_string("padding_mode", "zeros");
  const bool align = ctx.node().attr_int("align_corners", 0) != 0;
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return ctx.Error(absl::StrCat("unsupported mode '", mode, "'"));
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    return ctx.Error(absl::StrCat("unsupported padding_mode '", padding, "'"));
  const int64_t n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
  const int64_t ho = grid->dims[1], wo = grid->dims[2];
  if (y->numel() != n * c * ho * wo) return ctx.Error("output size does not match the grid");
  std::vector<double> xv(x->numel()), gv(grid->numel()), out(y->numel());
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, x->dtype, x->data, DType::kF64, xv.data(), x->numel()));
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, grid->dtype, grid->data, DType::kF64, gv.data(), grid->numel()));
  ParallelFor(n * c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const int64_t b = nc / c;
      Sampler s{xv.data() + nc * h * w, h, w, align, padding};
      for (int64_t i = 0; i < ho * wo; ++i) {
        double px = Denormalize(gv[(b * ho * wo + i) * 2], w, align);
        double py = Denormalize(gv[(b * ho * wo + i) * 2 + 1], h, align);
        if (mode == "nearest") {
          px = std::nearbyint(px);
          py = std::nearbyint(py);
        }
        if (padding == "border") {
          px = std::min(std::max(px, 0.0), static_cast<double>(w - 1));
          py = std::min(std::max(py, 0.0), static_cast<double>(h - 1));
        } else if (padding == "reflection") {
          px = Sampler::Reflect(px, s.Lo(), s.Hi(w));
          py = Sampler::Reflect(py, s.Lo(), s.Hi(h));
        }
        double v = 0;
        if (mode == "nearest") {
          v = s.Pixel(static_cast<int64_t>(py), static_cast<int64_t>(px));
        } else if (mode == "bilinear") {
          const double x1 = std::floor(px), y1 = std::floor(py), dx = px - x1, dy = py - y1;
          const int64_t c1 = static_cast<int64_t>(x1), r1 = static_cast<int64_t>(y1);
          v = s.Pixel(r1, c1) * (1 - dx) * (1 - dy) + s.Pixel(r1, c1 + 1) * dx * (1 - dy) +
              s.Pixel(r1 + 1, c1) * (1 - dx) * dy + s.Pixel(r1 + 1, c1 + 1) * dx * dy;
        } else {
          const double x0 = std::floor(px) - 1, y0 = std::floor(py) - 1;
          double cx[4], cy[4];
          CubicCoeffs(px - x0 - 1, cx);
          CubicCoeffs(py - y0 - 1, cy);
          for (int r = 0; r < 4; ++r)
            for (int k = 0; k < 4; ++k)
              v += cy[r] * cx[k] * s.Pixel(static_cast<int64_t>(y0) + r, static_cast<int64_t>(x0) + k);
        }
        out[nc * ho * wo + i] = v;
      }
    }
  });
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), y->dtype, y->data, y->numel());
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grid_sample) {
  r.Register({"GridSample", "", DeviceType::kCPU,
              {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}, 0, FnKernel(GridSampleKernel)});
}

}  // namespace mixtrain::cpu
