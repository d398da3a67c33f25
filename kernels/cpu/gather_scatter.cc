// CPU kernels for the less common indexing ops: GatherElements, ScatterElements (also under its
// opset-9 name Scatter), GatherND, ScatterND, OneHot, EyeLike, TopK and MaxUnpool.
//
// Data is moved as raw elements of DTypeSize bytes, so one kernel serves every dtype. Indices
// may be negative (counted from the end); an index out of range is a user error naming the node.
// Scatter reductions and TopK's comparisons go through double (CastBuffer), which is exact for
// every dtype but huge int64s. These ops are rare in training graphs, so the loops stay plain.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "graph/ops/movement_params.h"
#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * dims[d + 1];
  return s;
}

absl::StatusOr<int64_t> Wrap(const KernelContext& ctx, int64_t i, int64_t size) {
  if (i < -size || i >= size)
    return ctx.Error(absl::StrCat("index ", i, " is out of range for a dim of size ", size));
  return i < 0 ? i + size : i;
}

// GatherElements/ScatterElements: the element of `data` (strides `ds`) at coordinates `c` of the
// indices tensor, with coordinate `axis` replaced by the index value `index`.
absl::StatusOr<int64_t> ElementOffset(const KernelContext& ctx, const TensorView& data,
                                      const std::vector<int64_t>& ds, int64_t axis,
                                      const std::vector<int64_t>& c, int64_t index) {
  MT_ASSIGN_OR_RETURN(int64_t j, Wrap(ctx, index, data.dims[axis]));
  int64_t off = 0;
  for (size_t d = 0; d < c.size(); ++d) {
    if (static_cast<int64_t>(d) != axis && c[d] >= data.dims[d])
      return ctx.Error("indices are larger than the data outside the axis");
    off += (static_cast<int64_t>(d) == axis ? j : c[d]) * ds[d];
  }
  return off;
}

absl::Status NeedInts(const KernelContext& ctx, const TensorView* t) {
  if (t == nullptr || (t->dtype != DType::kI32 && t->dtype != DType::kI64))
    return ctx.Error("indices must be an int32 or int64 tensor");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Axis(const KernelContext& ctx, int64_t dflt, int64_t rank) {
  auto a = movement::NormalizeAxis(ctx.node().attr_int("axis", dflt), rank);
  if (!a.ok()) return ctx.Error(a.status().message());
  return *a;
}

std::vector<double> ToDouble(const KernelContext& ctx, const TensorView& t, absl::Status* st) {
  std::vector<double> v(t.numel());
  *st = cpu_ew::CastBuffer(ctx, t.dtype, t.data, DType::kF64, v.data(), t.numel());
  return v;
}

// Calls fn(i, coords) for every element i of a tensor of `dims`, coords its multi-index.
template <typename Fn>
void ForEachCoord(const std::vector<int64_t>& dims, Fn&& fn) {
  std::vector<int64_t> c(dims.size(), 0);
  const int64_t n = NumElements(dims);
  for (int64_t i = 0; i < n; ++i) {
    fn(i, c);
    for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
      if (++c[d] < dims[d]) break;
      c[d] = 0;
    }
  }
}

absl::Status GatherElementsKernel(KernelContext& ctx) {
  const TensorView* data = ctx.input(0);
  const TensorView* idx = ctx.input(1);
  TensorView* out = ctx.output(0);
  MT_RETURN_IF_ERROR(NeedInts(ctx, idx));
  if (data == nullptr || out == nullptr || data->rank() != idx->rank() || out->dims != idx->dims)
    return ctx.Error("data and indices must have one rank; the output has the indices' shape");
  MT_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, 0, data->rank()));
  const std::vector<int64_t> ds = Strides(data->dims);
  const size_t es = DTypeSize(data->dtype);
  absl::Status st;
  ForEachCoord(idx->dims, [&](int64_t i, const std::vector<int64_t>& c) {
    if (!st.ok()) return;
    auto src = ElementOffset(ctx, *data, ds, axis, c, IntAt(*idx, i));
    if (!src.ok()) {
      st = src.status();
      return;
    }
    std::memcpy(out->as<char>() + i * es, data->as<char>() + *src * es, es);
  });
  return st;
}

// Writes update u into out[dst] under `reduction` (none, add, mul, max, min); the reduced forms
// work on the double copies and are converted back at the end.
struct Scatterer {
  std::string reduction;
  size_t es;
  std::vector<double> outd, upd;

  void Put(TensorView& out, int64_t dst, const TensorView& updates, int64_t u) {
    if (reduction == "none") {
      std::memcpy(out.as<char>() + dst * es, updates.as<char>() + u * es, es);
      return;
    }
    double& o = outd[dst];
    const double v = upd[u];
    if (reduction == "add") o += v;
    else if (reduction == "mul") o *= v;
    else if (reduction == "max") o = std::max(o, v);
    else o = std::min(o, v);
  }
};

absl::StatusOr<Scatterer> StartScatter(KernelContext& ctx, const TensorView& data,
                                       const TensorView& updates, TensorView& out) {
  Scatterer s{ctx.node().attr_string("reduction", "none"), DTypeSize(data.dtype), {}, {}};
  if (s.reduction != "none" && s.reduction != "add" && s.reduction != "mul" &&
      s.reduction != "max" && s.reduction != "min")
    return ctx.Error(absl::StrCat("unknown reduction '", s.reduction, "'"));
  if (updates.dtype != data.dtype || out.dims != data.dims)
    return ctx.Error("updates must have the data's dtype; the output the data's shape");
  std::memcpy(out.data, data.data, data.nbytes());
  if (s.reduction != "none") {
    absl::Status st;
    s.outd = ToDouble(ctx, data, &st);
    MT_RETURN_IF_ERROR(st);
    s.upd = ToDouble(ctx, updates, &st);
    MT_RETURN_IF_ERROR(st);
  }
  return s;
}

absl::Status FinishScatter(KernelContext& ctx, const Scatterer& s, TensorView& out) {
  if (s.reduction == "none") return absl::OkStatus();
  return cpu_ew::CastBuffer(ctx, DType::kF64, s.outd.data(), out.dtype, out.data, out.numel());
}

absl::Status ScatterElementsKernel(KernelContext& ctx) {
  const TensorView* data = ctx.input(0);
  const TensorView* idx = ctx.input(1);
  const TensorView* upd = ctx.input(2);
  TensorView* out = ctx.output(0);
  MT_RETURN_IF_ERROR(NeedInts(ctx, idx));
  if (data == nullptr || upd == nullptr || out == nullptr || upd->dims != idx->dims ||
      data->rank() != idx->rank())
    return ctx.Error("needs data, indices and updates of one rank (indices' shape = updates')");
  MT_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, 0, data->rank()));
  MT_ASSIGN_OR_RETURN(Scatterer s, StartScatter(ctx, *data, *upd, *out));
  const std::vector<int64_t> ds = Strides(data->dims);
  absl::Status st;
  ForEachCoord(idx->dims, [&](int64_t i, const std::vector<int64_t>& c) {
    if (!st.ok()) return;
    auto dst = ElementOffset(ctx, *data, ds, axis, c, IntAt(*idx, i));
    if (!dst.ok()) {
      st = dst.status();
      return;
    }
    s.Put(*out, *dst, *upd, i);
  });
  MT_RETURN_IF_ERROR(st);
  return FinishScatter(ctx, s, *out);
}

// The data offset (in elements) of index tuple t of GatherND/ScatterND: tuples of q indices
// address data dims [b, b + q) within batch t / tuples_per_batch.
absl::StatusOr<int64_t> TupleOffset(const KernelContext& ctx, const TensorView& data,
                                    const TensorView& idx, int64_t b, int64_t t,
                                    int64_t tuples_per_batch, const std::vector<int64_t>& ds) {
  const int64_t q = idx.dims.back();
  int64_t off = (t / tuples_per_batch) * (b > 0 ? ds[b - 1] : 0);
  for (int64_t j = 0; j < q; ++j) {
    MT_ASSIGN_OR_RETURN(int64_t k, Wrap(ctx, IntAt(idx, t * q + j), data.dims[b + j]));
    off += k * ds[b + j];
  }
  return off;
}

absl::Status GatherNDKernel(KernelContext& ctx) {
  const TensorView* data = ctx.input(0);
  const TensorView* idx = ctx.input(1);
  TensorView* out = ctx.output(0);
  MT_RETURN_IF_ERROR(NeedInts(ctx, idx));
  const int64_t b = ctx.node().attr_int("batch_dims", 0);
  if (data == nullptr || out == nullptr || idx->rank() < 1 || b < 0 || b >= idx->rank() ||
      b + idx->dims.back() > data->rank())
    return ctx.Error("indices' last dim plus batch_dims exceeds the data's rank");
  const int64_t q = idx->dims.back();
  const int64_t tuples = q > 0 ? idx->numel() / q : NumElements({idx->dims.begin(), idx->dims.end() - 1});
  const int64_t batches = NumElements({idx->dims.begin(), idx->dims.begin() + b});
  const int64_t slice = NumElements({data->dims.begin() + b + q, data->dims.end()});
  if (tuples * slice != out->numel()) return ctx.Error("output size does not match the indices");
  const std::vector<int64_t> ds = Strides(data->dims);
  const size_t es = DTypeSize(data->dtype);
  for (int64_t t = 0; t < tuples; ++t) {
    MT_ASSIGN_OR_RETURN(int64_t off, TupleOffset(ctx, *data, *idx, b, t, tuples / batches, ds));
    std::memcpy(out->as<char>() + t * slice * es, data->as<char>() + off * es, slice * es);
  }
  return absl::OkStatus();
}

absl::Status ScatterNDKernel(KernelContext& ctx) {
  const TensorView* data = ctx.input(0);
  const TensorView* idx = ctx.input(1);
  const TensorView* upd = ctx.input(2);
  TensorView* out = ctx.output(0);
  MT_RETURN_IF_ERROR(NeedInts(ctx, idx));
  if (data == nullptr || upd == nullptr || out == nullptr || idx->rank() < 1 ||
      idx->dims.back() > data->rank())
    return ctx.Error("needs data, indices (last dim <= data's rank) and updates");
  const int64_t q = idx->dims.back();
  const int64_t tuples = NumElements({idx->dims.begin(), idx->dims.end() - 1});
  const int64_t slice = NumElements({data->dims.begin() + q, data->dims.end()});
  if (tuples * slice != upd->numel()) return ctx.Error("updates do not match the indices");
  MT_ASSIGN_OR_RETURN(Scatterer s, StartScatter(ctx, *data, *upd, *out));
  const std::vector<int64_t> ds = Strides(data->dims);
  for (int64_t t = 0; t < tuples; ++t) {
    MT_ASSIGN_OR_RETURN(int64_t off, TupleOffset(ctx, *data, *idx, 0, t, std::max<int64_t>(tuples, 1), ds));
    for (int64_t e = 0; e < slice; ++e) s.Put(*out, off + e, *upd, t * slice + e);
  }
  return FinishScatter(ctx, s, *out);
}

// OneHot(indices, depth, values=[off, on]): indices of any numeric dtype (truncated), negative
// ones count from depth; out-of-range ones leave the row all `off`.
absl::Status OneHotKernel(KernelContext& ctx) {
  const TensorView* idx = ctx.input(0);
  const TensorView* depth_t = ctx.input(1);
  const TensorView* values = ctx.input(2);
  TensorView* out = ctx.output(0);
  if (idx == nullptr || depth_t == nullptr || values == nullptr || out == nullptr ||
      depth_t->numel() != 1 || values->numel() != 2 || values->dtype != out->dtype)
    return ctx.Error("needs indices, a one-element depth and two values of the output's dtype");
  absl::Status st;
  const std::vector<double> ix = ToDouble(ctx, *idx, &st);
  MT_RETURN_IF_ERROR(st);
  const int64_t depth = static_cast<int64_t>(ToDouble(ctx, *depth_t, &st)[0]);
  MT_RETURN_IF_ERROR(st);
  MT_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, -1, idx->rank() + 1));
  const int64_t outer = NumElements({idx->dims.begin(), idx->dims.begin() + axis});
  const int64_t inner = idx->numel() / std::max<int64_t>(outer, 1);
  if (outer * depth * inner != out->numel()) return ctx.Error("output size does not match depth");
  const size_t es = DTypeSize(out->dtype);
  const char* off_v = values->as<char>();
  const char* on_v = off_v + es;
  for (int64_t i = 0; i < out->numel(); ++i) std::memcpy(out->as<char>() + i * es, off_v, es);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t k = static_cast<int64_t>(ix[o * inner + i]);
      if (k < 0) k += depth;
      if (k < 0 || k >= depth) continue;
      std::memcpy(out->as<char>() + ((o * depth + k) * inner + i) * es, on_v, es);
    }
  }
  return absl::OkStatus();
}

// EyeLike: ones on the diagonal shifted by k, zeros elsewhere (all-zero bits are 0 in every dtype).
absl::Status EyeLikeKernel(KernelContext& ctx) {
  TensorView* out = ctx.output(0);
  if (out == nullptr || out->rank() != 2) return ctx.Error("output must be 2-D");
  const int64_t k = ctx.node().attr_int("k", 0);
  const size_t es = DTypeSize(out->dtype);
  std::memset(out->data, 0, out->nbytes());
  const double one_d = 1.0;
  char one[8];
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, DType::kF64, &one_d, out->dtype, one, 1));
  for (int64_t i = 0; i < out->dims[0]; ++i) {
    const int64_t j = i + k;
    if (j >= 0 && j < out->dims[1]) std::memcpy(out->as<char>() + (i * out->dims[1] + j) * es, one, es);
  }
  return absl::OkStatus();
}

// TopK along `axis`: the K largest (or smallest) values, sorted, ties broken by the lower index
// (ONNX's rule); Indices are int64.
absl::Status TopKKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* vals = ctx.output(0);
  TensorView* inds = ctx.output(1);
  if (x == nullptr || vals == nullptr) return ctx.Error("needs X and output Values");
  MT_ASSIGN_OR_RETURN(int64_t axis, Axis(ctx, -1, x->rank()));
  int64_t k = ctx.node().attr_int("k", -1);
  if (const TensorView* kt = ctx.input(1)) {
    if (kt->numel() != 1 || (kt->dtype != DType::kI64 && kt->dtype != DType::kI32))
      return ctx.Error("K must be a one-element int64 tensor");
    k = IntAt(*kt, 0);
  }
  const AxisView v = ViewAroundAxis(x->dims, axis);
  if (k < 0 || k > v.n || vals->numel() != v.outer * k * v.inner ||
      (inds != nullptr && inds->numel() != vals->numel()))
    return ctx.Error(absl::StrCat("K=", k, " does not fit the axis of size ", v.n));
  const bool largest = ctx.node().attr_int("largest", 1) != 0;
  absl::Status st;
  const std::vector<double> xd = ToDouble(ctx, *x, &st);
  MT_RETURN_IF_ERROR(st);
  const size_t es = DTypeSize(x->dtype);
  std::vector<int64_t> order(v.n);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t base = o * v.n * v.inner + i;
      auto at = [&](int64_t j) { return xd[base + j * v.inner]; };
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        if (at(a) != at(b)) return largest ? at(a) > at(b) : at(a) < at(b);
        return a < b;
      });
      for (int64_t j = 0; j < k; ++j) {
        const int64_t dst = (o * k + j) * v.inner + i;
        std::memcpy(vals->as<char>() + dst * es, x->as<char>() + (base + order[j] * v.inner) * es, es);
        if (inds != nullptr) inds->as<int64_t>()[dst] = order[j];
      }
    }
  }
  return absl::OkStatus();
}

// MaxUnpool(X, I): X's values at the flat positions I (MaxPool's Indices) of the default
// unpooled shape ((in - 1) * stride + kernel - pads per spatial dim), zeros elsewhere. A larger
// output_shape holds that result in its leading corner, as ONNX's reference pads it.
absl::Status MaxUnpoolKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* idx = ctx.input(1);
  TensorView* y = ctx.output(0);
  MT_RETURN_IF_ERROR(NeedInts(ctx, idx));
  if (x == nullptr || y == nullptr || idx->numel() != x->numel() || y->dtype != x->dtype ||
      x->rank() < 3 || y->rank() != x->rank())
    return ctx.Error("needs X [N, C, ...], indices of X's shape and an output of X's rank");
  const int64_t spatial = x->rank() - 2;
  const std::vector<int64_t> k = ctx.node().attr_ints("kernel_shape");
  const std::vector<int64_t> strides = ctx.node().attr_ints("strides", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> pads = ctx.node().attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  if (static_cast<int64_t>(k.size()) != spatial || static_cast<int64_t>(strides.size()) != spatial ||
      static_cast<int64_t>(pads.size()) != 2 * spatial)
    return ctx.Error("kernel_shape, strides and pads must match the spatial rank");
  std::vector<int64_t> dflt(x->dims.begin(), x->dims.begin() + 2);
  for (int64_t d = 0; d < spatial; ++d)
    dflt.push_back((x->dims[2 + d] - 1) * strides[d] + k[d] - pads[d] - pads[spatial + d]);
  for (int64_t d = 0; d < x->rank(); ++d)
    if (y->dims[d] < dflt[d]) return ctx.Error("output_shape is smaller than the unpooled shape");
  const size_t es = DTypeSize(x->dtype);
  std::memset(y->data, 0, y->nbytes());
  const std::vector<int64_t> ys = Strides(y->dims), ds = Strides(dflt);
  const int64_t n = NumElements(dflt);
  for (int64_t i = 0; i < x->numel(); ++i) {
    int64_t at = IntAt(*idx, i);
    if (at < 0 || at >= n) return ctx.Error(absl::StrCat("index ", at, " is outside the unpooled shape"));
    int64_t dst = 0;
    for (size_t d = 0; d < dflt.size(); ++d) {
      dst += (at / ds[d]) * ys[d];
      at %= ds[d];
    }
    std::memcpy(y->as<char>() + dst * es, x->as<char>() + i * es, es);
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_gather_scatter) {
  const auto cpu = DeviceType::kCPU;
  r.Register({"GatherElements", "", cpu, {}, 0, FnKernel(GatherElementsKernel)});
  r.Register({"ScatterElements", "", cpu, {}, 0, FnKernel(ScatterElementsKernel)});
  r.Register({"Scatter", "", cpu, {}, 0, FnKernel(ScatterElementsKernel)});
  r.Register({"GatherND", "", cpu, {}, 0, FnKernel(GatherNDKernel)});
  r.Register({"ScatterND", "", cpu, {}, 0, FnKernel(ScatterNDKernel)});
  r.Register({"OneHot", "", cpu, {}, 0, FnKernel(OneHotKernel)});
  r.Register({"EyeLike", "", cpu, {}, -1, FnKernel(EyeLikeKernel)});
  r.Register({"TopK", "", cpu, {}, 0, FnKernel(TopKKernel)});
  r.Register({"MaxUnpool", "", cpu, {}, 0, FnKernel(MaxUnpoolKernel)});
}

}  // namespace mixtrain::cpu
