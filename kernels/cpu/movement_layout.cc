// CPU kernels for ops that keep or rearrange every element: Identity, Reshape, Flatten, Squeeze,
// Unsqueeze (a byte copy, or nothing when the planner ran them in place), Transpose (blocked),
// Expand and Tile (strided copies with zero strides). Output dims arrive planned by the op's
// shape rule, so these kernels only move bytes; they accept every dtype.
#include "absl/strings/str_cat.h"
#include "kernels/cpu/movement_util.h"

namespace mixtrain {
namespace {

using cpu_movement::CopyBytes;
using cpu_movement::StridedCopy;
using cpu_movement::StridesOf;

absl::Status CheckElementSize(const KernelContext& ctx, DType t) {
  if (DTypeSize(t) == 0) return ctx.Error(absl::StrCat("cannot move ", DTypeName(t), " tensors"));
  return absl::OkStatus();
}

// Identity, Reshape, Flatten, Squeeze, Unsqueeze: same bytes, new dims.
absl::Status SameBytes(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, in.dtype));
  if (in.numel() != out.numel() || in.dtype != out.dtype)
    return ctx.Error(absl::StrCat("output holds ", out.numel(), " ", DTypeName(out.dtype),
                                  " elements, input ", in.numel(), " ", DTypeName(in.dtype)));
  CopyBytes(out.data, in.data, in.nbytes());
  return absl::OkStatus();
}

absl::Status Transpose(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, in.dtype));
  // The attribute read in place: a call allocates nothing.
  const Attribute* perm_attr = ctx.node().attr("perm");
  cpu_movement::DimVec perm;
  if (perm_attr != nullptr) perm.assign(perm_attr->ints.begin(), perm_attr->ints.end());
  if (perm.empty())
    for (int64_t d = in.rank() - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != in.rank())
    return ctx.Error(absl::StrCat("perm has ", perm.size(), " entries for rank ", in.rank()));
  for (int64_t& p : perm) {
    if (p < 0) p += in.rank();
    if (p < 0 || p >= in.rank()) return ctx.Error("perm entry out of range");
  }
  for (int64_t d = 0; d < in.rank(); ++d)
    if (out.dims[d] != in.dims[perm[d]]) return ctx.Error("output dims do not match perm");
  cpu_movement::TransposeCopy(out.data, in.data, DTypeSize(in.dtype), in.dims, perm);
  return absl::OkStatus();
}

// Expand: numpy broadcast of the input to the output dims; broadcast dims read with stride 0.
absl::Status Expand(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, in.dtype));
  const int64_t r = out.rank(), off = r - in.rank();
  if (off < 0) return ctx.Error("output rank is below the input rank");
  const cpu_movement::DimVec in_strides = StridesOf(in.dims);
  cpu_movement::DimVec strides(r, 0);
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (in.dims[d] == out.dims[off + d]) {
      strides[off + d] = in_strides[d];
    } else if (in.dims[d] != 1) {
      return ctx.Error(absl::StrCat("input dim ", d, " of size ", in.dims[d],
                                    " does not broadcast to ", out.dims[off + d]));
    }
  }
  StridedCopy(out.data, in.data, DTypeSize(in.dtype), out.dims, strides);
  return absl::OkStatus();
}

// Tile: output dim d of size k*n is viewed as (k, n) with source strides (0, stride_d).
absl::Status Tile(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  MT_RETURN_IF_ERROR(CheckElementSize(ctx, in.dtype));
  if (out.rank() != in.rank()) return ctx.Error("output rank differs from the input rank");
  const cpu_movement::DimVec in_strides = StridesOf(in.dims);
  cpu_movement::DimVec dims, strides;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (in.dims[d] == 0) return absl::OkStatus();  // the output is empty too
    if (out.dims[d] % in.dims[d] != 0) return ctx.Error("output dims are not multiples of input");
    dims.insert(dims.end(), {out.dims[d] / in.dims[d], in.dims[d]});
    strides.insert(strides.end(), {0, in_strides[d]});
  }
  StridedCopy(out.data, in.data, DTypeSize(in.dtype), dims, strides);
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(movement_layout) {
  for (const char* op : {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    r.Register({op, "", DeviceType::kCPU, {}, 0, FnKernel(SameBytes)});
  r.Register({"Transpose", "", DeviceType::kCPU, {}, 0, FnKernel(Transpose)});
  r.Register({"Expand", "", DeviceType::kCPU, {}, 0, FnKernel(Expand)});
  r.Register({"Tile", "", DeviceType::kCPU, {}, 0, FnKernel(Tile)});
}

}  // namespace mixtrain
