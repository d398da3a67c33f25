// The plan the CUDA MatMul / FusedMatMul kernel follows (kernels/common/strided_matmul.h), carried
// out here on the CPU: its dense copies, a reference column-major strided-batched GEMM with the
// meaning cuBLASLt gives each operand field (trans, rows, cols, ld, batch stride), the launches,
// the bias at the plan's stride, and the scatter into Y. Every case is compared with the CPU
// FusedMatMul kernel, and every read and write is bounds-checked: each element of the result
// buffer must be written exactly once. This is what the GPU kernel's layout logic can be tested
// by without a GPU; cuda_kernels_test runs the real thing where there is one.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/strided_matmul.h"
#include "tests/kernels/elementwise_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain {
namespace {

using Ints = std::vector<int64_t>;

std::vector<double> Permute(const smm::Permutation& p, const std::vector<double>& x) {
  const int64_t n = ew_test::Count(p.out_dims);
  std::vector<double> y(n);
  const size_t r = p.out_dims.size();
  for (int64_t j = 0; j < n; ++j) {
    int64_t rest = j, off = 0;
    for (size_t i = r; i-- > 0;) {
      off += (rest % p.out_dims[i]) * p.in_strides[i];
      rest /= p.out_dims[i];
    }
    EXPECT_TRUE(off >= 0 && off < static_cast<int64_t>(x.size())) << "permutation reads out of bounds";
    y[j] = off >= 0 && off < static_cast<int64_t>(x.size()) ? x[off] : NAN;
  }
  return y;
}

// Element (i, j) of op(o) for a column-major operand at `base` in `buf`.
double At(const std::vector<double>& buf, int64_t base, const smm::Operand& o, int64_t i, int64_t j) {
  const int64_t off = base + (o.trans ? j + i * o.ld : i + j * o.ld);
  EXPECT_TRUE(off >= 0 && off < static_cast<int64_t>(buf.size())) << "GEMM operand read out of bounds";
  return off >= 0 && off < static_cast<int64_t>(buf.size()) ? buf[off] : NAN;
}

struct Case {
  Ints a, b, perm_a, perm_b, perm_y;
};

// Runs the plan of `c` and the CPU kernel on the same operands (alpha 0.5, a bias unless B is 1-D)
// and compares.
void CheckCase(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "A " << ::testing::PrintToString(c.a) << " perm_a "
                                    << ::testing::PrintToString(c.perm_a) << ", B " << ::testing::PrintToString(c.b)
                                    << " perm_b " << ::testing::PrintToString(c.perm_b) << ", perm_y "
                                    << ::testing::PrintToString(c.perm_y));
  const std::vector<double> av = ew_test::Uniform(ew_test::Count(c.a), -1, 1, seed);
  const std::vector<double> bv = ew_test::Uniform(ew_test::Count(c.b), -1, 1, seed + 1);
  const int64_t n = c.b.size() == 1 ? 1 : (c.perm_b.empty() ? c.b.back() : c.b[c.perm_b.back()]);
  const std::vector<double> biasv = ew_test::Uniform(n, -1, 1, seed + 2);
  std::vector<Tensor> in = {ew_test::Make(DType::kF32, c.a, av), ew_test::Make(DType::kF32, c.b, bv),
                            ew_test::Make(DType::kF32, {n}, biasv)};
  const bool with_bias = c.b.size() > 1;  // a 1-D B drops N from Y: no bias to add
  if (!with_bias) in.pop_back();
  std::vector<Attribute> attrs = {Attribute::Float("alpha", 0.5f)};
  if (!c.perm_a.empty()) attrs.push_back(Attribute::Ints("perm_a", c.perm_a));
  if (!c.perm_b.empty()) attrs.push_back(Attribute::Ints("perm_b", c.perm_b));
  if (!c.perm_y.empty()) attrs.push_back(Attribute::Ints("perm_y", c.perm_y));
  auto node = testing_util::MakeNode("FusedMatMul", in, 1, attrs, "ai.mixtrain");
  auto cpu = testing_util::RunCpuKernel(*node.node, in, 17);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const Tensor& want = (*cpu)[0];

  auto plan = smm::PlanStridedMatMul(c.a, c.b, c.perm_a, c.perm_b, c.perm_y, want.numel());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const smm::MatMulPlan& p = *plan;
  ASSERT_FALSE(p.empty || p.zero);
  ASSERT_EQ(p.n, n);
  const std::vector<double> a = p.copy_a ? Permute(p.a_copy, av) : av;
  const std::vector<double> b = p.copy_b ? Permute(p.b_copy, bv) : bv;
  const std::vector<double>& x = p.x_is_b ? b : a;
  const std::vector<double>& w = p.x_is_b ? a : b;
  std::vector<double> d(want.numel(), NAN);
  std::vector<int> writes(want.numel(), 0);
  const smm::Gemm& g = p.gemm;
  ASSERT_FALSE(g.d.trans);
  const int64_t P = g.d.rows, Q = g.d.cols, K = g.x.trans ? g.x.rows : g.x.cols;
  ASSERT_EQ(g.x.trans ? g.x.cols : g.x.rows, P) << "op(X) rows vs D rows";
  ASSERT_EQ(g.w.trans ? g.w.rows : g.w.cols, Q) << "op(W) cols vs D cols";
  ASSERT_EQ(g.w.trans ? g.w.cols : g.w.rows, K) << "op(W) rows vs op(X) cols";
  for (const smm::Operand* o : {&g.x, &g.w, &g.d}) ASSERT_GE(o->ld, std::max<int64_t>(1, o->rows)) << "ld < rows";
  for (const auto& l : p.launches)
    for (int64_t bi = 0; bi < g.batch; ++bi)
      for (int64_t i = 0; i < P; ++i)
        for (int64_t j = 0; j < Q; ++j) {
          double s = 0;
          for (int64_t kk = 0; kk < K; ++kk)
            s += At(x, l.x + bi * g.x.stride, g.x, i, kk) * At(w, l.w + bi * g.w.stride, g.w, kk, j);
          const int64_t off = l.d + bi * g.d.stride + i + j * g.d.ld;
          ASSERT_TRUE(off >= 0 && off < static_cast<int64_t>(d.size())) << "GEMM writes out of bounds";
          d[off] = 0.5 * s;
          ++writes[off];
        }
  for (size_t i = 0; i < writes.size(); ++i) ASSERT_EQ(writes[i], 1) << "result element " << i;
  if (with_bias)
    for (size_t i = 0; i < d.size(); ++i) d[i] += biasv[(i / p.bias_stride) % p.n];
  const std::vector<double> y = p.scatter ? Permute(p.y_scatter, d) : d;
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i)
    if (!(std::fabs(y[i] - want.GetDouble(i)) <= 1e-4 * (1 + std::fabs(y[i])))) {
      ++bad;
      ADD_FAILURE() << "element " << i << ": plan " << y[i] << ", CPU kernel " << want.GetDouble(i);
    }
}

TEST(StridedMatMulPlan, NamedLayouts) {
  const std::vector<Case> cases = {
      {{6, 20}, {20, 12}, {}, {}, {}},
      {{20}, {20, 12}, {}, {}, {}},                                       // 1-D A
      {{6, 20}, {20}, {}, {}, {}},                                        // 1-D B
      {{2, 5, 6, 20}, {20, 12}, {}, {}, {}},                              // shared weight: folded rows
      {{20, 6}, {12, 20}, {1, 0}, {1, 0}, {}},                            // both stored transposed
      {{2, 6, 3, 8}, {2, 7, 3, 8}, {0, 2, 1, 3}, {0, 2, 3, 1}, {}},       // attention Q.K^T
      {{2, 3, 6, 7}, {2, 7, 3, 8}, {}, {0, 2, 1, 3}, {0, 2, 1, 3}},       // P.V, heads merged back
      {{5, 4, 6}, {4, 7}, {2, 0, 1}, {}, {2, 0, 1}},                      // dense copy of A
      {{3, 6, 5}, {5, 7}, {}, {}, {1, 2, 0}},                             // scattered result
      {{3, 1, 5, 9}, {2, 9, 4}, {}, {}, {}},                              // batch broadcast both ways
      {{4, 5, 9}, {9, 1}, {}, {}, {}},                                    // N = 1
      {{4, 1, 9}, {4, 9, 6}, {}, {}, {}},                                 // M = 1
      {{4, 5, 1}, {4, 1, 6}, {}, {}, {}},                                 // K = 1
  };
  uint32_t seed = 100;
  for (const Case& c : cases) CheckCase(c, seed += 3);
}

// Random shapes, broadcasts and permutations of rank 2 to 4 operands and results.
TEST(StridedMatMulPlan, RandomLayouts) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto perm_of = [&](size_t r) {
    Ints p(r);
    for (size_t i = 0; i < r; ++i) p[i] = static_cast<int64_t>(i);
    std::shuffle(p.begin(), p.end(), rng);
    bool identity = true;
    for (size_t i = 0; i < r; ++i) identity &= p[i] == static_cast<int64_t>(i);
    return identity ? Ints{} : p;
  };
  for (int it = 0; it < 300; ++it) {
    const int rank = pick(2, 4), nb = rank - 2;
    Ints batch(nb);
    for (int64_t& d : batch) d = pick(1, 3);
    const int64_t m = pick(1, 5), k = pick(1, 5), n = pick(1, 5);
    // A' = [batch (or 1 where A broadcasts), m, k]; B' likewise; B may drop its batch dims.
    Ints ap, bp;
    for (int i = 0; i < nb; ++i) ap.push_back(pick(0, 3) == 0 ? 1 : batch[i]);
    const bool b_batched = pick(0, 1) == 1;
    if (b_batched)
      for (int i = 0; i < nb; ++i) bp.push_back(pick(0, 3) == 0 ? 1 : batch[i]);
    ap.insert(ap.end(), {m, k});
    bp.insert(bp.end(), {k, n});
    Case c;
    c.perm_a = pick(0, 1) ? perm_of(ap.size()) : Ints{};
    c.perm_b = pick(0, 1) ? perm_of(bp.size()) : Ints{};
    c.perm_y = pick(0, 1) ? perm_of(std::max(ap.size(), bp.size())) : Ints{};
    // Stored dims: A'[i] = A[perm_a[i]].
    c.a = ap;
    if (!c.perm_a.empty())
      for (size_t i = 0; i < ap.size(); ++i) c.a[c.perm_a[i]] = ap[i];
    c.b = bp;
    if (!c.perm_b.empty())
      for (size_t i = 0; i < bp.size(); ++i) c.b[c.perm_b[i]] = bp[i];
    CheckCase(c, 1000 + 3 * it);
    if (HasFatalFailure() || HasFailure()) return;
  }
}

TEST(StridedMatMulPlan, ErrorsNameTheProblem) {
  auto e = smm::PlanStridedMatMul({4, 5}, {6, 7}, {}, {}, {}, 28);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("inner dims differ"), std::string::npos);
  e = smm::PlanStridedMatMul({2, 4, 5}, {3, 5, 7}, {}, {}, {}, 56);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("do not broadcast"), std::string::npos);
  e = smm::PlanStridedMatMul({4, 5}, {5, 7}, {0, 0}, {}, {}, 28);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("perm_a"), std::string::npos);
  e = smm::PlanStridedMatMul({4, 5}, {5, 7}, {}, {}, {}, 27);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("output has 27"), std::string::npos);
  auto zero = smm::PlanStridedMatMul({4, 0}, {0, 7}, {}, {}, {}, 28);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->zero);
}

}  // namespace
}  // namespace mixtrain
