// Shape-inference rules for the data-movement and shape ops (Reshape, Flatten, Transpose, Concat,
// Split, Slice, Gather, Squeeze, Unsqueeze, Expand, Tile, Pad, Identity, Dropout). Where an op's
// output shape depends on an input's contents (Reshape's shape, Slice's starts...), the rule reads
// TypeInfo::value; when that value is unknown it still gives the rank where it can, with unknown
// dims. Attribute forms (older opsets) and input forms (newer) are told apart by what the node
// carries, so one rule serves opsets 11..21 and the kernels use the same logic.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_ops_util.h"
#include "graph/sym_dim.h"
#include "graph/ops/movement_params.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

using movement_infer::DimsOf;
using movement_infer::IntsInput;
using movement_infer::SymIntsInput;
using movement_infer::Product;
using movement_infer::UnknownDims;
using movement_infer::UnknownDimsOfLength;
using movement_infer::Wrap;

absl::Status InferIdentity(InferContext& ctx) {
  ctx.output(0).dtype = ctx.input(0).dtype;
  ctx.output(0).shape = ctx.input(0).shape;
  return absl::OkStatus();
}

// Removes from `a` and `b` the symbolic dims they share (by name), so that what is left can be
// compared by known products: Reshape [N, T, C] -> [0, 0, H, -1] resolves -1 = C / H.
void CancelSharedSymbols(std::vector<Dim>& a, std::vector<Dim>& b) {
  for (auto it = a.begin(); it != a.end();) {
    auto jt = std::find_if(b.begin(), b.end(), [&](const Dim& d) {
      return !it->known() && !it->symbol.empty() && d.symbol == it->symbol;
    });
    if (jt != b.end()) {
      b.erase(jt);
      it = a.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status InferReshape(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  std::optional<SymInts> target = SymIntsInput(ctx, 1);
  if (!target) {
    ctx.output(0).shape = UnknownDimsOfLength(ctx.input(1).shape);
    return absl::OkStatus();
  }
  const bool allowzero = ctx.node().attr_int("allowzero", 0) != 0;
  std::vector<Dim> out(target->size());
  int64_t infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < target->size(); ++i) {
    if (!(*target)[i].known()) {  // a symbol (the dim keeps its name) or unknown
      out[i] = Dim::Symbol((*target)[i].symbol);
      continue;
    }
    int64_t v = *(*target)[i].value;
    if (v == -1) {
      if (infer_at >= 0) return ctx.Error("shape has more than one -1");
      infer_at = static_cast<int64_t>(i);
    } else if (v < -1) {
      return ctx.Error(absl::StrCat("shape entry ", v, " is invalid"));
    } else if (v == 0 && !allowzero) {
      if (in.shape.rank_known && static_cast<int64_t>(i) >= in.shape.rank())
        return ctx.Error(absl::StrCat("shape entry ", i, " is 0 but the input has rank ",
                                      in.shape.rank()));
      out[i] = in.shape.rank_known ? in.shape.dims[i] : Dim();
    } else {
      has_zero |= v == 0;
      out[i] = v;
    }
  }
  if (allowzero && has_zero && infer_at >= 0)
    return ctx.Error("shape has both 0 and -1 while allowzero is set");
  if (in.shape.rank_known) {
    std::vector<Dim> rest_in = in.shape.dims, rest_out = out;
    if (infer_at >= 0) rest_out.erase(rest_out.begin() + infer_at);
    CancelSharedSymbols(rest_in, rest_out);
    bool in_known = std::all_of(rest_in.begin(), rest_in.end(), [](const Dim& d) { return d.known(); });
    bool out_known =
        std::all_of(rest_out.begin(), rest_out.end(), [](const Dim& d) { return d.known(); });
    if (in_known && out_known) {
      int64_t pin = 1, pout = 1;
      bool overflow = false;
      for (const Dim& d : rest_in) overflow |= __builtin_mul_overflow(pin, d.value, &pin);
      for (const Dim& d : rest_out) overflow |= __builtin_mul_overflow(pout, d.value, &pout);
      if (overflow)
        return ctx.Error(absl::StrCat("cannot reshape ", in.shape.ToString(), " to ", Shape(out).ToString(),
                                      ": the element count overflows int64"));
      if (infer_at >= 0) {
        if (pout == 0 ? pin != 0 : pin % pout != 0)
          return ctx.Error(absl::StrCat("cannot reshape ", in.shape.ToString(), " to ",
                                        Shape(out).ToString(), " (-1 is not integral)"));
        out[infer_at] = pout == 0 ? 0 : pin / pout;
      } else if (pin != pout) {
        return ctx.Error(absl::StrCat("cannot reshape ", in.shape.ToString(), " to ",
                                      Shape(out).ToString(), ": element counts differ"));
      }
    } else if (infer_at >= 0) {
      // Symbolic: [64, N, 256] -> [64, -1, 64] makes the -1 "4*N" when the dims are monomials.
      std::vector<Dim> rest = out;
      rest.erase(rest.begin() + infer_at);
      std::optional<sym::Mono> pi = sym::ProductOf(in.shape.dims), po = sym::ProductOf(rest);
      if (pi && po)
        if (std::optional<sym::Mono> q = sym::Divide(*pi, *po)) out[infer_at] = sym::ToDim(*q);
    }
  }
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferFlatten(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  if (!in.shape.rank_known) {
    ctx.output(0).shape = Shape({Dim(), Dim()});
    return absl::OkStatus();
  }
  const int64_t r = in.shape.rank();
  int64_t axis = ctx.node().attr_int("axis", 1);
  if (axis < -r || axis > r)
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for rank ", r));
  if (axis < 0) axis += r;
  std::vector<Dim> lo(in.shape.dims.begin(), in.shape.dims.begin() + axis);
  std::vector<Dim> hi(in.shape.dims.begin() + axis, in.shape.dims.end());
  ctx.output(0).shape = Shape({Product(lo), Product(hi)});
  return absl::OkStatus();
}

absl::Status InferTranspose(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  if (!in.shape.rank_known) return absl::OkStatus();
  const int64_t r = in.shape.rank();
  std::vector<int64_t> perm = ctx.node().attr_ints("perm");
  if (perm.empty())
    for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != r)
    return ctx.Error(absl::StrCat("perm has ", perm.size(), " entries for rank ", r));
  MT_ASSIGN_OR_RETURN(perm, Wrap(ctx, movement::NormalizeAxes(perm, r)));
  std::vector<Dim> out;
  for (int64_t p : perm) out.push_back(in.shape.dims[p]);
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferConcat(InferContext& ctx) {
  if (ctx.num_inputs() == 0) return ctx.Error("needs at least one input");
  ctx.output(0).dtype = ctx.input(0).dtype;
  int64_t rank = -1;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TypeInfo& t = ctx.input(i);
    if (t.dtype != ctx.input(0).dtype)
      return ctx.Error(absl::StrCat("input ", i, " is ", DTypeName(t.dtype), ", input 0 is ",
                                    DTypeName(ctx.input(0).dtype)));
    if (!t.shape.rank_known) continue;
    if (rank >= 0 && t.shape.rank() != rank)
      return ctx.Error(absl::StrCat("input ", i, " has rank ", t.shape.rank(), ", expected ", rank));
    rank = t.shape.rank();
  }
  if (rank < 0) return absl::OkStatus();
  MT_ASSIGN_OR_RETURN(int64_t axis,
                      Wrap(ctx, movement::NormalizeAxis(ctx.node().attr_int("axis", 0), rank)));
  std::vector<Dim> out(rank);
  int64_t sum = 0;
  bool sum_known = true;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input(i).shape;
    if (!s.rank_known) {
      sum_known = false;
      continue;
    }
    for (int64_t d = 0; d < rank; ++d) {
      if (d == axis) continue;
      const Dim& x = s.dims[d];
      if (x.known() && out[d].known() && x.value != out[d].value)
        return ctx.Error(absl::StrCat("input ", i, " has size ", x.value, " in dim ", d,
                                      ", expected ", out[d].value));
      if (x.known() || (!out[d].known() && out[d].symbol.empty())) out[d] = x;
    }
    if (s.dims[axis].known()) sum += s.dims[axis].value; else sum_known = false;
  }
  out[axis] = sum_known ? Dim(sum) : Dim();
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferSplit(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  const size_t n_out = ctx.num_outputs();
  for (size_t i = 0; i < n_out; ++i) ctx.output(i).dtype = in.dtype;
  if (!in.shape.rank_known) return absl::OkStatus();
  MT_ASSIGN_OR_RETURN(int64_t axis, Wrap(ctx, movement::NormalizeAxis(
                                                  ctx.node().attr_int("axis", 0), in.shape.rank())));
  const Dim& dim = in.shape.dims[axis];
  std::optional<std::vector<int64_t>> sizes;
  if (ctx.has_input(1)) {
    sizes = IntsInput(ctx, 1);
  } else if (ctx.node().has_attr("split")) {
    sizes = ctx.node().attr_ints("split");
  } else if (dim.known()) {
    int64_t n = ctx.node().attr_int("num_outputs", static_cast<int64_t>(n_out));
    if (n != static_cast<int64_t>(n_out))
      return ctx.Error(absl::StrCat("num_outputs is ", n, " but the node has ", n_out, " outputs"));
    if (n <= 0) return ctx.Error("needs at least one output");
    // opset 18's num_outputs allows an uneven split (last chunk smaller); without it, even only.
    if (!ctx.node().has_attr("num_outputs") && dim.value % n != 0)
      return ctx.Error(absl::StrCat("cannot split size ", dim.value, " evenly into ", n));
    int64_t chunk = (dim.value + n - 1) / n;
    sizes.emplace();
    for (int64_t i = 0; i < n; ++i)
      sizes->push_back(std::clamp<int64_t>(dim.value - i * chunk, 0, chunk));
  }
  if (sizes) {
    if (sizes->size() != n_out)
      return ctx.Error(absl::StrCat("split has ", sizes->size(), " entries for ", n_out,
                                    " outputs"));
    int64_t total = 0;
    for (int64_t s : *sizes) {
      if (s < 0) return ctx.Error(absl::StrCat("split size ", s, " is negative"));
      total += s;
    }
    if (dim.known() && total != dim.value)
      return ctx.Error(absl::StrCat("split sizes sum to ", total, " but the axis has size ",
                                    dim.value));
  }
  for (size_t i = 0; i < n_out; ++i) {
    std::vector<Dim> d = in.shape.dims;
    d[axis] = sizes ? Dim((*sizes)[i]) : Dim();
    ctx.output(i).shape = Shape(std::move(d));
  }
  return absl::OkStatus();
}

absl::Status InferSlice(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  if (!in.shape.rank_known) return absl::OkStatus();
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (ctx.node().has_attr("starts")) {  // opset 1..9
    starts = ctx.node().attr_ints("starts");
    ends = ctx.node().attr_ints("ends");
    axes = ctx.node().attr_ints("axes");
    steps = std::vector<int64_t>{};
  } else {
    starts = IntsInput(ctx, 1);
    ends = IntsInput(ctx, 2);
    axes = ctx.has_input(3) ? IntsInput(ctx, 3) : std::vector<int64_t>{};
    steps = ctx.has_input(4) ? IntsInput(ctx, 4) : std::vector<int64_t>{};
  }
  if (!starts || !ends || !axes || !steps) {
    ctx.output(0).shape = UnknownDims(in.shape);
    return absl::OkStatus();
  }
  MT_ASSIGN_OR_RETURN(movement::SlicePlan plan,
                      Wrap(ctx, movement::PlanSlice(DimsOf(in.shape), *starts, *ends, *axes,
                                                    *steps)));
  std::vector<Dim> out(in.shape.rank());
  for (int64_t d = 0; d < in.shape.rank(); ++d)
    out[d] = plan.count[d] == movement::kSameAsInput ? in.shape.dims[d]
             : plan.count[d] < 0                      ? Dim()
                                                      : Dim(plan.count[d]);
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferGather(InferContext& ctx) {
  const TypeInfo& data = ctx.input(0);
  const TypeInfo& idx = ctx.input(1);
  ctx.output(0).dtype = data.dtype;
  if (idx.dtype != DType::kI32 && idx.dtype != DType::kI64 && idx.dtype != DType::kUndefined)
    return ctx.Error(absl::StrCat("indices must be int32 or int64, got ", DTypeName(idx.dtype)));
  if (!data.shape.rank_known || !idx.shape.rank_known) return absl::OkStatus();
  if (data.shape.rank() == 0) return ctx.Error("data must have rank >= 1");
  MT_ASSIGN_OR_RETURN(int64_t axis, Wrap(ctx, movement::NormalizeAxis(
                                                  ctx.node().attr_int("axis", 0), data.shape.rank())));
  std::vector<Dim> out(data.shape.dims.begin(), data.shape.dims.begin() + axis);
  out.insert(out.end(), idx.shape.dims.begin(), idx.shape.dims.end());
  out.insert(out.end(), data.shape.dims.begin() + axis + 1, data.shape.dims.end());
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

// Squeeze/Unsqueeze axes: the attribute (opset < 13) or input 1 (opset 13+). nullopt = unknown
// values; `count` is then the number of axes if input 1's shape says it, else -1.
std::optional<std::vector<int64_t>> AxesOf(InferContext& ctx, int64_t* count) {
  *count = -1;
  if (ctx.has_input(1)) {
    const Shape& s = ctx.input(1).shape;
    if (s.rank_known && s.rank() == 1 && s.dims[0].known()) *count = s.dims[0].value;
    return IntsInput(ctx, 1);
  }
  return ctx.node().attr_ints("axes");
}

absl::Status InferUnsqueeze(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  int64_t count;
  std::optional<std::vector<int64_t>> axes = AxesOf(ctx, &count);
  if (!in.shape.rank_known) return absl::OkStatus();
  if (!axes) {
    if (count >= 0) ctx.output(0).shape = Shape(std::vector<Dim>(in.shape.rank() + count));
    return absl::OkStatus();
  }
  const int64_t r = in.shape.rank() + static_cast<int64_t>(axes->size());
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> norm, Wrap(ctx, movement::NormalizeAxes(*axes, r)));
  std::vector<Dim> out(r);
  std::vector<bool> is_new(r, false);
  for (int64_t a : norm) is_new[a] = true;
  size_t src = 0;
  for (int64_t d = 0; d < r; ++d) out[d] = is_new[d] ? Dim(1) : in.shape.dims[src++];
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferSqueeze(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  int64_t count;
  std::optional<std::vector<int64_t>> axes = AxesOf(ctx, &count);
  if (!in.shape.rank_known) return absl::OkStatus();
  const int64_t r = in.shape.rank();
  if (!axes) {
    if (count >= 0) ctx.output(0).shape = Shape(std::vector<Dim>(std::max<int64_t>(r - count, 0)));
    return absl::OkStatus();
  }
  std::vector<bool> drop(r, false);
  if (axes->empty()) {
    for (int64_t d = 0; d < r; ++d) {
      if (!in.shape.dims[d].known()) return absl::OkStatus();  // might be 1: rank unknown
      drop[d] = in.shape.dims[d].value == 1;
    }
  } else {
    MT_ASSIGN_OR_RETURN(std::vector<int64_t> norm, Wrap(ctx, movement::NormalizeAxes(*axes, r)));
    for (int64_t a : norm) {
      const Dim& d = in.shape.dims[a];
      if (d.known() && d.value != 1)
        return ctx.Error(absl::StrCat("cannot squeeze dim ", a, " of size ", d.value));
      drop[a] = true;
    }
  }
  std::vector<Dim> out;
  for (int64_t d = 0; d < r; ++d)
    if (!drop[d]) out.push_back(in.shape.dims[d]);
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferExpand(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  std::optional<SymInts> shape = SymIntsInput(ctx, 1);
  if (!shape) {
    const Shape& s = ctx.input(1).shape;
    if (in.shape.rank_known && s.rank_known && s.rank() == 1 && s.dims[0].known())
      ctx.output(0).shape = Shape(std::vector<Dim>(std::max(in.shape.rank(), s.dims[0].value)));
    return absl::OkStatus();
  }
  std::vector<Dim> dims;
  for (const SymInt& v : *shape) {
    if (v.known() && *v.value < 0) return ctx.Error(absl::StrCat("shape entry ", *v.value, " is negative"));
    dims.push_back(v.known() ? Dim(*v.value) : Dim::Symbol(v.symbol));
  }
  auto out = BroadcastShapes(in.shape, Shape(std::move(dims)));
  if (!out.ok()) return ctx.Error(out.status().message());
  ctx.output(0).shape = *out;
  return absl::OkStatus();
}

absl::Status InferTile(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  if (!in.shape.rank_known) return absl::OkStatus();
  std::optional<std::vector<int64_t>> reps = IntsInput(ctx, 1);
  if (!reps) {
    ctx.output(0).shape = UnknownDims(in.shape);
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(reps->size()) != in.shape.rank())
    return ctx.Error(absl::StrCat("repeats has ", reps->size(), " entries for rank ",
                                  in.shape.rank()));
  std::vector<Dim> out = in.shape.dims;
  for (size_t d = 0; d < out.size(); ++d) {
    int64_t k = (*reps)[d];
    if (k < 0) return ctx.Error(absl::StrCat("repeat ", k, " is negative"));
    int64_t tiled = 0;
    if (out[d].known() && __builtin_mul_overflow(out[d].value, k, &tiled))
      return ctx.Error(absl::StrCat("dim ", d, " of ", in.shape.ToString(), " times ", k, " overflows int64"));
    if (out[d].known()) out[d] = tiled;
    else if (k != 1) out[d] = k == 0 ? Dim(0) : Dim();
  }
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferPad(InferContext& ctx) {
  const TypeInfo& in = ctx.input(0);
  ctx.output(0).dtype = in.dtype;
  std::string mode = ctx.node().attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return ctx.Error(absl::StrCat("unknown mode '", mode, "'"));
  if (!in.shape.rank_known) return absl::OkStatus();
  const int64_t r = in.shape.rank();
  std::optional<std::vector<int64_t>> pads, axes = std::vector<int64_t>{};
  if (ctx.node().has_attr("pads")) {  // opset < 11
    pads = ctx.node().attr_ints("pads");
  } else {
    pads = IntsInput(ctx, 1);
    if (ctx.has_input(3)) axes = IntsInput(ctx, 3);
  }
  if (!pads || !axes) {
    ctx.output(0).shape = UnknownDims(in.shape);
    return absl::OkStatus();
  }
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> full, Wrap(ctx, movement::ExpandPads(r, *pads, *axes)));
  std::vector<Dim> out = in.shape.dims;
  for (int64_t d = 0; d < r; ++d) {
    if (full[d] == 0 && full[r + d] == 0) continue;
    if (!out[d].known()) {
      out[d] = Dim();
      continue;
    }
    int64_t v = out[d].value + full[d] + full[r + d];
    if (v < 0) return ctx.Error(absl::StrCat("pads make dim ", d, " negative"));
    if (mode != "constant" && out[d].value == 0 && v > 0)
      return ctx.Error(absl::StrCat("cannot ", mode, "-pad the empty dim ", d));
    out[d] = v;
  }
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

absl::Status InferDropout(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferIdentity(ctx));
  if (ctx.num_outputs() > 1) {
    ctx.output(1).dtype = DType::kBool;
    ctx.output(1).shape = ctx.input(0).shape;
  }
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(movement, {{"Identity", "", InferIdentity, kOpView | kOpElementwiseUnary},
                                  {"Reshape", "", InferReshape, kOpView},
                                  {"Flatten", "", InferFlatten, kOpView},
                                  {"Transpose", "", InferTranspose},
                                  {"Concat", "", InferConcat},
                                  {"Split", "", InferSplit},
                                  {"Slice", "", InferSlice},
                                  {"Gather", "", InferGather},
                                  {"Unsqueeze", "", InferUnsqueeze, kOpView},
                                  {"Squeeze", "", InferSqueeze, kOpView},
                                  {"Expand", "", InferExpand},
                                  {"Tile", "", InferTile},
                                  {"Pad", "", InferPad},
                                  {"Dropout", "", InferDropout, kOpRandom, InputBits({1, 2})}});

}  // namespace mixtrain
