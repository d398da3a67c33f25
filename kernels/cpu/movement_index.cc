// CPU kernels for ops that select or join parts of tensors: Concat, Split, Slice, Gather, Pad.
// Contiguous runs are memcpy'd; Slice is one strided copy (negative steps are negative strides);
// Pad is an index-map copy covering constant, edge, reflect and wrap modes. Every dtype.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "kernels/common/join.h"
#include "kernels/cpu/movement_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain {
namespace {

using cpu_movement::ReadInts;
using cpu_movement::StridesOf;

// Prefixes a parameter error with the node's name and op.
absl::Status NodeError(const KernelContext& ctx, const absl::Status& st) {
  return ctx.Error(st.message());
}

int64_t Product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= dims[i];
  return p;
}

// Row bytes below which one thread copies everything (cheaper than waking the other).
constexpr int64_t kGrainBytes = 64 * 1024;

// Concat and Split: every part's chunk of each row of the whole (kernels/common/join.h).
template <bool kConcat>
absl::Status JoinOrSplit(KernelContext& ctx) {
  MT_ASSIGN_OR_RETURN(join::Parts parts, join::PartsOf(ctx, kConcat));
  const TensorView& whole = kConcat ? *ctx.output(0) : *ctx.input(0);
  MT_ASSIGN_OR_RETURN(join::Layout l, join::MakeLayout(ctx, whole, parts));
  auto* w = static_cast<uint8_t*>(whole.data);
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o)
      for (size_t i = 0; i < parts.size(); ++i) {
        auto* p = static_cast<uint8_t*>(parts[i]->data) + o * l.chunk[i];
        uint8_t* q = w + o * l.row + l.start[i];
        if (kConcat) std::memcpy(q, p, l.chunk[i]); else std::memcpy(p, q, l.chunk[i]);
      }
  };
  if (l.outer == 1) {  // one chunk per part: let each copy use both cores
    for (size_t i = 0; i < parts.size(); ++i) {
      auto* p = static_cast<uint8_t*>(parts[i]->data);
      if (kConcat) cpu_movement::CopyBytes(w + l.start[i], p, l.chunk[i]);
      else cpu_movement::CopyBytes(p, w + l.start[i], l.chunk[i]);
    }
  } else {
    ParallelFor(l.outer, std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(l.row, 1)), run);
  }
  return absl::OkStatus();
}

// Reads an optional int input, or the attribute of the same name (Slice before opset 10).
absl::StatusOr<std::vector<int64_t>> IntsArg(const KernelContext& ctx, size_t input,
                                             const char* attr) {
  if (ctx.node().has_attr(attr)) return ctx.node().attr_ints(attr);
  if (ctx.input(input) == nullptr) return std::vector<int64_t>{};
  return ReadInts(ctx, *ctx.input(input));
}

absl::Status Slice(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  const size_t esize = DTypeSize(in.dtype);
  if (esize == 0) return ctx.Error(absl::StrCat("cannot move ", DTypeName(in.dtype), " tensors"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> starts, IntsArg(ctx, 1, "starts"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> ends, IntsArg(ctx, 2, "ends"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, IntsArg(ctx, 3, "axes"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> steps, IntsArg(ctx, 4, "steps"));
  auto plan = movement::PlanSlice(in.dims, starts, ends, axes, steps);
  if (!plan.ok()) return NodeError(ctx, plan.status());
  if (plan->count != out.dims) return ctx.Error("output dims do not match the slice");
  const cpu_movement::DimVec in_strides = StridesOf(in.dims);
  cpu_movement::DimVec strides(in.rank());
  int64_t base = 0;
  for (int64_t d = 0; d < in.rank(); ++d) {
    strides[d] = in_strides[d] * plan->step[d];
    base += plan->start[d] * in_strides[d];
  }
  cpu_movement::StridedCopy(out.data, static_cast<const uint8_t*>(in.data) + base * esize, esize,
                            out.dims, strides);
  return absl::OkStatus();
}

absl::Status Gather(KernelContext& ctx) {
  const TensorView& data = *ctx.input(0);
  const TensorView& idx_view = *ctx.input(1);
  TensorView& out = *ctx.output(0);
  const size_t esize = DTypeSize(data.dtype);
  if (esize == 0) return ctx.Error(absl::StrCat("cannot move ", DTypeName(data.dtype), " tensors"));
  auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", 0), data.rank());
  if (!axis.ok()) return NodeError(ctx, axis.status());
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadInts(ctx, idx_view));
  const int64_t n = data.dims[*axis];
  for (int64_t& i : idx) {
    if (i < -n || i >= n)
      return ctx.Error(absl::StrCat("index ", i, " is out of range for axis ", *axis, " of size ", n));
    if (i < 0) i += n;
  }
  const int64_t outer = Product(data.dims, 0, *axis);
  const int64_t inner_bytes = Product(data.dims, *axis + 1, data.dims.size()) * esize;
  const int64_t k = static_cast<int64_t>(idx.size());
  const auto* src = static_cast<const uint8_t*>(data.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  ParallelFor(outer * k, std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(inner_bytes, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t w = b; w < e; ++w) {
                  const int64_t o = w / k, j = w % k;
                  std::memcpy(dst + w * inner_bytes, src + (o * n + idx[j]) * inner_bytes,
                              inner_bytes);
                }
              });
  return absl::OkStatus();
}

absl::Status Pad(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  const size_t esize = DTypeSize(in.dtype);
  if (esize == 0) return ctx.Error(absl::StrCat("cannot move ", DTypeName(in.dtype), " tensors"));
  const std::string mode = ctx.node().attr_string("mode", "constant");
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> pads, IntsArg(ctx, 1, "pads"));
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, IntsArg(ctx, 3, "axes"));
  auto full = movement::ExpandPads(in.rank(), pads, axes);
  if (!full.ok()) return NodeError(ctx, full.status());
  std::vector<uint8_t> fill(esize, 0);
  if (const TensorView* v = ctx.input(2); v != nullptr && !ctx.node().has_attr("pads")) {
    if (v->dtype != in.dtype || v->numel() != 1)
      return ctx.Error("constant_value must be one element of the data's dtype");
    std::memcpy(fill.data(), v->data, esize);
  } else if (ctx.node().has_attr("value")) {  // opset < 11
    fill = cpu_movement::ScalarBytes(in.dtype, ctx.node().attr_float("value", 0));
  }
  const int64_t r = in.rank();
  std::vector<std::vector<int64_t>> maps(r);
  for (int64_t d = 0; d < r; ++d) {
    const int64_t begin = (*full)[d], n = in.dims[d];
    if (out.dims[d] != n + begin + (*full)[r + d]) return ctx.Error("output dims do not match pads");
    if (mode != "constant" && n == 0 && out.dims[d] > 0)
      return ctx.Error(absl::StrCat("cannot ", mode, "-pad the empty dim ", d));
    maps[d].resize(out.dims[d]);
    for (int64_t o = 0; o < out.dims[d]; ++o) maps[d][o] = cpu_movement::PadSource(mode, o, begin, n);
  }
  cpu_movement::IndexMapCopy(out.data, in.data, esize, in.dims, out.dims, maps, fill.data());
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(movement_index) {
  r.Register({"Concat", "", DeviceType::kCPU, {}, 0, FnKernel(JoinOrSplit<true>)});
  r.Register({"Split", "", DeviceType::kCPU, {}, 0, FnKernel(JoinOrSplit<false>)});
  r.Register({"Slice", "", DeviceType::kCPU, {}, 0, FnKernel(Slice)});
  r.Register({"Gather", "", DeviceType::kCPU, {}, 0, FnKernel(Gather)});
  r.Register({"Pad", "", DeviceType::kCPU, {}, 0, FnKernel(Pad)});
}

}  // namespace mixtrain
