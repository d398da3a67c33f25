// CPU kernel for Resize (opsets 10-13+) and its predecessor Upsample (7-9): nearest (four
// rounding modes), n-linear and cubic interpolation under every coordinate transformation mode,
// with exclude_outside and tf_crop_and_resize's extrapolation value.
//
// The per-axis tap arithmetic lives in resize_taps.h, shared with the gradient (ResizeGrad).
#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/common/resize_taps.h"
#include "kernels/cpu/elementwise_loops.h"

namespace mixtrain::cpu {
namespace {

using resize::AllTaps;
using resize::Doubles;
using resize::Params;
using resize::Taps;

absl::Status ResizeKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr || x->rank() != y->rank())
    return ctx.Error("needs X and an output of X's rank");
  const Node& node = ctx.node();
  const bool upsample = node.op_type() == "Upsample";
  const bool v10 = upsample || (ctx.opset() > 0 && ctx.opset() < 11);
  MT_ASSIGN_OR_RETURN(Params p, resize::ParamsOf(ctx, v10));
  // Scales: the attribute (Upsample-7), input 1 (Upsample-9, Resize-10) or input 2; roi: input 1.
  const int64_t rank = x->rank();
  MT_ASSIGN_OR_RETURN(std::vector<Taps> taps,
                      AllTaps(ctx, p, x->dims, y->dims, v10 ? ctx.input(1) : ctx.input(2),
                              v10 ? nullptr : ctx.input(1)));
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

MT_REGISTER_KERNELS(cpu_resize) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> t = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                                DType::kI8,  DType::kI32, DType::kI64,  DType::kU8};
  r.Register({"Resize", "", cpu, t, 0, FnKernel(ResizeKernel)});
  r.Register({"Upsample", "", cpu, t, 0, FnKernel(ResizeKernel)});
}

}  // namespace mixtrain::cpu
