// CPU kernel of ai.mixtrain.ConvGrad(dY, X, W) -> (dX, dW): the input and weight gradients of
// Conv (1-D/2-D/3-D, groups, strides, dilations, pads, auto_pad; attributes as the forward Conv).
// The same kernel gives ConvTranspose's weight gradient with X and dY swapped (see
// passes/grad_rules_nn.cc), so it tolerates an "X" whose trailing rows no window reads.
// Direct loops over a 3-D window (grad_util.h): dX is parallel over (n, input channel) planes,
// dW over output channels, so no two threads write the same element.
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {
namespace {

absl::Status ConvGradKernel(KernelContext& ctx) {
  const TensorView* dy_v = ctx.input(0);
  const TensorView* x_v = ctx.input(1);
  const TensorView* w_v = ctx.input(2);
  if (!dy_v || !x_v || !w_v) return ctx.Error("needs inputs dY, X and W");
  if (!AllFloat({dy_v, x_v, w_v, ctx.output(0), ctx.output(1)}))
    return ctx.Error("expects float tensors");
  const std::vector<int64_t>& xd = x_v->dims;
  const std::vector<int64_t>& wd = w_v->dims;
  if (wd.size() != xd.size()) return ctx.Error("W and X ranks differ");
  const int64_t N = xd[0], C = xd[1], M = wd[0], G = ctx.node().attr_int("group", 1);
  if (G < 1 || C % G != 0 || M % G != 0 || wd[1] != C / G)
    return ctx.Error(absl::StrCat("channels do not match groups: X has ", C, ", W is ",
                                  wd[0], " x ", wd[1], ", group ", G));
  MT_ASSIGN_OR_RETURN(Window3 w, MakeWindow3(ctx, xd, std::vector<int64_t>(wd.begin() + 2, wd.end())));
  if (dy_v->dims.size() != xd.size() || dy_v->dims[0] != N || dy_v->dims[1] != M ||
      NumElements(std::vector<int64_t>(dy_v->dims.begin() + 2, dy_v->dims.end())) != w.out_size())
    return ctx.Error("dY's shape does not match the convolution's output");
  const int64_t Cg = C / G, Mg = M / G;
  const int64_t IS = w.in_size(), OS = w.out_size(), KS = w.k_size();
  const std::vector<float> dy = ToFloatVector(*dy_v);
  const std::vector<float> x = ToFloatVector(*x_v);
  const std::vector<float> wt = ToFloatVector(*w_v);

  // Visits every (input offset, output offset) pair one kernel tap connects.
  auto for_tap = [&](int64_t kd, int64_t kh, int64_t kw, auto&& fn) {
    for (int64_t od = 0; od < w.out[0]; ++od) {
      const int64_t id = od * w.s[0] + kd * w.d[0] - w.pb[0];
      if (id < 0 || id >= w.in[0]) continue;
      for (int64_t oh = 0; oh < w.out[1]; ++oh) {
        const int64_t ih = oh * w.s[1] + kh * w.d[1] - w.pb[1];
        if (ih < 0 || ih >= w.in[1]) continue;
        const int64_t in_row = (id * w.in[1] + ih) * w.in[2];
        const int64_t out_row = (od * w.out[1] + oh) * w.out[2];
        for (int64_t ow = 0; ow < w.out[2]; ++ow) {
          const int64_t iw = ow * w.s[2] + kw * w.d[2] - w.pb[2];
          if (iw < 0 || iw >= w.in[2]) continue;
          fn(in_row + iw, out_row + ow);
        }
      }
    }
  };

  if (TensorView* dx_v = ctx.output(0)) {
    std::vector<float> dx(static_cast<size_t>(N * C * IS), 0.0f);
    ParallelFor(N * C, 1, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t n = nc / C, ci = nc % C, g = ci / Cg, cl = ci % Cg;
        float* plane = dx.data() + nc * IS;
        for (int64_t co = g * Mg; co < (g + 1) * Mg; ++co) {
          const float* dyp = dy.data() + (n * M + co) * OS;
          const float* wp = wt.data() + (co * Cg + cl) * KS;
          for (int64_t kd = 0; kd < w.k[0]; ++kd)
            for (int64_t kh = 0; kh < w.k[1]; ++kh)
              for (int64_t kw = 0; kw < w.k[2]; ++kw) {
                const float wv = wp[(kd * w.k[1] + kh) * w.k[2] + kw];
                for_tap(kd, kh, kw, [&](int64_t i, int64_t o) { plane[i] += dyp[o] * wv; });
              }
        }
      }
    });
    StoreFloats(*dx_v, dx);
  }
  if (TensorView* dw_v = ctx.output(1)) {
    std::vector<float> dw(static_cast<size_t>(M * Cg * KS), 0.0f);
    ParallelFor(M * Cg, 1, [&](int64_t b, int64_t e) {
      for (int64_t mc = b; mc < e; ++mc) {
        const int64_t co = mc / Cg, cl = mc % Cg, ci = (co / Mg) * Cg + cl;
        for (int64_t kd = 0; kd < w.k[0]; ++kd)
          for (int64_t kh = 0; kh < w.k[1]; ++kh)
            for (int64_t kw = 0; kw < w.k[2]; ++kw) {
              double acc = 0;
              for (int64_t n = 0; n < N; ++n) {
                const float* dyp = dy.data() + (n * M + co) * OS;
                const float* xp = x.data() + (n * C + ci) * IS;
                float part = 0;
                for_tap(kd, kh, kw, [&](int64_t i, int64_t o) { part += dyp[o] * xp[i]; });
                acc += part;
              }
              dw[mc * KS + (kd * w.k[1] + kh) * w.k[2] + kw] = static_cast<float>(acc);
            }
      }
    });
    StoreFloats(*dw_v, dw);
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_conv) {
  r.Register({"ConvGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(ConvGradKernel)});
}

}  // namespace mixtrain::cpu
