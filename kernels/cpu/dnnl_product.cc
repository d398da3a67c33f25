// See dnnl_product.h.
#include "kernels/cpu/dnnl_product.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace mixtrain::dnnl_product {
namespace {

using dnnl_util::Guard;

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

}  // namespace

absl::StatusOr<std::unique_ptr<MatMulEntry>> Build(const KernelContext& ctx, const MatMulSpec& s,
                                                   DType dtype, DType out_dtype) {
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

absl::Status Execute(const KernelContext& ctx, MatMulEntry& e, const void* a, const void* b,
                     void* c, const void* bias, const void* z) {
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

}  // namespace mixtrain::dnnl_product
