// CPU kernel for Einsum: a direct sum over every combination of the equation's labels (output
// labels outermost), in double. Meant for the small contractions ONNX models spell as Einsum
// (traces, diagonals, batched products of small matrices); large ones belong in MatMul.
#include <algorithm>
#include <vector>

#include "graph/ops/einsum.h"
#include "kernels/cpu/elementwise_loops.h"

namespace mixtrain::cpu {
namespace {

absl::Status EinsumKernel(KernelContext& ctx) {
  TensorView* y = ctx.output(0);
  if (ctx.num_inputs() == 0 || y == nullptr) return ctx.Error("needs at least one input");
  std::vector<std::vector<int64_t>> dims;
  std::vector<std::vector<double>> in;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorView* t = ctx.input(i);
    if (t == nullptr || t->dtype != ctx.input(0)->dtype) return ctx.Error("inputs must share one dtype");
    dims.push_back(t->dims);
    in.emplace_back(t->numel());
    MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, t->dtype, t->data, DType::kF64, in.back().data(), t->numel()));
  }
  auto plan = einsum::Parse(ctx.node().attr_string("equation", ""), dims);
  if (!plan.ok()) return ctx.Error(plan.status().message());
  if (NumElements(einsum::OutputDims(*plan)) != y->numel()) return ctx.Error("output size mismatch");
  // Per input, the stride each label contributes (summed for repeated labels: a diagonal; 0 for
  // a broadcast ellipsis dim of size 1).
  const size_t nl = plan->labels.size();
  std::vector<std::vector<int64_t>> stride(in.size(), std::vector<int64_t>(nl, 0));
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t s = 1;
    for (int64_t d = static_cast<int64_t>(dims[i].size()) - 1; d >= 0; --d) {
      const size_t l = std::find(plan->labels.begin(), plan->labels.end(), plan->inputs[i][d]) - plan->labels.begin();
      if (dims[i][d] != 1) stride[i][l] += s;
      s *= dims[i][d];
    }
  }
  const int64_t total = NumElements(plan->sizes);
  const int64_t per_out = total / std::max<int64_t>(y->numel(), 1);
  std::vector<double> out(y->numel(), 0.0);
  std::vector<int64_t> idx(nl, 0), off(in.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    double prod = 1;
    for (size_t i = 0; i < in.size(); ++i) prod *= in[i][off[i]];
    out[n / per_out] += prod;
    for (int64_t l = static_cast<int64_t>(nl) - 1; l >= 0; --l) {
      for (size_t i = 0; i < in.size(); ++i) off[i] += stride[i][l];
      if (++idx[l] < plan->sizes[l]) break;
      for (size_t i = 0; i < in.size(); ++i) off[i] -= stride[i][l] * plan->sizes[l];
      idx[l] = 0;
    }
  }
  return cpu_ew::CastBuffer(ctx, DType::kF64, out.data(), y->dtype, y->data, y->numel());
}

}  // namespace

MT_REGISTER_KERNELS(cpu_einsum) {
  r.Register({"Einsum", "", DeviceType::kCPU,
              {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kI64}, 0,
              FnKernel(EinsumKernel)});
}

}  // namespace mixtrain::cpu
