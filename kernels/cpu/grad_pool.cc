// CPU kernels of ai.mixtrain.MaxPoolGrad(dY, X) and AveragePoolGrad(dY, X): the input gradients
// of MaxPool and AveragePool (1-D/2-D/3-D, strides, pads, dilations, ceil_mode, auto_pad;
// attributes as the forward node). MaxPool routes each window's gradient to its first maximum
// (scan order, as PyTorch); AveragePool spreads it over the window, dividing by the same count
// the forward used (count_include_pad counts the padded taps, never taps past the padding).
// Parallel over (n, c) planes, so no two threads write the same element.
#include <limits>
#include <vector>

#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {
namespace {

struct PoolArgs {
  Window3 w;
  int64_t planes = 0;
  std::vector<float> dy, x;
};

absl::StatusOr<PoolArgs> ReadPool(KernelContext& ctx) {
  const TensorView* dy = ctx.input(0);
  const TensorView* x = ctx.input(1);
  if (!dy || !x || !ctx.output(0)) return ctx.Error("needs inputs dY, X and output dX");
  if (!AllFloat({dy, x, ctx.output(0)})) return ctx.Error("expects float tensors");
  PoolArgs a;
  MT_ASSIGN_OR_RETURN(a.w, MakeWindow3(ctx, x->dims, ctx.node().attr_ints("kernel_shape")));
  a.planes = x->dims[0] * x->dims[1];
  if (dy->numel() != a.planes * a.w.out_size())
    return ctx.Error("dY's shape does not match the pooling output");
  a.dy = ToFloatVector(*dy);
  a.x = ToFloatVector(*x);
  return a;
}

absl::Status MaxPoolGradKernel(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(PoolArgs a, ReadPool(ctx));
  const Window3& w = a.w;
  std::vector<float> dx(a.x.size(), 0.0f);
  ParallelFor(a.planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* xp = a.x.data() + p * w.in_size();
      const float* dyp = a.dy.data() + p * w.out_size();
      float* dxp = dx.data() + p * w.in_size();
      for (int64_t od = 0; od < w.out[0]; ++od)
        for (int64_t oh = 0; oh < w.out[1]; ++oh)
          for (int64_t ow = 0; ow < w.out[2]; ++ow) {
            int64_t best = -1;
            float best_v = -std::numeric_limits<float>::infinity();
            for (int64_t kd = 0; kd < w.k[0]; ++kd) {
              const int64_t id = od * w.s[0] + kd * w.d[0] - w.pb[0];
              if (id < 0 || id >= w.in[0]) continue;
              for (int64_t kh = 0; kh < w.k[1]; ++kh) {
                const int64_t ih = oh * w.s[1] + kh * w.d[1] - w.pb[1];
                if (ih < 0 || ih >= w.in[1]) continue;
                for (int64_t kw = 0; kw < w.k[2]; ++kw) {
                  const int64_t iw = ow * w.s[2] + kw * w.d[2] - w.pb[2];
                  if (iw < 0 || iw >= w.in[2]) continue;
                  const int64_t i = (id * w.in[1] + ih) * w.in[2] + iw;
                  if (best < 0 || xp[i] > best_v) {
                    best = i;
                    best_v = xp[i];
                  }
                }
              }
            }
            if (best >= 0) dxp[best] += dyp[(od * w.out[1] + oh) * w.out[2] + ow];
          }
    }
  });
  StoreFloats(*ctx.output(0), dx);
  return absl::OkStatus();
}

// Taps of output position `o` along one dim that lie in [lo, hi).
int64_t TapsIn(const Window3& w, int dim, int64_t o, int64_t lo, int64_t hi) {
  int64_t n = 0;
  for (int64_t k = 0; k < w.k[dim]; ++k) {
    const int64_t i = o * w.s[dim] + k * w.d[dim] - w.pb[dim];
    n += i >= lo && i < hi;
  }
  return n;
}

absl::Status AveragePoolGradKernel(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(PoolArgs a, ReadPool(ctx));
  const Window3& w = a.w;
  const bool include_pad = ctx.node().attr_int("count_include_pad", 0) != 0;
  // The divisor per output position, dim by dim.
  std::array<std::vector<int64_t>, 3> count;
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t lo = include_pad ? -w.pb[dim] : 0;
    const int64_t hi = include_pad ? w.in[dim] + w.pe[dim] : w.in[dim];
    for (int64_t o = 0; o < w.out[dim]; ++o) count[dim].push_back(TapsIn(w, dim, o, lo, hi));
  }
  std::vector<float> dx(a.x.size(), 0.0f);
  ParallelFor(a.planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* dyp = a.dy.data() + p * w.out_size();
      float* dxp = dx.data() + p * w.in_size();
      for (int64_t od = 0; od < w.out[0]; ++od)
        for (int64_t oh = 0; oh < w.out[1]; ++oh)
          for (int64_t ow = 0; ow < w.out[2]; ++ow) {
            const int64_t n = count[0][od] * count[1][oh] * count[2][ow];
            if (n == 0) continue;
            const float g = dyp[(od * w.out[1] + oh) * w.out[2] + ow] / static_cast<float>(n);
            for (int64_t kd = 0; kd < w.k[0]; ++kd) {
              const int64_t id = od * w.s[0] + kd * w.d[0] - w.pb[0];
              if (id < 0 || id >= w.in[0]) continue;
              for (int64_t kh = 0; kh < w.k[1]; ++kh) {
                const int64_t ih = oh * w.s[1] + kh * w.d[1] - w.pb[1];
                if (ih < 0 || ih >= w.in[1]) continue;
                for (int64_t kw = 0; kw < w.k[2]; ++kw) {
                  const int64_t iw = ow * w.s[2] + kw * w.d[2] - w.pb[2];
                  if (iw < 0 || iw >= w.in[2]) continue;
                  dxp[(id * w.in[1] + ih) * w.in[2] + iw] += g;
                }
              }
            }
          }
    }
  });
  StoreFloats(*ctx.output(0), dx);
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_pool) {
  r.Register({"MaxPoolGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(MaxPoolGradKernel)});
  r.Register({"AveragePoolGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(AveragePoolGradKernel)});
}

}  // namespace mixtrain::cpu
