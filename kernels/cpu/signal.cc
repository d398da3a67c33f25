// CPU kernels for the signal windows (HannWindow, HammingWindow, BlackmanWindow), DFT, STFT and Det
// (the determinant of each trailing [M, M] matrix, by LU with partial pivoting in double).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

// w[n] = sum_k a_k cos(2 pi k n / N) with N = size (periodic) or size - 1 (symmetric).
absl::Status Window(KernelContext& ctx, std::initializer_list<double> a) {
  const TensorView* size_in = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (size_in == nullptr || y == nullptr || size_in->numel() != 1) return ctx.Error("needs a scalar size");
  const int64_t size = IntAt(*size_in, 0);
  if (y->numel() != size) return ctx.Error("output size does not match `size`");
  const bool periodic = ctx.node().attr_int("periodic", 1) != 0;
  const double n_den = periodic ? size : size - 1;
  std::vector<double> w(size);
  for (int64_t n = 0; n < size; ++n) {
    double v = 0;
    int k = 0;
    for (double ak : a) {
      v += ak * (k == 0 ? 1.0 : std::cos(2 * std::numbers::pi * k * n / n_den));
      ++k;
    }
    w[n] = v;
  }
  return cpu_ew::CastBuffer(ctx, DType::kF64, w.data(), y->dtype, y->data, size);
}

absl::Status HannKernel(KernelContext& ctx) { return Window(ctx, {0.5, -0.5}); }
absl::Status HammingKernel(KernelContext& ctx) { return Window(ctx, {25.0 / 46, -21.0 / 46}); }
absl::Status BlackmanKernel(KernelContext& ctx) { return Window(ctx, {0.42, -0.5, 0.08}); }

absl::Status DetKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr || x->rank() < 2 || x->dims.back() != x->dims[x->rank() - 2])
    return ctx.Error("input must be [..., M, M]");
  const int64_t m = x->dims.back();
  if (y->numel() * m * m != x->numel()) return ctx.Error("output size does not match the input");
  std::vector<double> a(x->numel());
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, x->dtype, x->data, DType::kF64, a.data(), x->numel()));
  std::vector<double> det(y->numel());
  for (int64_t b = 0; b < y->numel(); ++b) {
    double* mat = a.data() + b * m * m;
    double d = 1;
    for (int64_t c = 0; c < m && d != 0; ++c) {
      int64_t piv = c;
      for (int64_t r = c + 1; r < m; ++r)
        if (std::fabs(mat[r * m + c]) > std::fabs(mat[piv * m + c])) piv = r;
      if (mat[piv * m + c] == 0) {
        d = 0;
        break;
      }
      if (piv != c) {
        for (int64_t k = 0; k < m; ++k) std::swap(mat[c * m + k], mat[piv * m + k]);
        d = -d;
      }
      d *= mat[c * m + c];
      for (int64_t r = c + 1; r < m; ++r) {
        const double f = mat[r * m + c] / mat[c * m + c];
        for (int64_t k = c; k < m; ++k) mat[r * m + k] -= f * mat[c * m + k];
      }
    }
    det[b] = d;
  }
  return cpu_ew::CastBuffer(ctx, DType::kF64, det.data(), y->dtype, y->data, y->numel());
}

// DFT (opset 17): input [..., n, ..., 1 or 2] (real, or complex as re/im pairs), transformed
// along `axis` with length dft_length (truncated or zero-padded), inverse scaled by 1/N, and
// onesided keeping the first N/2 + 1 bins. A direct O(N^2) sum in double.
absl::Status DftKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr || x->rank() < 3 || (x->dims.back() != 1 && x->dims.back() != 2))
    return ctx.Error("input must be [batch, ..., 1 or 2]");
  const int64_t axis = ctx.node().attr_int("axis", 1);
  if (axis < 1 || axis >= x->rank() - 1) return ctx.Error(absl::StrCat("axis ", axis, " is not a signal dim"));
  const int64_t n_in = x->dims[axis];
  const int64_t n = ctx.input(1) != nullptr ? IntAt(*ctx.input(1), 0) : n_in;
  const bool inverse = ctx.node().attr_int("inverse", 0) != 0;
  const bool onesided = ctx.node().attr_int("onesided", 0) != 0;
  const int64_t bins = onesided ? n / 2 + 1 : n;
  const bool complex_in = x->dims.back() == 2;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x->dims[d];
  for (int64_t d = axis + 1; d < x->rank() - 1; ++d) inner *= x->dims[d];
  if (y->numel() != outer * bins * inner * 2) return ctx.Error("output size does not match dft_length");
  std::vector<double> in(x->numel()), out(y->numel());
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, x->dtype, x->data, DType::kF64, in.data(), x->numel()));
  const int64_t ce = complex_in ? 2 : 1;
  const double sign = inverse ? 1 : -1;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t k = 0; k < bins; ++k) {
        double re = 0, im = 0;
        for (int64_t t = 0; t < std::min(n, n_in); ++t) {
          const double* v = in.data() + ((o * n_in + t) * inner + i) * ce;
          const double a = sign * 2 * std::numbers::pi * static_cast<double>((k * t) % n) / n;
          const double vr = v[0], vi = complex_in ? v[1] : 0;
          re += vr * std::cos(a) - vi * std::sin(a);
          im += vr * std::sin(a) + vi * std::cos(a);
        }
        double* w = out.data() + ((o * bins + k) * inner + i) * 2;
        w[0] = inverse ? re / n : re;
        w[1] = inverse ? im / n : im;
      }
    }
  }
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), y->dtype, y->data, y->numel());
}

// STFT (opset 17): frames of frame_length (from the window or input 3) every frame_step samples,
// each multiplied by the window (default all ones) and transformed: [batch, frames, bins, 2].
absl::Status StftKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* step_t = ctx.input(1);
  const TensorView* window_t = ctx.input(2);
  const TensorView* len_t = ctx.input(3);
  TensorView* y = ctx.output(0);
  if (x == nullptr || step_t == nullptr || y == nullptr || x->rank() != 3 || y->rank() != 4)
    return ctx.Error("needs signal [batch, length, 1 or 2] and frame_step");
  const int64_t batch = x->dims[0], len = x->dims[1], ce = x->dims[2];
  const int64_t step = IntAt(*step_t, 0);
  const int64_t frame = len_t != nullptr ? IntAt(*len_t, 0) : (window_t ? window_t->numel() : 0);
  const int64_t frames = y->dims[1], bins = y->dims[2];
  if (step <= 0 || frame <= 0 || (window_t != nullptr && window_t->numel() != frame) ||
      (frames - 1) * step + frame > len || y->dims[0] != batch)
    return ctx.Error("frame_step, window and frame_length do not fit the signal");
  std::vector<double> in(x->numel()), win(frame, 1.0), out(y->numel());
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, x->dtype, x->data, DType::kF64, in.data(), x->numel()));
  if (window_t != nullptr)
    MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, window_t->dtype, window_t->data, DType::kF64, win.data(), frame));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t f = 0; f < frames; ++f)
      for (int64_t k = 0; k < bins; ++k) {
        double re = 0, im = 0;
        for (int64_t t = 0; t < frame; ++t) {
          const double* v = in.data() + (b * len + f * step + t) * ce;
          const double a = -2 * std::numbers::pi * static_cast<double>((k * t) % frame) / frame;
          const double vr = v[0] * win[t], vi = ce == 2 ? v[1] * win[t] : 0;
          re += vr * std::cos(a) - vi * std::sin(a);
          im += vr * std::sin(a) + vi * std::cos(a);
        }
        double* w = out.data() + ((b * frames + f) * bins + k) * 2;
        w[0] = re;
        w[1] = im;
      }
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), y->dtype, y->data, y->numel());
}

}  // namespace

MT_REGISTER_KERNELS(cpu_signal) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> ints = {DType::kI32, DType::kI64};
  r.Register({"HannWindow", "", cpu, ints, 0, FnKernel(HannKernel)});
  r.Register({"HammingWindow", "", cpu, ints, 0, FnKernel(HammingKernel)});
  r.Register({"BlackmanWindow", "", cpu, ints, 0, FnKernel(BlackmanKernel)});
  r.Register({"DFT", "", cpu, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}, 0,
              FnKernel(DftKernel)});
  r.Register({"STFT", "", cpu, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}, 0,
              FnKernel(StftKernel)});
  r.Register({"Det", "", cpu, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}, 0,
              FnKernel(DetKernel)});
}

}  // namespace mixtrain::cpu
