// MatMul (numpy semantics: batched, broadcast batch dims, 1-D operands), Gemm (transposes,
// alpha, beta, broadcast C) and ai.mixtrain FusedMatMul (graph/ops/fused_matmul_ops.cc: permuted
// operands and result, alpha, bias, activation, residual) on oneDNN's matmul primitive, in fp32
// and bf16 (fp32 accumulation); fp16 is staged through fp32. Operands stay in ONNX layout:
// transposes and permutations are strided descriptors, not copies. The one exception is a
// constant B (inference weights): the primitive then picks its own weights layout and B is
// reordered into it once, on the first call, and reused. How one product runs on oneDNN (the
// primitive, its sgemm, or row blocks of C) is kernels/cpu/dnnl_product.h.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>

#include "graph/check.h"
#include "kernels/common/strided_matmul.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/dnnl_product.h"

namespace mixtrain {
namespace {

using dnnl_util::Fp32Staging;
using dnnl_util::Guard;
using dnnl_util::ShapeCache;
using dnnl_util::ShapeKey;
using dnnl_product::Build;
using dnnl_product::Execute;
using dnnl_product::MatMulEntry;
using dnnl_product::MatMulSpec;
using dnnl_product::Strides;

// ---- MatMul and FusedMatMul -----------------------------------------------------------------

// Checks that `perm` permutes 0..rank-1 (empty = identity).
absl::Status CheckPerm(const KernelContext& ctx, const char* name, const std::vector<int64_t>& perm,
                       size_t rank) {
  absl::Status st = smm::CheckPerm(name, perm, rank);
  return st.ok() ? st : ctx.Error(st.message());
}

// The dims and strides of Transpose(t, perm) read in place from t's dense buffer.
void PermutedView(const TensorView& t, const std::vector<int64_t>& perm, std::vector<int64_t>* dims,
                  Strides* strides) {
  Strides dense = dnnl_util::DenseStrides(t.dims);
  *dims = t.dims;
  *strides = dense;
  for (size_t i = 0; i < perm.size(); ++i) {
    (*dims)[i] = t.dims[perm[i]];
    (*strides)[i] = dense[perm[i]];
  }
}

// The spec of A' x B' -> Y where A' = Transpose(A, perm_a), B' likewise and Y = Transpose(A'B',
// perm_y); empty perms are identities. 1-D operands get the unit dim ONNX gives them (removed
// again from Y, which has the same bytes); they take no perms.
absl::StatusOr<MatMulSpec> PlanMatMul(const KernelContext& ctx, const TensorView& a,
                                      const TensorView& b, const TensorView& y,
                                      const std::vector<int64_t>& perm_a,
                                      const std::vector<int64_t>& perm_b,
                                      const std::vector<int64_t>& perm_y) {
  if (a.rank() == 0 || b.rank() == 0) return ctx.Error("operands must not be scalars");
  if ((a.rank() == 1 && !perm_a.empty()) || (b.rank() == 1 && !perm_b.empty()) ||
      ((a.rank() == 1 || b.rank() == 1) && !perm_y.empty()))
    return ctx.Error("1-D operands take no permutations");
  MT_RETURN_IF_ERROR(CheckPerm(ctx, "perm_a", perm_a, a.rank()));
  MT_RETURN_IF_ERROR(CheckPerm(ctx, "perm_b", perm_b, b.rank()));
  MatMulSpec s;
  std::vector<int64_t>&ad = s.a_dims, &bd = s.b_dims, &cd = s.c_dims;
  Strides &as = s.a_strides, &bs = s.b_strides;
  PermutedView(a, perm_a, &ad, &as);
  PermutedView(b, perm_b, &bd, &bs);
  if (ad.size() == 1) {
    ad.insert(ad.begin(), 1);
    as.insert(as.begin(), ad[1]);
  }
  if (bd.size() == 1) {
    bd.push_back(1);
    bs.push_back(1);
  }
  const size_t r = std::max(ad.size(), bd.size());
  // Broadcast (size-1) leading dims: their stride is never stepped, any value past the data works.
  as.insert(as.begin(), r - ad.size(), a.numel());
  ad.insert(ad.begin(), r - ad.size(), 1);
  bs.insert(bs.begin(), r - bd.size(), b.numel());
  bd.insert(bd.begin(), r - bd.size(), 1);
  const int64_t m = ad[r - 2], k = ad[r - 1], n = bd[r - 1];
  if (bd[r - 2] != k)
    return ctx.Error(absl::StrCat("inner dims differ: ", k, " vs ", bd[r - 2]));
  cd.resize(r);
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
  MT_RETURN_IF_ERROR(CheckPerm(ctx, "perm_y", perm_y, r));
  std::vector<int64_t> yd = cd;
  s.c_strides = dnnl_util::DenseStrides(cd);
  if (!perm_y.empty()) {
    for (size_t i = 0; i < r; ++i) yd[i] = cd[perm_y[i]];
    Strides ys = dnnl_util::DenseStrides(yd);
    for (size_t i = 0; i < r; ++i) s.c_strides[perm_y[i]] = ys[i];
  }
  if (NumElements(yd) != y.numel())
    return ctx.Error(absl::StrCat("output has ", y.numel(), " elements, the product ",
                                  NumElements(yd)));
  if (!b_batched && perm_a.empty() && perm_y.empty()) {
    // One weight matrix for every batch: a single [batch*M, K] x [K, N] GEMM is faster than a
    // batched one, and A and C are dense so the bytes are the same.
    const int64_t rows = NumElements(cd) / n;
    ad = {rows, k};
    as = {k, 1};
    bs = {bs[r - 2], bs[r - 1]};
    bd = {k, n};
    cd = {rows, n};
    s.c_strides = {n, 1};
  }
  // A size-1 dim's stride is never stepped, but oneDNN 2.6 fails to execute some layouts where it
  // is out of line (a perm_y that moves unit dims: strides [1, 5, 1, 1] of [1, 2, 1, 5]); give
  // each the value a dense layout would.
  for (auto [dims, strides] : {std::pair{&ad, &as}, std::pair{&bd, &bs}, std::pair{&cd, &s.c_strides}})
    for (size_t i = dims->size(); i-- > 0;)
      if ((*dims)[i] == 1) (*strides)[i] = i + 1 < dims->size() ? (*strides)[i + 1] * (*dims)[i + 1] : 1;
  return s;
}

dnnl::algorithm ActivationAlgorithm(const std::string& name, bool* ok) {
  *ok = true;
  if (name.empty()) return dnnl::algorithm::undef;
  if (name == "Relu") return dnnl::algorithm::eltwise_relu;
  if (name == "Gelu") return dnnl::algorithm::eltwise_gelu_erf;
  if (name == "GeluTanh") return dnnl::algorithm::eltwise_gelu_tanh;
  if (name == "Sigmoid") return dnnl::algorithm::eltwise_logistic;
  if (name == "Tanh") return dnnl::algorithm::eltwise_tanh;
  *ok = false;
  return dnnl::algorithm::undef;
}

// MatMul is FusedMatMul without attributes or epilogue inputs.
class MatMulKernel final : public OpKernel {
 public:
  explicit MatMulKernel(const Node& node) {
    if (node.op_type() != "FusedMatMul") return;
    perm_a_ = node.attr_ints("perm_a");
    perm_b_ = node.attr_ints("perm_b");
    perm_y_ = node.attr_ints("perm_y");
    alpha_ = node.attr_float("alpha", 1.0f);
    activation_ = node.attr_string("activation", "");
  }

  absl::Status Compute(KernelContext& ctx) override {
    const TensorView* a = ctx.input(0);
    const TensorView* b = ctx.input(1);
    const TensorView* bias = ctx.input(2);
    const TensorView* z = ctx.input(3);
    TensorView* y = ctx.output(0);
    if (a == nullptr || b == nullptr || y == nullptr) return ctx.Error("needs A, B and Y");
    // Y may be wider than A and B (`to`: bf16/fp16 operands, an fp32 result) without an epilogue
    // operand; otherwise every dtype is A's.
    const bool wide_y = y->dtype == DType::kF32 && IsLowFloat(a->dtype) && !bias && !z;
    if (a->dtype != b->dtype || (y->dtype != a->dtype && !wide_y) || (bias && bias->dtype != a->dtype) ||
        (z && z->dtype != a->dtype))
      return ctx.Error("A, B, bias, Z and Y dtypes differ");
    if (y->numel() == 0) return absl::OkStatus();
    bool act_ok;
    dnnl::algorithm act = ActivationAlgorithm(activation_, &act_ok);
    if (!act_ok) return ctx.Error(absl::StrCat("unknown activation '", activation_, "'"));
    if (a->numel() == 0 || b->numel() == 0) {  // K == 0: the product is a sum over nothing
      if (alpha_ != 1.0f || bias != nullptr || z != nullptr || act != dnnl::algorithm::undef)
        return ctx.Error("K == 0 with an epilogue is not supported");
      std::memset(y->data, 0, y->nbytes());
      return absl::OkStatus();
    }
    std::vector<int64_t>& key = key_;
    ShapeKey(ctx, &key);
    MatMulEntry* e = cache_.Find(key);
    if (e == nullptr) {
      MT_ASSIGN_OR_RETURN(MatMulSpec s, PlanMatMul(ctx, *a, *b, *y, perm_a_, perm_b_, perm_y_));
      if (bias != nullptr) {
        if (bias->numel() != s.c_dims.back() || (bias->rank() > 0 && bias->dims.back() != bias->numel()))
          return ctx.Error(absl::StrCat("bias must hold N = ", s.c_dims.back(),
                                        " values along its last dim"));
        s.bias = true;
      }
      if (z != nullptr) {
        if (!perm_y_.empty()) return ctx.Error("Z is not supported with perm_y");
        if (z->dims != y->dims) return ctx.Error("Z must have the shape of Y");
        s.residual = true;
      }
      s.alpha = alpha_;
      s.activation = act;
      s.pack_b = ctx.input_constant(1);
      MT_ASSIGN_OR_RETURN(auto built, Build(ctx, s, a->dtype, y->dtype));
      e = cache_.Insert(key, std::move(built));
    }
    staging_.Begin();
    const void* ap = staging_.Input(*a);
    const void* bp = staging_.Input(*b);
    const void* biasp = bias ? staging_.Input(*bias) : nullptr;
    const void* zp = z ? staging_.Input(*z) : nullptr;
    void* yp = staging_.Output(*y);
    MT_RETURN_IF_ERROR(Execute(ctx, *e, ap, bp, yp, biasp, zp));
    staging_.Finish();
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> perm_a_, perm_b_, perm_y_;
  float alpha_ = 1.0f;
  std::string activation_;
  ShapeCache<MatMulEntry> cache_;
  std::vector<int64_t> key_;  // the last call's cache key (its capacity reused)
  Fp32Staging staging_;
};

// ---- Gemm ---------------------------------------------------------------------------------
// Y = alpha * A' B' + beta * C: Y is pre-filled with broadcast C, then the matmul scales its
// product by alpha (output scale) and adds beta * Y (sum post-op).

absl::StatusOr<MatMulSpec> PlanGemm(const KernelContext& ctx, const TensorView& a,
                                    const TensorView& b, bool has_c) {
  const Node& node = ctx.node();
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  if (a.rank() != 2 || b.rank() != 2) return ctx.Error("A and B must be 2-D");
  const int64_t m = ta ? a.dims[1] : a.dims[0], k = ta ? a.dims[0] : a.dims[1];
  const int64_t kb = tb ? b.dims[1] : b.dims[0], n = tb ? b.dims[0] : b.dims[1];
  if (k != kb) return ctx.Error(absl::StrCat("inner dims differ: ", k, " vs ", kb));
  MatMulSpec s;
  s.a_dims = {m, k};
  s.b_dims = {k, n};
  s.c_dims = {m, n};
  // A transposed is A^T's dense [K, M] buffer seen as [M, K] with strides (1, M).
  s.a_strides = ta ? Strides{1, m} : Strides{k, 1};
  s.b_strides = tb ? Strides{1, k} : Strides{n, 1};
  s.c_strides = {n, 1};
  s.alpha = node.attr_float("alpha", 1.0f);
  if (has_c) s.sum_beta = node.attr_float("beta", 1.0f);
  s.pack_b = ctx.input_constant(1);
  return s;
}

// Writes C (rank <= 2, unidirectionally broadcastable to [M, N]) into every row of Y.
absl::Status BroadcastC(const KernelContext& ctx, const TensorView& c, const void* src, void* dst,
                        int64_t m, int64_t n, size_t elem) {
  if (c.rank() > 2) return ctx.Error("C must have rank <= 2");
  const int64_t cd[2] = {c.rank() == 2 ? c.dims[0] : 1, c.rank() >= 1 ? c.dims.back() : 1};
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
    std::vector<int64_t>& key = key_;
    ShapeKey(ctx, &key);
    MatMulEntry* e = cache_.Find(key);
    if (e == nullptr) {
      MT_ASSIGN_OR_RETURN(MatMulSpec s, PlanGemm(ctx, *a, *b, use_c));
      MT_ASSIGN_OR_RETURN(auto built, Build(ctx, s, a->dtype));
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
    MT_RETURN_IF_ERROR(Execute(ctx, *e, ap, bp, yp));
    staging_.Finish();
    return absl::OkStatus();
  }

 private:
  ShapeCache<MatMulEntry> cache_;
  std::vector<int64_t> key_;  // the last call's cache key (its capacity reused)
  Fp32Staging staging_;
};

absl::StatusOr<std::unique_ptr<OpKernel>> MakeMatMul(const Node& node) {
  return std::unique_ptr<OpKernel>(new MatMulKernel(node));
}
absl::StatusOr<std::unique_ptr<OpKernel>> MakeGemm(const Node&) {
  return std::unique_ptr<OpKernel>(new GemmKernel());
}

}  // namespace

MT_REGISTER_KERNELS(dnnl_matmul) {
  r.Register({"MatMul", "", DeviceType::kCPU, kFloatTypes, 0, MakeMatMul});
  r.Register({"FusedMatMul", "ai.mixtrain", DeviceType::kCPU, kFloatTypes, 0, MakeMatMul});
  r.Register({"Gemm", "", DeviceType::kCPU, kFloatTypes, 0, MakeGemm});
}

}  // namespace mixtrain
