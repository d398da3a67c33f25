// CPU kernels of the training-step ops: our ai.mixtrain optimizers (fp32 master weights and state,
// skip on overflow), AllFinite, UpdateLossScale, and ONNX's ai.onnx.preview.training Adam,
// Momentum and Adagrad (multi-tensor forms). The math is kernels/common/optimizer.h.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/common/optimizer.h"
#include "kernels/cpu/parallel.h"
#include "kernels/registry.h"

namespace mixtrain {
namespace {

constexpr char kMt[] = "ai.mixtrain";
constexpr char kPreview[] = "ai.onnx.preview.training";

float ScalarF(const TensorView* t) { return t->as<float>()[0]; }

absl::StatusOr<int64_t> ScalarI(const KernelContext& ctx, size_t i) {
  const TensorView* t = ctx.input(i);
  if (!t || t->numel() != 1) return ctx.Error(absl::StrCat("input ", i, " must be a scalar"));
  if (t->dtype == DType::kI64) return t->as<int64_t>()[0];
  if (t->dtype == DType::kI32) return t->as<int32_t>()[0];
  return ctx.Error(absl::StrCat("input ", i, " must be int64"));
}

bool Skip(const KernelContext& ctx, size_t i) {
  const TensorView* t = ctx.input(i);
  return t && t->numel() == 1 && t->as<uint8_t>()[0] != 0;
}

// Checks that inputs [first, first+n) are f32 of equal element counts.
absl::Status CheckF32(const KernelContext& ctx, size_t first, size_t n, int64_t numel) {
  for (size_t i = first; i < first + n; ++i) {
    const TensorView* t = ctx.input(i);
    if (!t || t->dtype != DType::kF32)
      return ctx.Error(absl::StrCat("input ", i, " must be f32 (master weights and optimizer state are fp32)"));
    if (t->numel() != numel)
      return ctx.Error(absl::StrCat("input ", i, " has ", t->numel(), " elements, expected ", numel));
  }
  return absl::OkStatus();
}

// out = in, unless they already share memory (in-place state update).
void CopyState(const TensorView* in, TensorView* out) {
  if (out && in && out->data != in->data) std::memcpy(out->data, in->data, in->nbytes());
}

// X' M' V' <- Adam(lr, step, skip, X, G, M, V)
absl::Status AdamKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(3);
  if (!x) return ctx.Error("missing X");
  int64_t n = x->numel();
  MT_RETURN_IF_ERROR(CheckF32(ctx, 3, 4, n));
  MT_ASSIGN_OR_RETURN(int64_t step, ScalarI(ctx, 1));
  TensorView *xo = ctx.output(0), *mo = ctx.output(1), *vo = ctx.output(2);
  CopyState(x, xo);
  CopyState(ctx.input(5), mo);
  CopyState(ctx.input(6), vo);
  if (Skip(ctx, 2)) return absl::OkStatus();
  const Node& node = ctx.node();
  AdamStep s;
  s.lr = ScalarF(ctx.input(0));
  s.beta1 = node.attr_float("beta1", 0.9f);
  s.beta2 = node.attr_float("beta2", 0.999f);
  s.eps = node.attr_float("epsilon", 1e-8f);
  s.weight_decay = node.attr_float("weight_decay", 0.0f);
  s.decoupled = node.attr_int("decoupled", 0) != 0;
  double t = static_cast<double>(step + 1);
  s.bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(s.beta1), t));
  s.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(s.beta2), t)));
  float* xp = xo->as<float>();
  const float* g = ctx.input(4)->as<float>();
  float* m = mo->as<float>();
  float* v = vo->as<float>();
  ParallelFor(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    // Four distinct buffers (the state is updated in place, never aliasing G): restrict lets
    // the compiler vectorize the loop.
    float* __restrict xr = xp;
    const float* __restrict gr = g;
    float* __restrict mr = m;
    float* __restrict vr = v;
    if (s.decoupled)
      for (int64_t i = b; i < e; ++i) s.Update<true>(xr[i], gr[i], mr[i], vr[i]);
    else
      for (int64_t i = b; i < e; ++i) s.Update<false>(xr[i], gr[i], mr[i], vr[i]);
  });
  return absl::OkStatus();
}

// X' [B'] <- SGD(lr, skip, X, G, [B])
absl::Status SgdKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(2);
  if (!x) return ctx.Error("missing X");
  int64_t n = x->numel();
  SgdStep s;
  const Node& node = ctx.node();
  s.momentum = node.attr_float("momentum", 0.0f);
  s.weight_decay = node.attr_float("weight_decay", 0.0f);
  s.nesterov = node.attr_int("nesterov", 0) != 0;
  bool has_buf = s.momentum != 0.0f;
  MT_RETURN_IF_ERROR(CheckF32(ctx, 2, has_buf ? 3 : 2, n));
  if (has_buf && !ctx.output(1)) return ctx.Error("momentum needs the buffer output B'");
  CopyState(x, ctx.output(0));
  if (has_buf) CopyState(ctx.input(4), ctx.output(1));
  if (Skip(ctx, 1)) return absl::OkStatus();
  s.lr = ScalarF(ctx.input(0));
  float* xp = ctx.output(0)->as<float>();
  const float* g = ctx.input(3)->as<float>();
  float* b = has_buf ? ctx.output(1)->as<float>() : nullptr;
  ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) s(xp[i], g[i], b ? b + i : nullptr);
  });
  return absl::OkStatus();
}

// X' H' <- Adagrad(lr, step, skip, X, G, H)
absl::Status AdagradKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(3);
  if (!x) return ctx.Error("missing X");
  int64_t n = x->numel();
  MT_RETURN_IF_ERROR(CheckF32(ctx, 3, 3, n));
  MT_ASSIGN_OR_RETURN(int64_t step, ScalarI(ctx, 1));
  CopyState(x, ctx.output(0));
  CopyState(ctx.input(5), ctx.output(1));
  if (Skip(ctx, 2)) return absl::OkStatus();
  const Node& node = ctx.node();
  AdagradStep s;
  float lr = ScalarF(ctx.input(0));
  s.clr = lr / (1.0f + static_cast<float>(step) * node.attr_float("lr_decay", 0.0f));
  s.weight_decay = node.attr_float("weight_decay", 0.0f);
  s.eps = node.attr_float("epsilon", 1e-10f);
  float* xp = ctx.output(0)->as<float>();
  const float* g = ctx.input(4)->as<float>();
  float* h = ctx.output(1)->as<float>();
  ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) s(xp[i], g[i], h[i]);
  });
  return absl::OkStatus();
}

template <typename T>
bool AllFiniteOf(const T* p, int64_t n, float (*load)(T)) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(load(p[i]));
  return ok;
}

// all_finite <- AllFinite(x1, ..., xn): false when any element of any input is inf or NaN.
absl::Status AllFiniteKernel(KernelContext& ctx) {
  bool ok = true;
  for (size_t i = 0; i < ctx.num_inputs() && ok; ++i) {
    const TensorView* t = ctx.input(i);
    if (!t) continue;
    int64_t n = t->numel();
    switch (t->dtype) {
      case DType::kF32: {
        const float* p = t->as<float>();
        ok &= AllFiniteOf<float>(p, n, [](float v) { return v; });
        break;
      }
      case DType::kF16:
        ok &= AllFiniteOf<uint16_t>(t->as<uint16_t>(), n, [](uint16_t v) { return HalfToFloat(v); });
        break;
      case DType::kBF16:
        ok &= AllFiniteOf<uint16_t>(t->as<uint16_t>(), n, [](uint16_t v) { return BFloat16ToFloat(v); });
        break;
      default:
        return ctx.Error(absl::StrCat("input ", i, " must be a float tensor"));
    }
  }
  ctx.output(0)->as<uint8_t>()[0] = ok ? 1 : 0;
  return absl::OkStatus();
}

// scale' good' <- UpdateLossScale(found_inf, scale, good)
absl::Status UpdateLossScaleKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  LossScaleUpdate u;
  u.growth = node.attr_float("growth_factor", 2.0f);
  u.backoff = node.attr_float("backoff_factor", 0.5f);
  u.max_scale = node.attr_float("max_scale", 16777216.0f);
  u.interval = node.attr_int("growth_interval", 2000);
  float scale = ScalarF(ctx.input(1));
  MT_ASSIGN_OR_RETURN(int64_t good, ScalarI(ctx, 2));
  u(Skip(ctx, 0), scale, good);
  ctx.output(0)->as<float>()[0] = scale;
  ctx.output(1)->as<int64_t>()[0] = good;
  return absl::OkStatus();
}

// --- ai.onnx.preview.training -------------------------------------------------------------------

// Number of tensors per group for a multi-tensor op with `groups` groups after R and T.
absl::StatusOr<size_t> GroupSize(const KernelContext& ctx, size_t groups) {
  size_t n = ctx.num_inputs();
  if (n < 2 + groups || (n - 2) % groups != 0)
    return ctx.Error(absl::StrCat("expects R, T and ", groups, " groups of equal size"));
  return (n - 2) / groups;
}

// Tensor j of every group (X, G, then the state groups) is f32 with X_j's element count, so the
// loops below cannot read past a shorter G or state tensor.
absl::Status CheckGroupMember(const KernelContext& ctx, size_t k, size_t groups, size_t j, int64_t n) {
  for (size_t g = 0; g < groups; ++g) MT_RETURN_IF_ERROR(CheckF32(ctx, 2 + g * k + j, 1, n));
  return absl::OkStatus();
}

absl::Status OnnxAdamKernel(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(size_t k, GroupSize(ctx, 4));
  MT_ASSIGN_OR_RETURN(int64_t t, ScalarI(ctx, 1));
  const Node& node = ctx.node();
  OnnxAdamStep s;
  float r = ScalarF(ctx.input(0));
  s.alpha = node.attr_float("alpha", 0.9f);
  s.beta = node.attr_float("beta", 0.999f);
  s.epsilon = node.attr_float("epsilon", 1e-6f);
  s.norm_coefficient = node.attr_float("norm_coefficient", 0.0f);
  s.norm_coefficient_post = node.attr_float("norm_coefficient_post", 0.0f);
  s.r_adjusted = t > 0 ? static_cast<float>(r * std::sqrt(1.0 - std::pow(s.beta, t)) /
                                            (1.0 - std::pow(s.alpha, t)))
                       : r;
  for (size_t j = 0; j < k; ++j) {
    int64_t n = ctx.input(2 + j)->numel();
    MT_RETURN_IF_ERROR(CheckGroupMember(ctx, k, 4, j, n));
    const float* x = ctx.input(2 + j)->as<float>();
    const float* g = ctx.input(2 + k + j)->as<float>();
    const float* v = ctx.input(2 + 2 * k + j)->as<float>();
    const float* h = ctx.input(2 + 3 * k + j)->as<float>();
    float* xo = ctx.output(j)->as<float>();
    float* vo = ctx.output(k + j)->as<float>();
    float* ho = ctx.output(2 * k + j)->as<float>();
    for (int64_t i = 0; i < n; ++i) s(x[i], g[i], v[i], h[i], xo[i], vo[i], ho[i]);
  }
  return absl::OkStatus();
}

absl::Status OnnxMomentumKernel(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(size_t k, GroupSize(ctx, 3));
  MT_ASSIGN_OR_RETURN(int64_t t, ScalarI(ctx, 1));
  const Node& node = ctx.node();
  OnnxMomentumStep s;
  s.r = ScalarF(ctx.input(0));
  s.alpha = node.attr_float("alpha", 0.0f);
  float beta = node.attr_float("beta", 0.0f);
  s.beta_adjusted = t > 0 ? beta : 1.0f;
  s.norm_coefficient = node.attr_float("norm_coefficient", 0.0f);
  std::string mode = node.attr_string("mode", "standard");
  if (mode != "standard" && mode != "nesterov")
    return ctx.Error(absl::StrCat("unknown mode '", mode, "'"));
  s.nesterov = mode == "nesterov";
  for (size_t j = 0; j < k; ++j) {
    int64_t n = ctx.input(2 + j)->numel();
    MT_RETURN_IF_ERROR(CheckGroupMember(ctx, k, 3, j, n));
    const float* x = ctx.input(2 + j)->as<float>();
    const float* g = ctx.input(2 + k + j)->as<float>();
    const float* v = ctx.input(2 + 2 * k + j)->as<float>();
    float* xo = ctx.output(j)->as<float>();
    float* vo = ctx.output(k + j)->as<float>();
    for (int64_t i = 0; i < n; ++i) s(x[i], g[i], v[i], xo[i], vo[i]);
  }
  return absl::OkStatus();
}

absl::Status OnnxAdagradKernel(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(size_t k, GroupSize(ctx, 3));
  MT_ASSIGN_OR_RETURN(int64_t t, ScalarI(ctx, 1));
  const Node& node = ctx.node();
  OnnxAdagradStep s;
  float r = ScalarF(ctx.input(0));
  s.r_adjusted = r / (1.0f + static_cast<float>(t) * node.attr_float("decay_factor", 0.0f));
  s.epsilon = node.attr_float("epsilon", 0.0f);
  s.norm_coefficient = node.attr_float("norm_coefficient", 0.0f);
  for (size_t j = 0; j < k; ++j) {
    int64_t n = ctx.input(2 + j)->numel();
    MT_RETURN_IF_ERROR(CheckGroupMember(ctx, k, 3, j, n));
    const float* x = ctx.input(2 + j)->as<float>();
    const float* g = ctx.input(2 + k + j)->as<float>();
    const float* h = ctx.input(2 + 2 * k + j)->as<float>();
    float* xo = ctx.output(j)->as<float>();
    float* ho = ctx.output(k + j)->as<float>();
    for (int64_t i = 0; i < n; ++i) s(x[i], g[i], h[i], xo[i], ho[i]);
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(optimizer) {
  auto add = [&](const char* op, const char* domain, KernelFn fn) {
    r.Register({op, domain, DeviceType::kCPU, {}, 0, FnKernel(fn)});
  };
  add("Adam", kMt, AdamKernel);
  add("SGD", kMt, SgdKernel);
  add("Adagrad", kMt, AdagradKernel);
  add("AllFinite", kMt, AllFiniteKernel);
  add("UpdateLossScale", kMt, UpdateLossScaleKernel);
  add("Adam", kPreview, OnnxAdamKernel);
  add("Momentum", kPreview, OnnxMomentumKernel);
  add("Adagrad", kPreview, OnnxAdagradKernel);
}

}  // namespace mixtrain
