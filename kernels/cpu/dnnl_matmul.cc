// MatMul (numpy semantics: batched, broadcast batch dims, 1-D operands), Gemm (transposes,
// alpha, beta, broadcast C) and ai.mixtrain FusedMatMul (graph/ops/fused_matmul_ops.cc: permuted
// operands and result, alpha, bias, activation, residual) on oneDNN's matmul primitive, in fp32
// and bf16 (fp32 accumulation); fp16 is staged through fp32. Operands stay in ONNX layout:
// transposes and permutations are strided descriptors, not copies. The one exception is a
// constant B (inference weights): the primitive then picks its own weights layout and B is
// reordered into it once, on the first call, and reused. Two shape classes where oneDNN 2.6's
// AVX-512 brgemm runs far below its rate go another way (measured by tools/bench/dnnl_products.cc):
// fp32 products with B as stored run on its sgemm (UseSgemm), and a bf16 classifier's weight
// gradient as two row blocks, which it runs on gemm:jit (SplitRows).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>

#include "graph/check.h"
#include "kernels/common/strided_matmul.h"
#include "kernels/cpu/dnnl_common.h"

namespace mixtrain {
namespace {

using dnnl_util::Fp32Staging;
using dnnl_util::Guard;
using dnnl_util::ShapeCache;
using dnnl_util::ShapeKey;
using Strides = std::vector<int64_t>;

// One matmul as oneDNN sees it: src (A'), weights (B') and dst (the product before any output
// permutation) as equal-rank dims with strides into our dense buffers, plus the epilogue.
struct MatMulSpec {
  std::vector<int64_t> a_dims, b_dims, c_dims;
  Strides a_strides, b_strides, c_strides;
  float alpha = 1.0f;           // output scale
  bool bias = false;            // [1, ..., 1, N] added after alpha
  float sum_beta = 0.0f;        // Gemm: dst = alpha * A'B' + sum_beta * (dst as pre-filled)
  dnnl::algorithm activation = dnnl::algorithm::undef;  // after bias
  bool residual = false;        // Z, dense in c_dims, added after the activation
  bool pack_b = false;          // B is constant: let the primitive choose its layout
};

// A matmul built for one shape, with its arguments bound (dnnl_util::BoundPrimitive). A
// permuted operand or result is copied to or from a dense buffer in the call's scratch
// around the matmul (see Build), by a oneDNN reorder whose dense side is the matmul's argument.
struct MatMulEntry {
  dnnl_util::BoundPrimitive mm;
  dnnl::memory::desc a_md, b_md, c_md, bias_md, z_md;  // our buffers (strided views)
  std::optional<dnnl_util::BoundReorder> a_copy, b_copy, c_copy;
  int bias_arg = 0, z_arg = 0;  // where bias and Z go: the primitive's bias or a binary post-op
  // Set when the primitive wants B in another layout: B reordered once (constant B only).
  std::optional<dnnl_util::BoundReorder> pack;
  dnnl::memory packed_b;
  bool packed = false;
  // Set instead of `mm` where oneDNN's sgemm runs the product (UseSgemm).
  struct Sgemm {
    char trans_a = 'N';
    int64_t m = 0, n = 0, k = 0, lda = 0;
    float alpha = 1.0f, sum_beta = 0.0f;
    bool bias = false, residual = false;
  };
  std::optional<Sgemm> sgemm;
  // Set instead of `mm` where the product runs as row blocks of C (SplitRows): each part's
  // matmul, and the byte offsets of its rows in A, C and Z.
  struct Part {
    std::unique_ptr<MatMulEntry> mm;
    size_t a_offset = 0, c_offset = 0, z_offset = 0;
  };
  std::vector<Part> parts;
};

// Whether a view is dense row-major (size-1 dims may have any stride).
bool Dense(const std::vector<int64_t>& dims, const Strides& strides) {
  Strides dense = dnnl_util::DenseStrides(dims);
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != 1 && strides[i] != dense[i]) return false;
  return true;
}

// Which operand of a 2-D product to copy K-contiguous first, if any. oneDNN's gemm:jit (the
// f32 matmul where brgemm is unavailable: AVX2 CPUs) wants the operand on the longer side of C
// laid out with K contiguous; given it the other way round it runs at about half speed. AVX2-
// capped on Zen 4, 2 threads, GFLOP/s as stored -> K-contiguous: M x N x K = 256 x 1024 x 2048
// (a weight gradient A^T B) 102 -> 166, 1024 x 256 x 2048 77 -> 189, 2048 x 256 x 256 75 ->
// 188, 256 x 4096 x 256 104 -> 184; with C square-ish the layouts run within 15% of each other.
// The copy moves K x max(M, N) elements once, a fraction of the product's time when the
// shorter side is long enough (below 64 the product is too small for it to pay).
enum class KContiguousCopy { kNone, kA, kB };
KContiguousCopy ChooseKContiguousCopy(const MatMulSpec& s, const std::string& impl,
                                      dnnl::memory::data_type dt) {
  if (impl.rfind("gemm:jit", 0) != 0 || dt != dnnl::memory::data_type::f32 ||
      s.c_dims.size() != 2 || s.pack_b)
    return KContiguousCopy::kNone;
  const int64_t M = s.c_dims[0], N = s.c_dims[1], K = s.a_dims[1];
  if (K < 64 || std::min(M, N) < 64) return KContiguousCopy::kNone;
  const bool a_k_contiguous = s.a_strides[1] == 1, b_k_contiguous = s.b_strides[0] == 1;
  if (M >= 2 * N && !a_k_contiguous) return KContiguousCopy::kA;
  if (N >= 2 * M && !b_k_contiguous) return KContiguousCopy::kB;
  return KContiguousCopy::kNone;
}

// Whether an fp32 2-D product runs on oneDNN's sgemm (its gemm:jit, which packs both operands
// into panels) rather than the brgemm matmul the primitive picked. With B dense row-major ([K,
// N], N contiguous) brgemm loses up to a third on some shapes and sgemm about none: AVX-512 on
// Zen 4, 2 threads, GFLOP/s brgemm -> sgemm over three runs of tools/bench/dnnl_products.cc
// (tools/bench/RESULTS.md): GPT-2 small's MLP weight gradient M x N x K = 768 x 3072 x 512
// 124-144 -> 178-209, its forward at 2048 tokens 2048 x 3072 x 768 129-138 -> 210-219 (at 512
// tokens 133-147 -> 137-204), the tied classifier's input gradient 512 x 768 x 50257 125-147 ->
// 196-213; elsewhere within 5% either way. With B transposed (K contiguous) sgemm is the
// slower one (512 x 768 x 3072: 192-208 vs 148-173; the classifier 512 x 50257 x 768: 181-197
// vs 166-191), so those stay on brgemm. AVX2 CPUs get gemm:jit from the primitive anyway. No
// activation post-op (it would need a pass of its own); bias, Gemm's beta * C and a residual
// are put in C first and sgemm adds the product to them.
bool UseSgemm(const MatMulSpec& s, const std::string& impl, dnnl::memory::data_type dt,
              dnnl::memory::data_type out_dt) {
  if (impl.rfind("brg", 0) != 0 || dt != dnnl::memory::data_type::f32 || out_dt != dt ||
      s.c_dims.size() != 2 || s.pack_b || s.activation != dnnl::algorithm::undef)
    return false;
  const int64_t m = s.c_dims[0], n = s.c_dims[1], k = s.a_dims[1];
  const bool a_plain = s.a_strides == Strides{k, 1}, a_transposed = s.a_strides == Strides{1, m};
  return (a_plain || a_transposed) && s.b_strides == Strides{n, 1} && s.c_strides == Strides{n, 1};
}

// How many row blocks of C a bf16 2-D product runs as: 2 where A is transposed ([K, M] as
// stored, M contiguous) and M is long next to N (a classifier's weight gradient dY^T X over a
// vocabulary), else 1. oneDNN 2.6's brgemm runs that product well below its rate elsewhere,
// and its gemm:jit, which it picks for a block of rows (whose A is no longer dense), does not:
// AVX-512 on Zen 4, 2 threads, GFLOP/s whole -> two blocks (tools/bench/dnnl_products.cc, two
// runs): GPT-2 small's tied classifier M x N x K = 50257 x 768 x 512 301-305 -> 381-386, at K =
// 2048 257-292 -> 376-412. With M <= 4N blocks win or lose up to 16% by shape (768 x 3072 x
// 512: 372 -> 311; 768 x 768 x 512: 386 -> 415), so those stay whole.
int SplitRows(const MatMulSpec& s, const std::string& impl, dnnl::memory::data_type dt) {
  if (impl.rfind("brg", 0) != 0 || dt != dnnl::memory::data_type::bf16 || s.c_dims.size() != 2 ||
      s.pack_b || s.sum_beta != 0.0f)
    return 1;
  const int64_t m = s.c_dims[0], n = s.c_dims[1];
  const bool a_transposed = s.a_strides == Strides{1, m};
  return a_transposed && m >= 8192 && m >= 16 * n && s.c_strides == Strides{n, 1} ? 2 : 1;
}

// `out_dtype`: C's type where it differs from A's and B's (FusedMatMul's `to`: bf16 operands,
// an fp32 result, which oneDNN accumulates in fp32 anyway); kUndefined: the same.
absl::StatusOr<std::unique_ptr<MatMulEntry>> Build(const KernelContext& ctx, const MatMulSpec& s,
                                                   DType dtype, DType out_dtype = DType::kUndefined) {
  auto dt = dnnl_util::ToDnnl(dnnl_util::ComputeType(dtype));
  if (!dt.ok()) return ctx.Error(std::string(dt.status().message()));
  auto out_dt = dnnl_util::ToDnnl(dnnl_util::ComputeType(out_dtype == DType::kUndefined ? dtype : out_dtype));
  if (!out_dt.ok()) return ctx.Error(std::string(out_dt.status().message()));
  auto e = std::make_unique<MatMulEntry>();
  absl::Status part_status;  // a row block's Build (SplitRows)
  MT_RETURN_IF_ERROR(Guard(ctx, "building matmul", [&] {
    e->a_md = dnnl_util::StridedDesc(s.a_dims, s.a_strides, *dt);
    e->b_md = dnnl_util::StridedDesc(s.b_dims, s.b_strides, *dt);
    e->c_md = dnnl_util::StridedDesc(s.c_dims, s.c_strides, *out_dt);
    dnnl::memory::desc w_md =
        s.pack_b ? dnnl::memory::desc(dnnl_util::ToDims(s.b_dims), *dt, dnnl::memory::format_tag::any)
                 : e->b_md;
    std::vector<int64_t> bias_dims(s.c_dims.size(), 1);
    bias_dims.back() = s.c_dims.back();
    if (s.bias) e->bias_md = dnnl_util::PlainDesc(bias_dims, *dt);
    if (s.residual) e->z_md = dnnl_util::PlainDesc(s.c_dims, *dt);
    // oneDNN v2 adds its own bias before the output scale; with alpha != 1 the bias is a binary
    // post-op instead (post-ops run after the scale), so it is not scaled.
    const bool native_bias = s.bias && s.alpha == 1.0f;
    int z_post_op = -1;
    dnnl::primitive_attr attr = dnnl_util::Attr();
    if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
    dnnl::post_ops ops;
    if (s.bias && !native_bias) ops.append_binary(dnnl::algorithm::binary_add, e->bias_md);
    if (s.sum_beta != 0.0f) ops.append_sum(s.sum_beta);
    if (s.activation != dnnl::algorithm::undef) ops.append_eltwise(1.0f, s.activation, 0.0f, 0.0f);
    if (s.residual) {
      z_post_op = ops.len();
      ops.append_binary(dnnl::algorithm::binary_add, e->z_md);
    }
    attr.set_post_ops(ops);
    dnnl::engine& eng = dnnl_util::Engine();
    auto make_pd = [&](const dnnl::memory::desc& a, const dnnl::memory::desc& w,
                       const dnnl::memory::desc& c) {
      dnnl::matmul::desc d = native_bias ? dnnl::matmul::desc(a, w, e->bias_md, c)
                                            : dnnl::matmul::desc(a, w, c);
      return dnnl::matmul::primitive_desc(d, attr, eng);
    };
    dnnl::memory::desc a_md = e->a_md, c_md = e->c_md;
    dnnl::matmul::primitive_desc pd = make_pd(a_md, w_md, c_md);
    // oneDNN 2.6 strides through permuted batched operands only in its brgemm kernels; for
    // layouts those refuse it falls back to gemm:jit or ref, which are several times slower than
    // copying the operand dense first. Permutations then become copies (as the Transposes were).
    const std::string impl = pd.impl_info_str();
    const bool strided = !Dense(s.a_dims, s.a_strides) || !Dense(s.c_dims, s.c_strides) ||
                         (!s.pack_b && !Dense(s.b_dims, s.b_strides));
    // oneDNN 2.6's AVX-512 brgemm also faults (SIGSEGV in its JIT code) when a binary post-op
    // (the bias with alpha != 1, or Z) meets a permuted output: attention's P.V with perm_y.
    const bool binary_post_op = (s.bias && !native_bias) || s.residual;
    if (const int parts = SplitRows(s, impl, *dt); parts > 1) {
      const int64_t m = s.c_dims[0], n = s.c_dims[1], rows = (m + parts - 1) / parts;
      const size_t a_elem = DTypeSize(dnnl_util::ComputeType(dtype));
      const size_t c_elem = DTypeSize(dnnl_util::ComputeType(out_dtype == DType::kUndefined ? dtype : out_dtype));
      for (int64_t r0 = 0; r0 < m; r0 += rows) {
        MatMulSpec p = s;
        p.a_dims[0] = p.c_dims[0] = std::min(rows, m - r0);
        auto part = Build(ctx, p, dtype, out_dtype);
        if (!part.ok()) {
          part_status = part.status();
          return;
        }
        e->parts.push_back({*std::move(part), static_cast<size_t>(r0) * a_elem,
                            static_cast<size_t>(r0 * n) * c_elem, static_cast<size_t>(r0 * n) * a_elem});
      }
      return;
    }
    if (UseSgemm(s, impl, *dt, *out_dt)) {
      const int64_t m = s.c_dims[0], k = s.a_dims[1];
      const bool ta = s.a_strides[0] == 1 && m > 1;
      e->sgemm = MatMulEntry::Sgemm{ta ? 'T' : 'N', m, s.c_dims[1], k, ta ? m : k, s.alpha, s.sum_beta,
                                    s.bias, s.residual};
      return;
    }
    const KContiguousCopy k_copy = ChooseKContiguousCopy(s, impl, *dt);
    if (k_copy == KContiguousCopy::kA) {
      a_md = dnnl_util::PlainDesc(s.a_dims, *dt);
      e->a_copy.emplace(e->a_md, a_md);
      pd = make_pd(a_md, w_md, c_md);
    } else if (k_copy == KContiguousCopy::kB) {
      w_md = dnnl::memory::desc(dnnl_util::ToDims(s.b_dims), *dt, dnnl::memory::format_tag::ba);
      e->b_copy.emplace(e->b_md, w_md);
      pd = make_pd(a_md, w_md, c_md);
    } else if (strided && (impl.rfind("ref", 0) == 0 || (s.c_dims.size() > 2 && impl.rfind("brg", 0) != 0) ||
                           (binary_post_op && !Dense(s.c_dims, s.c_strides)))) {
      MT_CHECK(s.sum_beta == 0.0f) << "Gemm's C is never permuted";
      if (!Dense(s.a_dims, s.a_strides)) {
        a_md = dnnl_util::PlainDesc(s.a_dims, *dt);
        e->a_copy.emplace(e->a_md, a_md);
      }
      if (!s.pack_b && !Dense(s.b_dims, s.b_strides)) {
        w_md = dnnl_util::PlainDesc(s.b_dims, *dt);
        e->b_copy.emplace(e->b_md, w_md);
      }
      if (!Dense(s.c_dims, s.c_strides)) {
        c_md = dnnl_util::PlainDesc(s.c_dims, *out_dt);
        e->c_copy.emplace(c_md, e->c_md);
      }
      pd = make_pd(a_md, w_md, c_md);
    }
    if (s.pack_b && pd.weights_desc() != e->b_md) {
      e->pack.emplace(e->b_md, pd.weights_desc());
      e->packed_b = dnnl::memory(pd.weights_desc(), eng);  // owned: it outlives the call
      dnnl_util::Bind(e->pack->to(), e->packed_b.get_data_handle());
    }
    if (s.pack_b && !e->pack) pd = make_pd(a_md, e->b_md, c_md);  // `any` chose B's layout
    e->mm = dnnl_util::BoundPrimitive(dnnl::matmul(pd));
    e->mm.Arg(DNNL_ARG_SRC, e->a_copy ? e->a_copy->to() : dnnl_util::Unbound(a_md));
    e->mm.Arg(DNNL_ARG_WEIGHTS, e->pack ? e->pack->to()
                                : e->b_copy ? e->b_copy->to() : dnnl_util::Unbound(pd.weights_desc()));
    e->mm.Arg(DNNL_ARG_DST, e->c_copy ? e->c_copy->from() : dnnl_util::Unbound(c_md));
    if (s.bias) {
      e->bias_arg = native_bias ? DNNL_ARG_BIAS : (DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1);
      e->mm.Arg(e->bias_arg, e->bias_md);
    }
    if (s.residual) {
      e->z_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(z_post_op) | DNNL_ARG_SRC_1;
      e->mm.Arg(e->z_arg, e->z_md);
    }
  }));
  MT_RETURN_IF_ERROR(part_status);
  return e;
}

// Runs a built matmul on A, B -> C (C may already hold Gemm's beta * C). bias and z only when
// the spec had them. Dense copies of permuted operands are the call's scratch.
absl::Status Execute(const KernelContext& ctx, MatMulEntry& e, const void* a, const void* b,
                     void* c, const void* bias = nullptr, const void* z = nullptr) {
  for (MatMulEntry::Part& p : e.parts) {
    auto at = [](const void* base, size_t offset) {
      return base == nullptr ? nullptr : static_cast<const uint8_t*>(base) + offset;
    };
    MT_RETURN_IF_ERROR(Execute(ctx, *p.mm, at(a, p.a_offset), b,
                               const_cast<uint8_t*>(at(c, p.c_offset)), bias, at(z, p.z_offset)));
  }
  if (!e.parts.empty()) return absl::OkStatus();
  if (e.sgemm) {
    const MatMulEntry::Sgemm& g = *e.sgemm;
    // C = sum_beta * C + bias + Z, then C += alpha * A'B (oneDNN's order: the output scale
    // applies to the product only, as with the binary bias post-op; Z after it).
    auto* y = static_cast<float*>(c);
    const auto* bi = static_cast<const float*>(bias);
    const auto* zi = static_cast<const float*>(z);
    const bool prefill = g.bias || g.residual;
    if (prefill) {
#pragma omp parallel for if (g.m * g.n > (1 << 16)) schedule(static)
      for (int64_t i = 0; i < g.m; ++i) {
        float* row = y + i * g.n;
        const float* zr = zi != nullptr ? zi + i * g.n : nullptr;
        for (int64_t j = 0; j < g.n; ++j) {
          float v = g.sum_beta != 0.0f ? g.sum_beta * row[j] : 0.0f;
          if (bi != nullptr) v += bi[j];
          if (zr != nullptr) v += zr[j];
          row[j] = v;
        }
      }
    }
    const float beta = prefill ? 1.0f : g.sum_beta;
    const dnnl_status_t st = dnnl_sgemm(g.trans_a, 'N', g.m, g.n, g.k, g.alpha, static_cast<const float*>(a),
                                        g.lda, static_cast<const float*>(b), g.n, beta, y, g.n);
    if (st != dnnl_success) return ctx.Error(absl::StrCat("running sgemm: oneDNN status ", static_cast<int>(st)));
    return absl::OkStatus();
  }
  return Guard(ctx, "running matmul", [&] {
    using dnnl_util::Bind;
    if (e.pack && !e.packed) {
      Bind(e.pack->from(), b);
      e.pack->Execute();
      e.packed = true;
    }
    auto copy_in = [&](std::optional<dnnl_util::BoundReorder>& copy, const void* p, int arg) {
      if (!copy) {
        Bind(e.mm.at(arg), p);
        return;
      }
      Bind(copy->from(), p);
      Bind(copy->to(), dnnl_util::TakeScratch(copy->to().get_desc().get_size()));
      copy->Execute();
    };
    copy_in(e.a_copy, a, DNNL_ARG_SRC);
    if (!e.pack) copy_in(e.b_copy, b, DNNL_ARG_WEIGHTS);
    if (e.c_copy) {
      Bind(e.c_copy->from(), dnnl_util::TakeScratch(e.c_copy->from().get_desc().get_size()));
      Bind(e.c_copy->to(), c);
    } else {
      Bind(e.mm.at(DNNL_ARG_DST), c);
    }
    if (bias != nullptr) Bind(e.mm.at(e.bias_arg), bias);
    if (z != nullptr) Bind(e.mm.at(e.z_arg), z);
    e.mm.Execute();
    if (e.c_copy) e.c_copy->Execute();
    dnnl_util::Stream().wait();
  });
}

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
