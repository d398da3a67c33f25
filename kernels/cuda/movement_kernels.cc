// CUDA kernel classes of Concat, Split, Transpose, DepthToSpace, SpaceToDepth, Expand and Where,
// for any dtype of 1, 2, 4 or 8 bytes (kernels/cuda/movement.cu). Concat and Split are one strided 2-D copy per part
// (cudaMemcpy2DAsync: `outer` rows of the part's chunk, at the part's place in the whole's row,
// kernels/common/join.h).
#include <array>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "kernels/common/broadcast.h"
#include "kernels/common/join.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {


// Concat and Split: one strided 2-D copy per part (kernels/common/join.h's layout).
template <bool kConcat>
absl::Status JoinOrSplit(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(join::Parts parts, join::PartsOf(ctx, kConcat));
  const TensorView& whole = kConcat ? *ctx.output(0) : *ctx.input(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, whole.dtype));
  MT_ASSIGN_OR_RETURN(join::Layout l, join::MakeLayout(ctx, whole, parts));
  auto* w = static_cast<uint8_t*>(whole.data);
  const auto s = static_cast<cudaStream_t>(ctx.stream());
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t chunk = l.chunk[i];
    if (chunk == 0 || l.outer == 0) continue;
    auto* mine = static_cast<uint8_t*>(parts[i]->data);
    if (kConcat)
      MT_CUDA_CHECK(cudaMemcpy2DAsync(w + l.start[i], l.row, mine, chunk, chunk, l.outer, cudaMemcpyDeviceToDevice, s));
    else
      MT_CUDA_CHECK(cudaMemcpy2DAsync(mine, chunk, w + l.start[i], l.row, chunk, l.outer, cudaMemcpyDeviceToDevice, s));
  }
  return absl::OkStatus();
}

absl::Status Transpose(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, x.dtype));
  const int64_t r = x.rank();
  if (r > 8) return ctx.Error("the CUDA Transpose takes rank <= 8");
  std::vector<int64_t> perm = ctx.node().attr_ints("perm");
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != r || y.rank() != r) return ctx.Error("perm does not match the rank");
  TransposeArgs a;
  a.rank = static_cast<int>(r);
  int64_t stride = 1;
  std::vector<int64_t> in_strides(r);
  for (int64_t d = r - 1; d >= 0; --d) in_strides[d] = stride, stride *= x.dims[d];
  std::vector<bool> seen(r, false);
  for (int64_t d = 0; d < r; ++d) {
    const int64_t p = perm[d] < 0 ? perm[d] + r : perm[d];
    if (p < 0 || p >= r || seen[p]) return ctx.Error("perm is not a permutation");
    seen[p] = true;
    a.out_dims[d] = x.dims[p];
    a.in_strides[d] = in_strides[p];
    if (y.dims[d] != x.dims[p]) return ctx.Error("the output's dims are not the permuted input's");
  }
  LaunchTranspose(DTypeSize(x.dtype), a, y.numel(), x.data, y.data, ctx.stream());
  return absl::OkStatus();
}

// DepthToSpace and SpaceToDepth are 6-D transposes. The space side [N, C, H, W] is viewed as
// [N, C, H/b, b, W/b, b] (n, c, h, i, w, j), the depth side [N, C*b*b, H/b, W/b] as
// [N, b, b, C, H/b, W/b] (n, i, j, c, h, w) in DCR mode and [N, C, b, b, H/b, W/b]
// (n, c, i, j, h, w) in CRD mode, as the CPU kernels' offsets
// (kernels/cpu/movement_rearrange.cc).
template <bool kToSpace>
absl::Status DepthSpace(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, x.dtype));
  const TensorView& space = kToSpace ? y : x;
  const TensorView& depth = kToSpace ? x : y;
  const int64_t b = ctx.node().attr_int("blocksize", 0);
  if (space.rank() != 4 || depth.rank() != 4 || b <= 0 || y.dtype != x.dtype)
    return ctx.Error("needs 4-D tensors of one dtype and a positive blocksize");
  const int64_t n = space.dims[0], c = space.dims[1], h = depth.dims[2], w = depth.dims[3];
  if (depth.dims[0] != n || depth.dims[1] != c * b * b || space.dims[2] != h * b || space.dims[3] != w * b)
    return ctx.Error("shapes do not match the blocksize");
  const std::string mode = kToSpace ? ctx.node().attr_string("mode", "DCR") : "DCR";
  if (mode != "DCR" && mode != "CRD") return ctx.Error("mode must be 'DCR' or 'CRD'");
  // Strides (elements) of n, c, h, i, w, j on each side.
  const int64_t hw = h * w;
  const std::array<int64_t, 6> space_stride = {c * h * b * w * b, h * b * w * b, b * w * b, w * b, b, 1};
  const std::array<int64_t, 6> depth_stride =
      mode == "DCR" ? std::array<int64_t, 6>{b * b * c * hw, hw, w, b * c * hw, 1, c * hw}
                    : std::array<int64_t, 6>{c * b * b * hw, b * b * hw, w, b * hw, 1, hw};
  // The output is written densely in its own order; each of its dims reads the input's stride.
  const std::array<int, 6> out_order = kToSpace ? std::array<int, 6>{0, 1, 2, 3, 4, 5}   // n c h i w j
                                                : std::array<int, 6>{0, 3, 5, 1, 2, 4};  // n i j c h w
  const std::array<int64_t, 6> extent = {n, c, h, b, w, b};
  const std::array<int64_t, 6>& in_stride = kToSpace ? depth_stride : space_stride;
  TransposeArgs a;
  a.rank = 6;
  for (int d = 0; d < 6; ++d) {
    a.out_dims[d] = extent[out_order[d]];
    a.in_strides[d] = in_stride[out_order[d]];
  }
  LaunchTranspose(DTypeSize(x.dtype), a, y.numel(), x.data, y.data, ctx.stream());
  return absl::OkStatus();
}

absl::Status Expand(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, x.dtype));
  if (y.dtype != x.dtype) return ctx.Error("the output's dtype differs from the input's");
  const std::span<const int64_t> in[] = {x.dims};
  auto l = MakeBroadcastLayout(std::span<const std::span<const int64_t>>(in), y.dims);
  if (!l.ok()) return ctx.Error(l.status().message());
  LaunchBroadcastCopy(DTypeSize(x.dtype), *l, x.data, y.data, ctx.stream());
  return absl::OkStatus();
}

absl::Status Where(KernelContext& ctx) {
  const TensorView* c = ctx.input(0);
  const TensorView* a = ctx.input(1);
  const TensorView* b = ctx.input(2);
  TensorView* o = ctx.output(0);
  if (c == nullptr || a == nullptr || b == nullptr || o == nullptr) return ctx.Error("needs condition, X, Y");
  if (c->dtype != DType::kBool) return ctx.Error("the condition must be bool");
  if (a->dtype != b->dtype || o->dtype != a->dtype) return ctx.Error("X, Y and the output must share one dtype");
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, a->dtype));
  const std::span<const int64_t> in[] = {c->dims, a->dims, b->dims};
  auto l = MakeBroadcastLayout(std::span<const std::span<const int64_t>>(in), o->dims);
  if (!l.ok()) return ctx.Error(l.status().message());
  LaunchWhere(DTypeSize(a->dtype), *l, c->as<uint8_t>(), a->data, b->data, o->data, ctx.stream());
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cuda_movement) {
  r.Register({"Concat", "", DeviceType::kCUDA, {}, 0, FnKernel(JoinOrSplit<true>)});
  r.Register({"Split", "", DeviceType::kCUDA, {}, 0, FnKernel(JoinOrSplit<false>)});
  r.Register({"Transpose", "", DeviceType::kCUDA, {}, 0, FnKernel(Transpose)});
  r.Register({"DepthToSpace", "", DeviceType::kCUDA, {}, 0, FnKernel(DepthSpace<true>)});
  r.Register({"SpaceToDepth", "", DeviceType::kCUDA, {}, 0, FnKernel(DepthSpace<false>)});
  r.Register({"Expand", "", DeviceType::kCUDA, {}, 0, FnKernel(Expand)});
  r.Register({"Where", "", DeviceType::kCUDA, {}, 1, FnKernel(Where)});
}

}  // namespace mixtrain::cuda
