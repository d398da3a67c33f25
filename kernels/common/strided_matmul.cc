#include "kernels/common/strided_matmul.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/tensor.h"

namespace mixtrain::smm {
namespace {

std::vector<int64_t> DenseStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// A tensor seen through a permutation: dims and element strides.
struct View {
  std::vector<int64_t> dims, strides;
};

View Permuted(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm) {
  View v{dims, DenseStrides(dims)};
  const std::vector<int64_t> dense = v.strides;
  for (size_t i = 0; i < perm.size(); ++i) {
    v.dims[i] = dims[perm[i]];
    v.strides[i] = dense[perm[i]];
  }
  return v;
}

// When neither matrix stride of `v` (rank r, batch dims broadcast with stride 0) is 1: the copy
// that makes it dense, after which `v` describes the copy.
bool DensifyIfNeeded(View& v, size_t r, Permutation* copy) {
  const int64_t rows = v.dims[r - 2], cols = v.dims[r - 1];
  if (v.strides[r - 1] == 1 || v.strides[r - 2] == 1 || rows == 1 || cols == 1) return false;
  *copy = {v.dims, v.strides};
  v.strides = DenseStrides(v.dims);
  for (size_t i = 0; i + 2 < r; ++i)
    if (v.dims[i] == 1) v.strides[i] = 0;
  return true;
}

}  // namespace

absl::Status CheckPerm(const char* name, const std::vector<int64_t>& perm, size_t rank) {
  if (perm.empty()) return absl::OkStatus();
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < static_cast<int64_t>(rank) && !seen[p];
    if (ok) seen[p] = true;
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat(name, " is not a permutation of ", rank, " dims"));
  return absl::OkStatus();
}

bool AsOperand(int64_t p, int64_t k, int64_t si, int64_t sj, int64_t stride, Operand* o) {
  if (p == 1) si = 1;
  if (k == 1 && si != 1) sj = 1;
  if (si == 1) {
    *o = {false, p, k, k == 1 ? p : sj, stride};
  } else if (sj == 1) {
    *o = {true, k, p, si, stride};
  } else {
    return false;
  }
  return true;
}

absl::StatusOr<MatMulPlan> PlanStridedMatMul(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                                             const std::vector<int64_t>& perm_a, const std::vector<int64_t>& perm_b,
                                             const std::vector<int64_t>& perm_y, int64_t y_numel) {
  if (a_dims.empty() || b_dims.empty()) return absl::InvalidArgumentError("operands must not be scalars");
  if ((a_dims.size() == 1 || b_dims.size() == 1) && (!perm_a.empty() || !perm_b.empty() || !perm_y.empty()))
    return absl::InvalidArgumentError("1-D operands take no permutations");
  if (a_dims.size() > 8 || b_dims.size() > 8) return absl::InvalidArgumentError("operands of rank > 8");
  MT_RETURN_IF_ERROR(CheckPerm("perm_a", perm_a, a_dims.size()));
  MT_RETURN_IF_ERROR(CheckPerm("perm_b", perm_b, b_dims.size()));

  // A' and B' as strided views; 1-D operands get ONNX's unit dim; batch dims broadcast (stride 0).
  View av = Permuted(a_dims, perm_a), bv = Permuted(b_dims, perm_b);
  if (av.dims.size() == 1) {
    av.dims.insert(av.dims.begin(), 1);
    av.strides.insert(av.strides.begin(), av.dims[1]);
  }
  if (bv.dims.size() == 1) {
    bv.dims.push_back(1);
    bv.strides.push_back(1);
  }
  const size_t r = std::max(av.dims.size(), bv.dims.size());
  for (View* v : {&av, &bv}) {
    v->strides.insert(v->strides.begin(), r - v->dims.size(), 0);
    v->dims.insert(v->dims.begin(), r - v->dims.size(), 1);
  }
  const int64_t m = av.dims[r - 2], k = av.dims[r - 1], n = bv.dims[r - 1];
  if (bv.dims[r - 2] != k)
    return absl::InvalidArgumentError(absl::StrCat("inner dims differ: ", k, " vs ", bv.dims[r - 2]));
  std::vector<int64_t> rd(r);  // R = A'.B', before perm_y
  for (size_t i = 0; i + 2 < r; ++i) {
    if (av.dims[i] != bv.dims[i] && av.dims[i] != 1 && bv.dims[i] != 1)
      return absl::InvalidArgumentError(
          absl::StrCat("batch dims do not broadcast: dim ", i, " is ", av.dims[i], " vs ", bv.dims[i]));
    rd[i] = std::max(av.dims[i], bv.dims[i]);
    if (av.dims[i] == 1) av.strides[i] = 0;
    if (bv.dims[i] == 1) bv.strides[i] = 0;
  }
  rd[r - 2] = m;
  rd[r - 1] = n;
  MT_RETURN_IF_ERROR(CheckPerm("perm_y", perm_y, r));
  // rs: where each element of R lands in Y.
  std::vector<int64_t> rs = DenseStrides(rd), yd = rd;
  if (!perm_y.empty()) {
    for (size_t i = 0; i < r; ++i) yd[i] = rd[perm_y[i]];
    const std::vector<int64_t> ys = DenseStrides(yd);
    for (size_t i = 0; i < r; ++i) rs[perm_y[i]] = ys[i];
  }
  if (NumElements(yd) != y_numel)
    return absl::InvalidArgumentError(
        absl::StrCat("output has ", y_numel, " elements, the product ", NumElements(yd)));

  MatMulPlan plan;
  plan.n = n;
  if (y_numel == 0) {
    plan.empty = true;
    return plan;
  }
  if (k == 0) {
    plan.zero = true;
    return plan;
  }
  plan.copy_a = DensifyIfNeeded(av, r, &plan.a_copy);
  plan.copy_b = DensifyIfNeeded(bv, r, &plan.b_copy);
  // The result in place in Y, or dense in a buffer and permuted into Y afterwards.
  std::vector<int64_t> ds = rs;
  plan.scatter = !(rs[r - 1] == 1 || rs[r - 2] == 1 || n == 1 || m == 1);
  if (plan.scatter) {
    ds = DenseStrides(rd);
    plan.y_scatter.out_dims = yd;
    for (size_t i = 0; i < r; ++i) plan.y_scatter.in_strides.push_back(ds[perm_y[i]]);
  }
  plan.bias_stride = plan.scatter ? 1 : rs[r - 1];

  // Batch dims: drop size 1, fold neighbours whose strides chain in all three; the innermost goes
  // to the library's strided batch, the outer ones become separate launches.
  struct BatchDim {
    int64_t size, sa, sb, sd;
  };
  std::vector<BatchDim> dims;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (rd[i] == 1) continue;
    BatchDim d{rd[i], av.strides[i], bv.strides[i], ds[i]};
    if (!dims.empty()) {
      BatchDim& o = dims.back();
      if (o.sa == d.sa * d.size && o.sb == d.sb * d.size && o.sd == d.sd * d.size) {
        o = {o.size * d.size, d.sa, d.sb, d.sd};
        continue;
      }
    }
    dims.push_back(d);
  }
  BatchDim inner = dims.empty() ? BatchDim{1, 0, 0, 0} : dims.back();
  if (!dims.empty()) dims.pop_back();

  // With R's columns contiguous, D = R^T [n, m] = B'^T . A'^T; else D = R = A'.B'.
  const int64_t sar = av.strides[r - 2], sac = av.strides[r - 1], sbr = bv.strides[r - 2],
                sbc = bv.strides[r - 1], sdr = ds[r - 2], sdc = ds[r - 1];
  Gemm& g = plan.gemm;
  bool ok;
  plan.x_is_b = sdc == 1 || n == 1;
  if (plan.x_is_b) {
    int64_t q = m;
    // B shared by every batch, and A's and D's batches continue their rows: one GEMM of batch * m
    // rows (the weight of a Linear layer over [batch, T, features]).
    if (inner.size > 1 && inner.sb == 0 && (sac == 1 || k == 1) && inner.sa == m * sar && inner.sd == m * sdr) {
      q *= inner.size;
      inner = {1, 0, 0, 0};
    }
    ok = AsOperand(n, k, sbc, sbr, inner.sb, &g.x) && AsOperand(k, q, sac, sar, inner.sa, &g.w) &&
         AsOperand(n, q, 1, sdr, inner.sd, &g.d);
  } else {
    ok = AsOperand(m, k, sar, sac, inner.sa, &g.x) && AsOperand(k, n, sbr, sbc, inner.sb, &g.w) &&
         AsOperand(m, n, sdr, sdc, inner.sd, &g.d);
  }
  MT_CHECK(ok && !g.d.trans) << "a matrix the GEMM cannot address survived the dense copies";
  g.batch = inner.size;

  int64_t outer = 1;
  for (const BatchDim& d : dims) outer *= d.size;
  std::vector<int64_t> idx(dims.size(), 0);
  plan.launches.reserve(outer);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t oa = 0, ob = 0, od = 0;
    for (size_t i = 0; i < dims.size(); ++i) {
      oa += idx[i] * dims[i].sa;
      ob += idx[i] * dims[i].sb;
      od += idx[i] * dims[i].sd;
    }
    plan.launches.push_back({plan.x_is_b ? ob : oa, plan.x_is_b ? oa : ob, od});
    for (size_t i = dims.size(); i-- > 0;) {
      if (++idx[i] < dims[i].size) break;
      idx[i] = 0;
    }
  }
  return plan;
}

}  // namespace mixtrain::smm
