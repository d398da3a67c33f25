// CPU kernels for the less common layout ops: Trilu (keep one triangle of the last two dims),
// DepthToSpace (DCR and CRD modes), SpaceToDepth and ReverseSequence. Elements move as raw
// DTypeSize-byte values, so every dtype is served by one kernel.
#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

// Trilu(x, k = 0): upper keeps j - i >= k, lower keeps j - i <= k, per matrix of the last two
// dims; the rest becomes zero (all-zero bits, 0 in every dtype).
absl::Status TriluKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr || x->rank() < 2 || x->dims != y->dims)
    return ctx.Error("needs an input of rank >= 2 and an output of its shape");
  int64_t k = 0;
  if (const TensorView* kt = ctx.input(1)) {
    if (kt->numel() != 1 || (kt->dtype != DType::kI64 && kt->dtype != DType::kI32))
      return ctx.Error("k must be a one-element int64 tensor");
    k = IntAt(*kt, 0);
  }
  const bool upper = ctx.node().attr_int("upper", 1) != 0;
  const int64_t rows = x->dims[x->rank() - 2], cols = x->dims.back();
  const int64_t mats = x->numel() / std::max<int64_t>(rows * cols, 1);
  const size_t es = DTypeSize(x->dtype);
  for (int64_t m = 0; m < mats; ++m) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t at = (m * rows + i) * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const bool keep = upper ? j - i >= k : j - i <= k;
        char* dst = y->as<char>() + (at + j) * es;
        if (keep)
          std::memcpy(dst, x->as<char>() + (at + j) * es, es);
        else
          std::memset(dst, 0, es);
      }
    }
  }
  return absl::OkStatus();
}

// The [N, C, H, W] dims of the "space" side of DepthToSpace/SpaceToDepth and the blocksize.
struct Blocks {
  int64_t n, c, h, w, b;  // c channels at full resolution h x w
};

absl::StatusOr<Blocks> BlocksOf(const KernelContext& ctx, const TensorView& space,
                                const TensorView& depth) {
  const int64_t b = ctx.node().attr_int("blocksize", 0);
  if (space.rank() != 4 || depth.rank() != 4 || b <= 0)
    return ctx.Error("needs 4-D tensors and a positive blocksize");
  Blocks k{space.dims[0], space.dims[1], space.dims[2], space.dims[3], b};
  if (depth.dims[1] != k.c * b * b || depth.dims[2] * b != k.h || depth.dims[3] * b != k.w)
    return ctx.Error("shapes do not match the blocksize");
  return k;
}

// Calls fn(space_offset, depth_offset) for every element. Depth channel of space element
// (c, hh*b + i, ww*b + j): DCR (i*b + j)*C + c; CRD c*b*b + i*b + j.
template <typename Fn>
void ForEachBlockPair(const Blocks& k, bool crd, Fn&& fn) {
  const int64_t hs = k.h / k.b, ws = k.w / k.b, cd = k.c * k.b * k.b;
  ParallelFor(k.n * k.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const int64_t n = nc / k.c, c = nc % k.c;
      for (int64_t h = 0; h < k.h; ++h) {
        for (int64_t w = 0; w < k.w; ++w) {
          const int64_t i = h % k.b, j = w % k.b;
          const int64_t ch = crd ? c * k.b * k.b + i * k.b + j : (i * k.b + j) * k.c + c;
          fn(((n * k.c + c) * k.h + h) * k.w + w, ((n * cd + ch) * hs + h / k.b) * ws + w / k.b);
        }
      }
    }
  });
}

absl::Status DepthToSpaceKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("needs input 0");
  MT_ASSIGN_OR_RETURN(Blocks k, BlocksOf(ctx, *y, *x));
  const std::string mode = ctx.node().attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return ctx.Error("mode must be 'DCR' or 'CRD'");
  const size_t es = DTypeSize(x->dtype);
  ForEachBlockPair(k, mode == "CRD", [&](int64_t s, int64_t d) {
    std::memcpy(y->as<char>() + s * es, x->as<char>() + d * es, es);
  });
  return absl::OkStatus();
}

// SpaceToDepth is DepthToSpace's DCR mode run backwards.
absl::Status SpaceToDepthKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("needs input 0");
  MT_ASSIGN_OR_RETURN(Blocks k, BlocksOf(ctx, *x, *y));
  const size_t es = DTypeSize(x->dtype);
  ForEachBlockPair(k, false, [&](int64_t s, int64_t d) {
    std::memcpy(y->as<char>() + d * es, x->as<char>() + s * es, es);
  });
  return absl::OkStatus();
}

// ReverseSequence(input, sequence_lens): for batch b (along batch_axis), the first
// sequence_lens[b] steps along time_axis come in reverse order; the rest are copied.
absl::Status ReverseSequenceKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* lens = ctx.input(1);
  TensorView* y = ctx.output(0);
  if (x == nullptr || lens == nullptr || y == nullptr || x->rank() < 2 || x->dims != y->dims)
    return ctx.Error("needs input of rank >= 2, sequence_lens and an output of the input's shape");
  const int64_t ta = ctx.node().attr_int("time_axis", 0), ba = ctx.node().attr_int("batch_axis", 1);
  if (!((ta == 0 && ba == 1) || (ta == 1 && ba == 0)))
    return ctx.Error("time_axis and batch_axis must be 0 and 1 in some order");
  const int64_t steps = x->dims[ta], batch = x->dims[ba];
  if (lens->numel() != batch) return ctx.Error("sequence_lens must have one entry per batch");
  const int64_t inner = x->numel() / std::max<int64_t>(steps * batch, 1);
  const size_t es = DTypeSize(x->dtype);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = IntAt(*lens, b);
    if (len < 0 || len > steps) return ctx.Error(absl::StrCat("sequence length ", len, " is out of range"));
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t src_t = t < len ? len - 1 - t : t;
      auto offset = [&](int64_t tt) { return (ta == 0 ? tt * batch + b : b * steps + tt) * inner; };
      std::memcpy(y->as<char>() + offset(t) * es, x->as<char>() + offset(src_t) * es, inner * es);
    }
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_movement_rearrange) {
  const auto cpu = DeviceType::kCPU;
  r.Register({"Trilu", "", cpu, {}, 0, FnKernel(TriluKernel)});
  r.Register({"DepthToSpace", "", cpu, {}, 0, FnKernel(DepthToSpaceKernel)});
  r.Register({"SpaceToDepth", "", cpu, {}, 0, FnKernel(SpaceToDepthKernel)});
  r.Register({"ReverseSequence", "", cpu, {}, 0, FnKernel(ReverseSequenceKernel)});
}

}  // namespace mixtrain::cpu
