// CPU kernels for the signal windows (HannWindow, HammingWindow, BlackmanWindow) and Det (the
// determinant of each trailing [M, M] matrix, by LU with partial pivoting in double).
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

}  // namespace

MT_REGISTER_KERNELS(cpu_extra_signal) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> ints = {DType::kI32, DType::kI64};
  r.Register({"HannWindow", "", cpu, ints, 0, FnKernel(HannKernel)});
  r.Register({"HammingWindow", "", cpu, ints, 0, FnKernel(HammingKernel)});
  r.Register({"BlackmanWindow", "", cpu, ints, 0, FnKernel(BlackmanKernel)});
  r.Register({"Det", "", cpu, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}, 0,
              FnKernel(DetKernel)});
}

}  // namespace mixtrain::cpu
