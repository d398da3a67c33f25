// MatMul (numpy semantics: batched, broadcast batch dims, 1-D operands) and Gemm (transposes,
// alpha, beta, broadcast C) on oneDNN's matmul primitive, in fp32 and bf16 (fp32 accumulation);
// fp16 is staged through fp32. Operands stay in ONNX layout: transposes are strided
// descriptors, not copies.
#include <cstring>

#include "graph/check.h"
#include "kernels/cpu/dnnl_common.h"

namespace mixtrain {
namespace {

using dnnl_util::Fp16Staging;
using dnnl_util::Guard;
using dnnl_util::ShapeCache;
using dnnl_util::ShapeKey;

struct MatMulEntry {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, c_md;
};

// Runs a built matmul primitive on A, B -> C (C may already hold Gemm's beta * C).
absl::Status Execute(const KernelContext& ctx, const char* what, const MatMulEntry& e,
                     const void* a, const void* b, void* c) {
  return Guard(ctx, what, [&] {
    dnnl::engine& eng = dnnl_util::Engine();
    dnnl::memory am(e.a_md, eng, const_cast<void*>(a));
    dnnl::memory bm(e.b_md, eng, const_cast<void*>(b));
    dnnl::memory cm(e.c_md, eng, c);
    e.prim.execute(dnnl_util::Stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    dnnl_util::Stream().wait();
  });
}

// ---- MatMul -------------------------------------------------------------------------------

// Builds the primitive for A[..., M, K] x B[..., K, N]; 1-D operands get the unit dim ONNX
// gives them (removed again from the output, which has the same bytes).
absl::StatusOr<std::unique_ptr<MatMulEntry>> BuildMatMul(const KernelContext& ctx,
                                                         const TensorView& a,
                                                         const TensorView& b) {
  std::vector<int64_t> ad = a.dims, bd = b.dims;
  if (ad.empty() || bd.empty()) return ctx.Error("operands must not be scalars");
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const size_t r = std::max(ad.size(), bd.size());
  ad.insert(ad.begin(), r - ad.size(), 1);
  bd.insert(bd.begin(), r - bd.size(), 1);
  const int64_t m = ad[r - 2], k = ad[r - 1], n = bd[r - 1];
  if (bd[r - 2] != k)
    return ctx.Error(absl::StrCat("inner dims differ: ", k, " vs ", bd[r - 2]));
  std::vector<int64_t> cd(r);
  bool b_batched = false;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1)
      return ctx.Error(absl::StrCat("batch dims do not broadcast: dim ", i, " is ", ad[i],
                                    " vs ", bd[i]));
    cd[i] = std::max(ad[i], bd[i]);
    b_batched |= bd[i] != 1;
  }
  cd[r - 2] = m;
  cd[r - 1] = n;
  if (!b_batched) {
    // One weight matrix for every batch: a single [batch*M, K] x [K, N] GEMM is faster than a
    // batched one, and A and C are contiguous so the bytes are the same.
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < r; ++i) rows *= ad[i];
    ad = {rows, k};
    bd = {k, n};
    cd = {rows, n};
  }
  auto dt = dnnl_util::ToDnnl(dnnl_util::ComputeType(a.dtype));
  if (!dt.ok()) return ctx.Error(std::string(dt.status().message()));
  auto e = std::make_unique<MatMulEntry>();
  MT_RETURN_IF_ERROR(Guard(ctx, "building matmul", [&] {
    e->a_md = dnnl_util::PlainDesc(ad, *dt);
    e->b_md = dnnl_util::PlainDesc(bd, *dt);
    e->c_md = dnnl_util::PlainDesc(cd, *dt);
    dnnl::matmul::desc d(e->a_md, e->b_md, e->c_md);
    e->prim = dnnl::matmul(dnnl::matmul::primitive_desc(d, dnnl_util::Engine()));
  }));
  return e;
}

class MatMulKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* a = ctx.input(0);
    const TensorView* b = ctx.input(1);
    TensorView* c = ctx.output(0);
    if (a == nullptr || b == nullptr || c == nullptr) return ctx.Error("needs A, B and Y");
    if (a->dtype != b->dtype || c->dtype != a->dtype) return ctx.Error("A, B and Y dtypes differ");
    if (c->numel() == 0) return absl::OkStatus();
    if (a->numel() == 0 || b->numel() == 0) {  // K == 0: a sum over nothing
      std::memset(c->data, 0, c->nbytes());
      return absl::OkStatus();
    }
    std::vector<int64_t> key = ShapeKey(ctx);
    MatMulEntry* e = cache_.Find(key);
    if (e == nullptr) {
      MT_ASSIGN_OR_RETURN(auto built, BuildMatMul(ctx, *a, *b));
      e = cache_.Insert(key, std::move(built));
    }
    staging_.Begin();
    const void* ap = staging_.Input(*a);
    const void* bp = staging_.Input(*b);
    void* cp = staging_.Output(*c);
    MT_RETURN_IF_ERROR(Execute(ctx, "running matmul", *e, ap, bp, cp));
    staging_.Finish();
    return absl::OkStatus();
  }

 private:
  ShapeCache<MatMulEntry> cache_;
  Fp16Staging staging_;
};

// ---- Gemm ---------------------------------------------------------------------------------
// Y = alpha * A' B' + beta * C: Y is pre-filled with broadcast C, then the matmul scales its
// product by alpha (output scale) and adds beta * Y (sum post-op).

absl::StatusOr<std::unique_ptr<MatMulEntry>> BuildGemm(const KernelContext& ctx,
                                                       const TensorView& a, const TensorView& b,
                                                       bool has_c) {
  const Node& node = ctx.node();
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const float alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  if (a.rank() != 2 || b.rank() != 2) return ctx.Error("A and B must be 2-D");
  const int64_t m = ta ? a.dims[1] : a.dims[0], k = ta ? a.dims[0] : a.dims[1];
  const int64_t kb = tb ? b.dims[1] : b.dims[0], n = tb ? b.dims[0] : b.dims[1];
  if (k != kb) return ctx.Error(absl::StrCat("inner dims differ: ", k, " vs ", kb));
  auto dt = dnnl_util::ToDnnl(dnnl_util::ComputeType(a.dtype));
  if (!dt.ok()) return ctx.Error(std::string(dt.status().message()));
  auto e = std::make_unique<MatMulEntry>();
  const std::vector<int64_t> mk = {m, k}, kn = {k, n}, mn = {m, n};
  // A transposed is A^T's dense [K, M] buffer seen as [M, K] with strides (1, M).
  const std::vector<int64_t> a_strides = ta ? std::vector<int64_t>{1, m} : std::vector<int64_t>{k, 1};
  const std::vector<int64_t> b_strides = tb ? std::vector<int64_t>{1, k} : std::vector<int64_t>{n, 1};
  MT_RETURN_IF_ERROR(Guard(ctx, "building gemm", [&] {
    e->a_md = dnnl_util::StridedDesc(mk, a_strides, *dt);
    e->b_md = dnnl_util::StridedDesc(kn, b_strides, *dt);
    e->c_md = dnnl_util::PlainDesc(mn, *dt);
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (has_c && beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::desc d(e->a_md, e->b_md, e->c_md);
    e->prim = dnnl::matmul(dnnl::matmul::primitive_desc(d, attr, dnnl_util::Engine()));
  }));
  return e;
}

// Writes C (rank <= 2, unidirectionally broadcastable to [M, N]) into every row of Y.
absl::Status BroadcastC(const KernelContext& ctx, const TensorView& c, const void* src, void* dst,
                        int64_t m, int64_t n, size_t elem) {
  std::vector<int64_t> cd = c.dims;
  cd.insert(cd.begin(), 2 - cd.size(), 1);
  if ((cd[0] != 1 && cd[0] != m) || (cd[1] != 1 && cd[1] != n))
    return ctx.Error(absl::StrCat("C [", cd[0], ",", cd[1], "] does not broadcast to [", m, ",",
                                  n, "]"));
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
#pragma omp parallel for if (m * n > (1 << 16)) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* srow = s + (cd[0] == 1 ? 0 : i * cd[1] * elem);
    uint8_t* drow = d + i * n * elem;
    if (cd[1] == n) {
      std::memcpy(drow, srow, n * elem);
    } else {
      for (int64_t j = 0; j < n; ++j) std::memcpy(drow + j * elem, srow, elem);
    }
  }
  return absl::OkStatus();
}

class GemmKernel final : public OpKernel {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* a = ctx.input(0);
    const TensorView* b = ctx.input(1);
    const TensorView* c = ctx.input(2);
    TensorView* y = ctx.output(0);
    if (a == nullptr || b == nullptr || y == nullptr) return ctx.Error("needs A, B and Y");
    if (a->dtype != b->dtype || y->dtype != a->dtype || (c && c->dtype != a->dtype))
      return ctx.Error("A, B, C and Y dtypes differ");
    if (y->rank() != 2) return ctx.Error("Y must be 2-D");
    const float beta = ctx.node().attr_float("beta", 1.0f);
    const bool use_c = c != nullptr && beta != 0.0f && c->numel() > 0;
    const int64_t m = y->dims[0], n = y->dims[1];
    if (y->numel() == 0) return absl::OkStatus();
    std::vector<int64_t> key = ShapeKey(ctx);
    MatMulEntry* e = cache_.Find(key);
    if (e == nullptr) {
      MT_ASSIGN_OR_RETURN(auto built, BuildGemm(ctx, *a, *b, use_c));
      e = cache_.Insert(key, std::move(built));
    }
    staging_.Begin();
    const void* ap = staging_.Input(*a);
    const void* bp = staging_.Input(*b);
    void* yp = staging_.Output(*y);
    if (use_c) {
      const void* cp = staging_.Input(*c);
      size_t elem = DTypeSize(dnnl_util::ComputeType(c->dtype));
      MT_RETURN_IF_ERROR(BroadcastC(ctx, *c, cp, yp, m, n, elem));
    }
    MT_RETURN_IF_ERROR(Execute(ctx, "running gemm", *e, ap, bp, yp));
    staging_.Finish();
    return absl::OkStatus();
  }

 private:
  ShapeCache<MatMulEntry> cache_;
  Fp16Staging staging_;
};

template <typename K>
KernelFactory Factory() {
  return [](const Node&) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new K());
  };
}

}  // namespace

MT_REGISTER_KERNELS(dnnl_matmul) {
  r.Register({"MatMul", "", DeviceType::kCPU, kFloatTypes, 0, Factory<MatMulKernel>()});
  r.Register({"Gemm", "", DeviceType::kCPU, kFloatTypes, 0, Factory<GemmKernel>()});
}

}  // namespace mixtrain
