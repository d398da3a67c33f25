// CUDA matrix products and the transformer ops around them against the CPU kernels: MatMul's
// folded / batched / shared-A / broadcast shapes, FusedMatMul's permuted operands, folds, scatter
// and epilogues, Gemm's transposes and C broadcast, attention's masked softmax and its gradient,
// LayerNorm's gradient, Gather and GatherGrad.
#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda/cuda_kernel_test_util.h"

namespace mixtrain::cuda_test {
namespace {

TEST_F(CudaKernelTest, MatMulShapes) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{17, 33}, {33, 19}}, {{2, 3, 17, 33}, {33, 19}}, {{4, 17, 33}, {4, 33, 19}},
      {{17, 33}, {4, 33, 19}}, {{33}, {33, 19}}, {{17, 33}, {33}}, {{2, 1, 17, 33}, {3, 33, 19}},
      {{3, 1, 5, 33}, {2, 33, 19}}};
  for (DType t : kDtypes)
    for (const auto& [da, db] : shapes)
      Check("MatMul", {Make(t, da, Uniform(ew_test::Count(da), -1, 1, 12)),
                       Make(t, db, Uniform(ew_test::Count(db), -1, 1, 13))});
}

// FusedMatMul's branches: operands read in place through perms (a last-two swap, attention's
// head split), a perm neither matrix stride of which is 1 (dense copy first), perm_y written in
// place and scattered, a shared weight folded into rows, bias / activation / residual epilogues.
TEST_F(CudaKernelTest, FusedMatMulPermsAndEpilogues) {
  using Ints = std::vector<int64_t>;
  struct Case {
    Ints a, b;
    Ints perm_a, perm_b, perm_y;
    bool bias, z;
    std::string act;
  };
  const std::vector<Case> cases = {
      {{6, 20}, {20, 12}, {}, {}, {}, true, true, "Gelu"},
      {{2, 5, 6, 20}, {20, 12}, {}, {}, {}, true, false, "GeluTanh"},      // folded into one GEMM
      {{20, 6}, {12, 20}, {1, 0}, {1, 0}, {}, true, false, "Relu"},        // both transposed
      {{2, 6, 3, 8}, {2, 7, 3, 8}, {0, 2, 1, 3}, {0, 2, 3, 1}, {}, false, false, "Sigmoid"},  // Q.K^T
      {{2, 3, 6, 7}, {2, 7, 3, 8}, {}, {0, 2, 1, 3}, {0, 2, 1, 3}, false, false, ""},  // P.V, heads merged
      {{5, 4, 6}, {4, 7}, {2, 0, 1}, {}, {2, 0, 1}, true, false, "Tanh"},  // dense copy of A; Y = A'.B' in place
      {{3, 6, 5}, {5, 7}, {}, {}, {1, 2, 0}, true, false, ""},               // Y scattered from a dense copy
  };
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      std::vector<Tensor> in = {Make(t, c.a, Uniform(ew_test::Count(c.a), -1, 1, 31)),
                                Make(t, c.b, Uniform(ew_test::Count(c.b), -1, 1, 32))};
      std::vector<Attribute> attrs = {Attribute::Float("alpha", 0.75f)};
      if (!c.perm_a.empty()) attrs.push_back(Attribute::Ints("perm_a", c.perm_a));
      if (!c.perm_b.empty()) attrs.push_back(Attribute::Ints("perm_b", c.perm_b));
      if (!c.perm_y.empty()) attrs.push_back(Attribute::Ints("perm_y", c.perm_y));
      if (!c.act.empty()) attrs.push_back(Attribute::String("activation", c.act));
      // N is the last dim of B' (B permuted).
      const int64_t n = c.perm_b.empty() ? c.b.back() : c.b[c.perm_b.back()];
      in.push_back(c.bias ? Make(t, {n}, Uniform(n, -1, 1, 33)) : Tensor());
      if (c.z) {
        auto cpu = testing_util::RunCpuKernel(*MakeNode("FusedMatMul", in, 1, attrs, "ai.mixtrain").node, in, 17);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        const Ints& yd = (*cpu)[0].dims();
        in.push_back(Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, 34)));
      }
      Check("FusedMatMul", in, attrs, 1, "ai.mixtrain");
    }
}

TEST_F(CudaKernelTest, GemmTransposesAndBias) {
  for (DType t : kDtypes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Tensor a = Make(t, ta ? std::vector<int64_t>{31, 9} : std::vector<int64_t>{9, 31}, Uniform(279, -1, 1, 14));
        Tensor b = Make(t, tb ? std::vector<int64_t>{13, 31} : std::vector<int64_t>{31, 13}, Uniform(403, -1, 1, 15));
        std::vector<Attribute> attrs = {Attribute::Int("transA", ta), Attribute::Int("transB", tb),
                                        Attribute::Float("alpha", 0.5f), Attribute::Float("beta", 2.0f)};
        Check("Gemm", {a, b}, attrs);
        Check("Gemm", {a, b, Make(t, {13}, Uniform(13, -1, 1, 16))}, attrs);
        Check("Gemm", {a, b, Make(t, {9, 13}, Uniform(117, -1, 1, 17))}, attrs);
      }
}

// The transformer ops: masks broadcast along rows and along the row (mask_inner 1 and 0), rows
// longer than a block, LayerNorm's column sums with a float scale under low-precision X, gathers
// with negative and repeated indices (the embedding's backward adds repeats in index order).
TEST_F(CudaKernelTest, TransformerOps) {
  const std::vector<Attribute> masked = {Attribute::Float("scale", 0.125f), Attribute::Float("fill", -1e4f)};
  for (DType t : kDtypes) {
    Tensor x = Make(t, {2, 3, 5, 40}, Uniform(1200, -30, 30, 40));
    Tensor along = Make(DType::kBool, {2, 1, 5, 40}, Uniform(400, 0, 1.6, 41));  // rounds to 0/1
    Tensor rows = Make(DType::kBool, {2, 1, 5, 1}, {1, 0, 1, 1, 0, 1, 1, 1, 0, 1});
    Check("MaskedSoftmax", {x, along}, masked, 1, "ai.mixtrain");
    Check("MaskedSoftmax", {x, rows}, masked, 1, "ai.mixtrain");
    Tensor longx = Make(t, {3, 700}, Uniform(2100, -5, 5, 42));
    Check("MaskedSoftmax", {longx, Make(DType::kBool, {700}, Uniform(700, 0, 1.6, 43))}, masked, 1, "ai.mixtrain");
    Tensor dy = Make(t, {2, 3, 5, 40}, Uniform(1200, -1, 1, 44));
    Tensor y = Make(t, {2, 3, 5, 40}, Uniform(1200, 0, 0.05, 45));
    Check("SoftmaxGrad", {dy, y}, {}, 1, "ai.mixtrain");
    Check("SoftmaxGrad", {dy, y, along}, {Attribute::Float("scale", 0.125f)}, 1, "ai.mixtrain");
    Check("SoftmaxGrad", {dy, y, rows}, {}, 1, "ai.mixtrain");
    Check("SoftmaxGrad", {Make(t, {3, 700}, Uniform(2100, -1, 1, 46)), Make(t, {3, 700}, Uniform(2100, 0, 0.003, 47))},
          {}, 1, "ai.mixtrain");

    for (DType pt : {t, DType::kF32}) {
      Tensor lx = Make(t, {6, 300}, Uniform(1800, -3, 5, 48));
      Tensor ldy = Make(t, {6, 300}, Uniform(1800, -1, 1, 49));
      Tensor scale = Make(pt, {300}, Uniform(300, 0.5, 1.5, 50));
      Check("LayerNormalizationGrad", {ldy, lx, scale}, {Attribute::Float("epsilon", 1e-5f)}, 3, "ai.mixtrain");
      Tensor sx = Make(t, {4, 250, 24}, Uniform(24000, -2, 2, 51));
      Tensor sdy = Make(t, {4, 250, 24}, Uniform(24000, -1, 1, 52));
      Check("LayerNormalizationGrad", {sdy, sx, Make(pt, {24}, Uniform(24, 0.5, 1.5, 53))}, {}, 3, "ai.mixtrain");
      Check("LayerNormalizationGrad", {sdy, sx, Make(pt, {250, 24}, Uniform(6000, 0.5, 1.5, 54))},
            {Attribute::Int("axis", 1)}, 3, "ai.mixtrain");
    }

    Tensor gx = Make(t, {4, 3, 5}, Uniform(60, -9, 9, 55));
    Tensor gdy = Make(t, {4, 3, 5}, Uniform(60, -9, 9, 56));
    for (const char* approx : {"none", "tanh"}) {
      Check("GeluGrad", {gdy, gx}, {Attribute::String("approximate", approx)}, 1, "ai.mixtrain");
      Check("Gelu", {gx}, {Attribute::String("approximate", approx)}, 1, "ai.mixtrain");
    }

    Tensor table = Make(t, {10, 7}, Uniform(70, -9, 9, 57));
    Tensor ids = Make(DType::kI64, {3, 4}, {0, 9, -1, 3, 3, 3, 2, -10, 5, 9, 0, 1});
    Check("Gather", {table, ids});
    Tensor cube = Make(t, {3, 10, 5}, Uniform(150, -9, 9, 58));
    Check("Gather", {cube, Make(DType::kI32, {4}, {7, -3, 0, 7})}, {Attribute::Int("axis", 1)});
    Tensor dtab = Make(t, {3, 4, 7}, Uniform(84, -1, 1, 59));
    for (DType xt : {t, DType::kF32})
      Check("GatherGrad", {dtab, ids, Make(xt, {10, 7}, Uniform(70, -1, 1, 60))}, {}, 1, "ai.mixtrain");
    Check("GatherGrad", {Make(t, {3, 4, 5}, Uniform(60, -1, 1, 61)), Make(DType::kI32, {4}, {7, -3, 0, 7}), cube},
          {Attribute::Int("axis", 1)}, 1, "ai.mixtrain");
  }
  Check("Gather", {Make(DType::kI64, {10, 2}, Uniform(20, -100, 100, 62)), Make(DType::kI64, {3}, {4, -1, 4})});
}

}  // namespace
}  // namespace mixtrain::cuda_test
