// Shape and type inference for the compute-heavy NN ops: MatMul, Gemm, Conv, ConvTranspose,
// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool. Window arithmetic lives in
// graph/ops/nn_geometry.cc, shared with the CPU kernels.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/nn_geometry.h"
#include "graph/shape_inference.h"

namespace mixtrain {

absl::StatusOr<Shape> MatMulShape(const Shape& a, const Shape& b) {
  std::vector<Dim> ad = a.dims, bd = b.dims;
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), Dim(1));
  if (b_vec) bd.push_back(Dim(1));
  const Dim& ka = ad[ad.size() - 1];
  const Dim& kb = bd[bd.size() - 2];
  if (ka.known() && kb.known() && ka.value != kb.value)
    return absl::InvalidArgumentError(
        absl::StrCat("inner dims differ: A ", a.ToString(), ", B ", b.ToString()));
  Shape batch_a(std::vector<Dim>(ad.begin(), ad.end() - 2));
  Shape batch_b(std::vector<Dim>(bd.begin(), bd.end() - 2));
  MT_ASSIGN_OR_RETURN(Shape batch, BroadcastShapes(batch_a, batch_b));
  std::vector<Dim> out = batch.dims;
  if (!a_vec) out.push_back(ad[ad.size() - 2]);
  if (!b_vec) out.push_back(bd.back());
  return Shape(std::move(out));
}

namespace {

absl::Status InferMatMul(InferContext& ctx) {
  const TypeInfo& a = ctx.input(0);
  const TypeInfo& b = ctx.input(1);
  if (!a.present || !b.present) return ctx.Error("needs inputs A and B");
  ctx.output(0).dtype = a.dtype;
  if (!a.shape.rank_known || !b.shape.rank_known) return absl::OkStatus();
  if (a.shape.rank() == 0 || b.shape.rank() == 0) return ctx.Error("operands must not be scalars");
  auto shape = MatMulShape(a.shape, b.shape);
  if (!shape.ok()) return ctx.Error(std::string(shape.status().message()));
  ctx.output(0).shape = *std::move(shape);
  return absl::OkStatus();
}

absl::Status InferGemm(InferContext& ctx) {
  const TypeInfo& a = ctx.input(0);
  const TypeInfo& b = ctx.input(1);
  if (!a.present || !b.present) return ctx.Error("needs inputs A and B");
  ctx.output(0).dtype = a.dtype;
  if (!a.shape.rank_known || !b.shape.rank_known) return absl::OkStatus();
  if (a.shape.rank() != 2 || b.shape.rank() != 2)
    return ctx.Error(absl::StrCat("A and B must be 2-D, got ", a.shape.ToString(), " and ",
                                  b.shape.ToString()));
  const bool ta = ctx.node().attr_int("transA", 0) != 0;
  const bool tb = ctx.node().attr_int("transB", 0) != 0;
  const Dim& m = a.shape.dims[ta ? 1 : 0];
  const Dim& ka = a.shape.dims[ta ? 0 : 1];
  const Dim& kb = b.shape.dims[tb ? 1 : 0];
  const Dim& n = b.shape.dims[tb ? 0 : 1];
  if (ka.known() && kb.known() && ka.value != kb.value)
    return ctx.Error(absl::StrCat("inner dims differ: A ", a.shape.ToString(), ", B ",
                                  b.shape.ToString(), " (transA=", ta, ", transB=", tb, ")"));
  Shape out({m, n});
  const TypeInfo& c = ctx.input(2);
  if (c.present && c.shape.rank_known) {
    if (c.shape.rank() > 2) return ctx.Error("C must have rank <= 2");
    auto bc = BroadcastShapes(out, c.shape);
    if (!bc.ok() || !(bc->rank() == 2) ||
        (out.fully_known() && bc->fully_known() && bc->sizes() != out.sizes()))
      return ctx.Error(absl::StrCat("C ", c.shape.ToString(), " does not broadcast to ",
                                    out.ToString()));
  }
  ctx.output(0).shape = std::move(out);
  return absl::OkStatus();
}

// Spatial dims of a shape as numbers, or false when any is unknown.
bool KnownSpatial(const Shape& s, std::vector<int64_t>* out) {
  out->clear();
  for (size_t i = 2; i < s.dims.size(); ++i) {
    if (!s.dims[i].known()) return false;
    out->push_back(s.dims[i].value);
  }
  return true;
}

// Conv, ConvTranspose, MaxPool, AveragePool: [N, C_out, spatial...].
absl::Status InferWindowed(InferContext& ctx) {
  const Node& node = ctx.node();
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input X");
  ctx.output(0).dtype = x.dtype;
  if (ctx.num_outputs() > 1 && ctx.output(1).present) ctx.output(1).dtype = DType::kI64;
  if (!x.shape.rank_known) return absl::OkStatus();
  if (x.shape.rank() < 3)
    return ctx.Error(absl::StrCat("X must be [N, C, spatial...], got ", x.shape.ToString()));
  const bool is_conv = node.op_type() == "Conv" || node.op_type() == "ConvTranspose";
  const size_t nsp = x.shape.rank() - 2;
  Dim channels = x.shape.dims[1];
  std::vector<int64_t> kernel = node.attr_ints("kernel_shape");
  if (is_conv) {
    const TypeInfo& w = ctx.input(1);
    if (!w.present) return ctx.Error("needs input W");
    const int64_t group = node.attr_int("group", 1);
    if (group < 1) return ctx.Error("group must be >= 1");
    channels = Dim();
    if (w.shape.rank_known) {
      if (w.shape.rank() != x.shape.rank())
        return ctx.Error(absl::StrCat("W ", w.shape.ToString(), " and X ", x.shape.ToString(),
                                      " differ in rank"));
      const Dim& wc = w.shape.dims[node.op_type() == "Conv" ? 1 : 0];
      const Dim& xc = x.shape.dims[1];
      if (wc.known() && xc.known()) {
        int64_t expect = node.op_type() == "Conv" ? wc.value * group : wc.value;
        if (expect != xc.value)
          return ctx.Error(absl::StrCat("X has ", xc.value, " channels, W ", w.shape.ToString(),
                                        " with group ", group, " expects ", expect));
      }
      if (node.op_type() == "Conv") {
        channels = w.shape.dims[0];
      } else if (w.shape.dims[1].known()) {
        channels = Dim(w.shape.dims[1].value * group);
      }
      if (kernel.empty()) {
        std::vector<int64_t> wk;
        if (KnownSpatial(w.shape, &wk)) kernel = wk;
      }
    }
  } else if (kernel.empty()) {
    return ctx.Error("attribute kernel_shape is required");
  }
  std::vector<Dim> out = {x.shape.dims[0], channels};
  std::vector<int64_t> in_sp;
  if (KnownSpatial(x.shape, &in_sp) && kernel.size() == nsp) {
    auto g = node.op_type() == "ConvTranspose" ? TransposedWindowGeometry(node, in_sp, kernel)
                                               : ForwardWindowGeometry(node, in_sp, kernel);
    if (!g.ok()) return g.status();
    for (int64_t o : g->out) out.emplace_back(o);
  } else {
    if (!kernel.empty() && kernel.size() != nsp)
      return ctx.Error(absl::StrCat("kernel_shape has ", kernel.size(), " dims, X has ", nsp,
                                    " spatial dims"));
    out.resize(2 + nsp);  // unknown spatial sizes
  }
  ctx.output(0).shape = Shape(out);
  if (ctx.num_outputs() > 1 && ctx.output(1).present) ctx.output(1).shape = Shape(out);
  return absl::OkStatus();
}

absl::Status InferGlobalPool(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input X");
  ctx.output(0).dtype = x.dtype;
  if (!x.shape.rank_known) return absl::OkStatus();
  if (x.shape.rank() < 3)
    return ctx.Error(absl::StrCat("X must be [N, C, spatial...], got ", x.shape.ToString()));
  std::vector<Dim> out = {x.shape.dims[0], x.shape.dims[1]};
  out.resize(x.shape.rank(), Dim(1));
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(nn_ops, {{"MatMul", "", InferMatMul},
                                {"Gemm", "", InferGemm},
                                {"Conv", "", InferWindowed},
                                {"ConvTranspose", "", InferWindowed},
                                {"MaxPool", "", InferWindowed},
                                {"AveragePool", "", InferWindowed},
                                {"GlobalAveragePool", "", InferGlobalPool},
                                {"GlobalMaxPool", "", InferGlobalPool}});

}  // namespace mixtrain
