// One matrix product on oneDNN, as the CPU's MatMul, FusedMatMul and Gemm kernels
// (dnnl_matmul.cc) run it: the spec of A' x B' -> C over strided views of dense buffers plus its
// epilogue, built once per shape into an entry (the matmul primitive with its argument copies,
// or oneDNN's sgemm, or row blocks of C: see Build) and executed many times.
#ifndef MIXTRAIN_KERNELS_CPU_DNNL_PRODUCT_H_
#define MIXTRAIN_KERNELS_CPU_DNNL_PRODUCT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/dnnl_common.h"

namespace mixtrain::dnnl_product {

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


// `out_dtype`: C's type where it differs from A's and B's (FusedMatMul's `to`: bf16 operands,
// an fp32 result, which oneDNN accumulates in fp32 anyway); kUndefined: the same.
absl::StatusOr<std::unique_ptr<MatMulEntry>> Build(const KernelContext& ctx, const MatMulSpec& s,
                                                   DType dtype, DType out_dtype = DType::kUndefined);

// Runs a built matmul on A, B -> C (C may already hold Gemm's beta * C). bias and z only when
// the spec had them. Dense copies of permuted operands are the call's scratch.
absl::Status Execute(const KernelContext& ctx, MatMulEntry& e, const void* a, const void* b,
                     void* c, const void* bias = nullptr, const void* z = nullptr);

}  // namespace mixtrain::dnnl_product

#endif  // MIXTRAIN_KERNELS_CPU_DNNL_PRODUCT_H_
