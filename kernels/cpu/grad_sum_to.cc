// CPU kernel of ai.mixtrain.SumToShape(grad, shape): undoes numpy broadcasting at run time when
// static shapes could not tell which axes were broadcast (passes/grad_builder.cc). The output has
// dims `shape` (right-aligned against grad's dims, each 1 or equal); every grad element adds into
// the output element it was broadcast from. Accumulates in double.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"

namespace mixtrain::cpu {
namespace {

absl::Status SumToShapeKernel(KernelContext& ctx) {
  const TensorView* g = ctx.input(0);
  TensorView* out = ctx.output(0);
  if (!g || !out) return ctx.Error("needs input grad and output");
  if (!AllFloat({g, out})) return ctx.Error("expects float tensors");
  const int64_t r = g->rank(), ro = out->rank();
  if (ro > r) return ctx.Error("target rank exceeds the gradient's");
  std::vector<int64_t> od(r, 1);
  for (int64_t i = 0; i < ro; ++i) od[r - ro + i] = out->dims[i];
  for (int64_t i = 0; i < r; ++i)
    if (od[i] != 1 && od[i] != g->dims[i])
      return ctx.Error(absl::StrCat("dim ", i, " of the target (", od[i],
                                    ") does not broadcast to the gradient's (", g->dims[i], ")"));
  // Nothing was broadcast (shapes equal at run time, which static shapes could not prove, e.g.
  // attention's batched products under a symbolic batch): the sum of one term is that term.
  if (out->numel() == g->numel() && out->dtype == g->dtype) {
    if (out->data != g->data) std::memcpy(out->data, g->data, g->nbytes());
    return absl::OkStatus();
  }
  const std::vector<float> src = ToFloatVector(*g);
  std::vector<double> acc(out->numel(), 0.0);
  // Common case (a bias gradient): only leading axes were broadcast, so the target is the
  // trailing `inner` elements and every row of grad adds into it.
  int64_t lead = 0;
  while (lead < r && od[lead] == 1) ++lead;
  bool trailing = true;
  for (int64_t i = lead; i < r; ++i) trailing &= od[i] == g->dims[i];
  if (trailing) {
    const int64_t inner = static_cast<int64_t>(acc.size());
    const int64_t rows = inner == 0 ? 0 : static_cast<int64_t>(src.size()) / inner;
    for (int64_t row = 0; row < rows; ++row) {
      const float* s = src.data() + row * inner;
#pragma omp simd
      for (int64_t k = 0; k < inner; ++k) acc[k] += s[k];
    }
  } else {
    std::vector<int64_t> idx(r, 0);
    for (size_t q = 0; q < src.size(); ++q) {
      int64_t off = 0;
      for (int64_t i = 0; i < r; ++i) off = off * od[i] + (od[i] == 1 ? 0 : idx[i]);
      acc[off] += src[q];
      for (int64_t i = r - 1; i >= 0; --i) {
        if (++idx[i] < g->dims[i]) break;
        idx[i] = 0;
      }
    }
  }
  StoreFloats(*out, std::vector<float>(acc.begin(), acc.end()));
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_sum_to) {
  r.Register({"SumToShape", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(SumToShapeKernel)});
}

}  // namespace mixtrain::cpu
