// How a FusedMatMul (graph/ops/fused_matmul_ops.cc) maps onto a column-major strided-batched GEMM
// library (cuBLASLt; kernels/cuda/gemm.cc): which operands are read in place through their
// permutations and which need a dense copy first, the GEMM's operand layouts, the launches over
// batch dims that do not fold into one stride, and where the epilogue's bias dim lies. Plain C++
// with no device code, so tests/kernels/strided_matmul_test.cc checks the plan on the CPU by
// carrying it out with a reference GEMM and comparing with the CPU kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace mixtrain::smm {

// One GEMM operand in column-major terms: the stored matrix is rows x cols with leading
// dimension ld, used as is or transposed; `stride` is the element offset between batches.
struct Operand {
  bool trans = false;
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;
  bool operator==(const Operand&) const = default;
};

// D[p, q] = alpha * op(X)[p, k] . op(W)[k, q] (+ beta * D), `batch` times; D is never transposed.
struct Gemm {
  int64_t batch = 1;
  Operand x, w, d;
  bool operator==(const Gemm&) const = default;
};

// A logical p x k matrix whose element (i, j) sits at i * si + j * sj as an operand; false when
// neither stride is 1. A dim of size 1 takes any stride.
bool AsOperand(int64_t p, int64_t k, int64_t si, int64_t sj, int64_t stride, Operand* o);

// OK when `perm` permutes 0..rank-1 (empty: the identity); else an error naming `name`.
absl::Status CheckPerm(const char* name, const std::vector<int64_t>& perm, size_t rank);

// y[j] = x at sum_i index_i(j) * in_strides[i], j dense over out_dims (a Transpose).
struct Permutation {
  std::vector<int64_t> out_dims, in_strides;
};

struct MatMulPlan {
  bool empty = false;        // Y has no elements: nothing to do
  bool zero = false;         // K == 0: Y is all zeros
  bool copy_a = false, copy_b = false;
  Permutation a_copy, b_copy;  // A' (B') made dense from A (B), when copy_a (copy_b)
  Gemm gemm;
  bool x_is_b = true;        // X reads B (or its copy) and W reads A; else X reads A, W reads B
  struct Launch {
    int64_t x = 0, w = 0, d = 0;  // element offsets into X's, W's and D's buffers
  };
  std::vector<Launch> launches;
  bool scatter = false;      // D is a dense buffer of R, permuted into Y by `y_scatter`
  Permutation y_scatter;
  int64_t n = 0;             // R's last dim: the bias's length
  int64_t bias_stride = 1;   // the stride of R's last dim in the buffer the epilogue walks
};

// The plan of Y = Transpose(A' . B', perm_y) with A' = Transpose(A, perm_a) and B' likewise
// (empty perms: none; MatMul's numpy rules for 1-D operands and batch broadcast). An error
// message says what is wrong with the shapes or perms.
absl::StatusOr<MatMulPlan> PlanStridedMatMul(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                                             const std::vector<int64_t>& perm_a, const std::vector<int64_t>& perm_b,
                                             const std::vector<int64_t>& perm_y, int64_t y_numel);

}  // namespace mixtrain::smm
