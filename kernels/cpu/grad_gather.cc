// CPU kernels of ai.mixtrain.GatherGrad and GatherGradAdd (GeluGrad is an elementwise functor,
// in elementwise_binary.cc):
//   GatherGrad(dY, indices, X) -> dX: zeros of X's shape with dY scatter-added at the gathered
//     rows along `axis` (repeated indices accumulate), negative indices counted from the end.
//   GatherGradAdd(A, dY, indices) -> A with dY scatter-added the same way (over A in place).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grad_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {
namespace {

// The table's view around the node's `axis` (dims `table`), checked against dY's size.
absl::StatusOr<AxisView> TableView(const KernelContext& ctx, const std::vector<int64_t>& table, const TensorView& dy,
                                   const TensorView& idx) {
  const int64_t rank = static_cast<int64_t>(table.size());
  int64_t axis = ctx.node().attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return ctx.Error("axis out of range");
  const AxisView v = ViewAroundAxis(table, axis);
  if (dy.numel() != v.outer * idx.numel() * v.inner) return ctx.Error("dY's size does not match");
  return v;
}

// The gathered rows of `idx` along an axis of n rows, negative ones counted from the end.
absl::StatusOr<std::vector<int64_t>> Rows(const KernelContext& ctx, const TensorView& idx, int64_t n) {
  if (idx.dtype != DType::kI64 && idx.dtype != DType::kI32) return ctx.Error("indices must be int32 or int64");
  std::vector<int64_t> rows(idx.numel());
  for (int64_t k = 0; k < idx.numel(); ++k) {
    int64_t r = IntAt(idx, k);
    if (r < 0) r += n;
    if (r < 0 || r >= n) return ctx.Error(absl::StrCat("index ", IntAt(idx, k), " out of range for dim ", n));
    rows[k] = r;
  }
  return rows;
}

// dst[rows[k]] += src[k] along the axis, in float, in the order of k (repeated rows accumulate
// as they come); parallel over the `inner` columns, so repeated rows never race.
void AddRows(const AxisView& v, const std::vector<int64_t>& rows, const float* src0, float* dst0) {
  const int64_t K = static_cast<int64_t>(rows.size());
  ParallelFor(v.inner, 256, [&](int64_t b, int64_t e) {
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t k = 0; k < K; ++k) {
        const float* src = src0 + (o * K + k) * v.inner;
        float* dst = dst0 + (o * v.n + rows[k]) * v.inner;
        for (int64_t i = b; i < e; ++i) dst[i] += src[i];
      }
  });
}

// `out` (fp32 or not) = its start (zeros, or `acc` when given) with dY's rows added at `rows`:
// straight into an fp32 output, else in a float buffer rounded once.
void ScatterAdd(const AxisView& v, const std::vector<int64_t>& rows, const TensorView& dy, const TensorView* acc,
                TensorView& out) {
  const bool f32 = out.dtype == DType::kF32 && dy.dtype == DType::kF32;
  std::vector<float> dy_buf, dx_buf;
  if (f32) {
    if (acc == nullptr)
      std::memset(out.data, 0, out.nbytes());
    else if (acc->data != out.data)
      std::memcpy(out.data, acc->data, out.nbytes());
  } else {
    dy_buf = ToFloatVector(dy);
    if (acc == nullptr)
      dx_buf.assign(static_cast<size_t>(v.outer * v.n * v.inner), 0.0f);
    else
      dx_buf = ToFloatVector(*acc);
  }
  AddRows(v, rows, f32 ? dy.as<float>() : dy_buf.data(), f32 ? out.as<float>() : dx_buf.data());
  if (!f32) StoreFloats(out, dx_buf);
}

absl::Status GatherGradKernel(KernelContext& ctx) {
  const TensorView* dy_v = ctx.input(0);
  const TensorView* idx = ctx.input(1);
  const TensorView* x_v = ctx.input(2);
  if (!dy_v || !idx || !x_v || !ctx.output(0)) return ctx.Error("needs inputs dY, indices, X");
  MT_ASSIGN_OR_RETURN(const AxisView v, TableView(ctx, x_v->dims, *dy_v, *idx));
  const int64_t K = idx->numel();
  MT_ASSIGN_OR_RETURN(const std::vector<int64_t> rows, Rows(ctx, *idx, v.n));
  TensorView& out = *ctx.output(0);
  std::vector<int64_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  if (out.dtype == dy_v->dtype && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) {
    // Each row gathered once (the q/k/v split of a fused projection): zeros, then copies in the
    // storage type.
    const size_t es = DTypeSize(out.dtype);
    std::memset(out.data, 0, out.numel() * es);
    auto* dst = static_cast<uint8_t*>(out.data);
    const auto* src = static_cast<const uint8_t*>(dy_v->data);
    ParallelFor(v.outer * K, 1, [&](int64_t b, int64_t e) {
      for (int64_t ok = b; ok < e; ++ok)
        std::memcpy(dst + ((ok / K) * v.n + rows[ok % K]) * v.inner * es, src + ok * v.inner * es,
                    v.inner * es);
    });
    return absl::OkStatus();
  }
  // Repeated rows (an embedding): summed in fp32.
  ScatterAdd(v, rows, *dy_v, nullptr, out);
  return absl::OkStatus();
}

// GatherGradAdd(A, dY, indices) -> A + GatherGrad(dY, indices, A), written over A when the
// planner lets it (kOpOverwritesInput0): a tied embedding's gradient added into the classifier's
// without a zeroed gradient of the whole vocabulary.
absl::Status GatherGradAddKernel(KernelContext& ctx) {
  const TensorView* a = ctx.input(0);
  const TensorView* dy_v = ctx.input(1);
  const TensorView* idx = ctx.input(2);
  if (!a || !dy_v || !idx || !ctx.output(0)) return ctx.Error("needs inputs A, dY, indices");
  TensorView& out = *ctx.output(0);
  if (out.numel() != a->numel() || out.dtype != a->dtype) return ctx.Error("output differs from A");
  MT_ASSIGN_OR_RETURN(const AxisView v, TableView(ctx, a->dims, *dy_v, *idx));
  MT_ASSIGN_OR_RETURN(const std::vector<int64_t> rows, Rows(ctx, *idx, v.n));
  ScatterAdd(v, rows, *dy_v, a, out);
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_grad_gather) {
  r.Register({"GatherGrad", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(GatherGradKernel)});
  r.Register({"GatherGradAdd", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0,
              FnKernel(GatherGradAddKernel)});
}

}  // namespace mixtrain::cpu
