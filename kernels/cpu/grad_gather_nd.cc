// CPU kernel of ai.mixtrain.GatherNDGrad(dY, indices, X) -> dX, the gradient of GatherND with
// batch_dims > 0 (ScatterND, which serves batch_dims = 0, has no batch_dims): zeros of X's shape
// with every slice of dY added at the slice of X its index tuple addressed, within its batch.
// Repeated tuples accumulate; negative indices count from the end. Accumulates in float.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"

namespace mixtrain::cpu {
namespace {

absl::Status GatherNDGradKernel(KernelContext& ctx) {
  const TensorView* dy_v = ctx.input(0);
  const TensorView* idx = ctx.input(1);
  const TensorView* x_v = ctx.input(2);
  TensorView* dx_v = ctx.output(0);
  if (!dy_v || !idx || !x_v || !dx_v) return ctx.Error("needs inputs dY, indices, X");
  if (!AllFloat({dy_v, x_v, dx_v})) return ctx.Error("expects float tensors");
  if (idx->dtype != DType::kI64 && idx->dtype != DType::kI32)
    return ctx.Error("indices must be int32 or int64");
  const int64_t b = ctx.node().attr_int("batch_dims", 0);
  const int64_t r = idx->rank();
  if (r < 1 || b < 0 || b >= r || b + idx->dims.back() > x_v->rank() || dx_v->numel() != x_v->numel())
    return ctx.Error("indices' last dim plus batch_dims exceeds X's rank");
  const int64_t q = idx->dims.back();
  const std::vector<int64_t>& xd = x_v->dims;
  const int64_t batches = NumElements({idx->dims.begin(), idx->dims.begin() + b});
  if (batches != NumElements({xd.begin(), xd.begin() + b}))
    return ctx.Error("the batch dims of X and indices differ");
  const int64_t tuples = NumElements({idx->dims.begin(), idx->dims.end() - 1});
  const int64_t slice = NumElements({xd.begin() + b + q, xd.end()});
  const int64_t batch_size = NumElements({xd.begin() + b, xd.end()});
  if (dy_v->numel() != tuples * slice) return ctx.Error("dY's size does not match the indices");
  std::vector<int64_t> stride(xd.size(), 1);  // of X, in elements
  for (int64_t d = static_cast<int64_t>(xd.size()) - 2; d >= 0; --d) stride[d] = stride[d + 1] * xd[d + 1];
  const std::vector<float> dy = ToFloatVector(*dy_v);
  std::vector<float> dx(x_v->numel(), 0.0f);
  const int64_t per_batch = tuples / std::max<int64_t>(batches, 1);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (t / per_batch) * batch_size;
    for (int64_t j = 0; j < q; ++j) {
      const int64_t n = xd[b + j];
      int64_t k = IntAt(*idx, t * q + j);
      if (k < -n || k >= n)
        return ctx.Error(absl::StrCat("index ", k, " is out of range for a dim of size ", n));
      off += (k < 0 ? k + n : k) * stride[b + j];
    }
    for (int64_t e = 0; e < slice; ++e) dx[off + e] += dy[t * slice + e];
  }
  StoreFloats(*dx_v, dx);
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_gather_nd) {
  r.Register({"GatherNDGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(GatherNDGradKernel)});
}

}  // namespace mixtrain::cpu
