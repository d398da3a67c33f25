// ai.mixtrain FusedMatMul's CPU kernel against the unfused subgraph it replaces (Transpose,
// MatMul, Mul, Add, activation, Add, Transpose run one kernel at a time in fp32 on the same
// rounded inputs), in fp32/bf16/fp16, with batch broadcast, permutations, bias, residual, every
// activation, 1-D operands and odd sizes; and MatMul/Gemm/FusedMatMul with a constant B, whose
// weights the kernel reorders once and reuses.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "tests/kernels/dnnl_test_util.h"

namespace mixtrain {
namespace {

using dnnl_testing::ExpectNear;
using dnnl_testing::Random;
using dnnl_testing::ToF32;
using dnnl_testing::ToType;
using testing_util::MakeNode;
using testing_util::RunCpuKernel;

struct Case {
  std::vector<int64_t> a, b;                 // A and B as stored
  std::vector<int64_t> perm_a, perm_b, perm_y;
  float alpha = 1.0f;
  std::vector<int64_t> bias;                 // empty: no bias
  bool z = false;
  std::string activation;
};

// Runs `op` once in fp32 (the reference's building block).
Tensor Op(const std::string& op, std::vector<Tensor> in, std::vector<Attribute> attrs = {}) {
  auto n = MakeNode(op, in, 1, std::move(attrs));
  auto out = RunCpuKernel(*n.node, in, 20);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  return out.ok() ? (*out)[0] : Tensor();
}

// The unfused subgraph on fp32 copies of the inputs.
Tensor Reference(const Case& c, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& z) {
  Tensor x = c.perm_a.empty() ? ToF32(a) : Op("Transpose", {ToF32(a)}, {Attribute::Ints("perm", c.perm_a)});
  Tensor w = c.perm_b.empty() ? ToF32(b) : Op("Transpose", {ToF32(b)}, {Attribute::Ints("perm", c.perm_b)});
  Tensor y = Op("MatMul", {x, w});
  if (c.alpha != 1.0f) y = Op("Mul", {y, Tensor::Scalar(c.alpha)});
  if (bias.defined()) y = Op("Add", {y, ToF32(bias)});
  if (c.activation == "GeluTanh") {
    y = Op("Gelu", {y}, {Attribute::String("approximate", "tanh")});
  } else if (!c.activation.empty()) {
    y = Op(c.activation, {y});
  }
  if (z.defined()) y = Op("Add", {y, ToF32(z)});
  if (!c.perm_y.empty()) y = Op("Transpose", {y}, {Attribute::Ints("perm", c.perm_y)});
  return y;
}

std::vector<Attribute> FusedAttrs(const Case& c) {
  std::vector<Attribute> attrs;
  if (!c.perm_a.empty()) attrs.push_back(Attribute::Ints("perm_a", c.perm_a));
  if (!c.perm_b.empty()) attrs.push_back(Attribute::Ints("perm_b", c.perm_b));
  if (!c.perm_y.empty()) attrs.push_back(Attribute::Ints("perm_y", c.perm_y));
  if (c.alpha != 1.0f) attrs.push_back(Attribute::Float("alpha", c.alpha));
  if (!c.activation.empty()) attrs.push_back(Attribute::String("activation", c.activation));
  return attrs;
}

// Runs a node's kernel `runs` times on the same buffers, input i constant where constant[i].
absl::StatusOr<Tensor> RunKernel(const Node& node, const std::vector<Tensor>& in,
                                 const std::vector<int64_t>& out_dims, std::vector<bool> constant,
                                 int runs) {
  std::vector<DType> in_dtypes;
  std::vector<TensorView> views(in.size());
  std::vector<const TensorView*> ptrs;
  for (size_t i = 0; i < in.size(); ++i) {
    in_dtypes.push_back(in[i].dtype());
    if (!in[i].defined()) {
      ptrs.push_back(nullptr);
      continue;
    }
    views[i] = {in[i].dtype(), in[i].dims(), const_cast<void*>(in[i].data())};
    ptrs.push_back(&views[i]);
  }
  Tensor out(in[0].dtype(), out_dims);
  TensorView ov{out.dtype(), out.dims(), out.data()};
  MT_ASSIGN_OR_RETURN(const KernelDef* def,
                      KernelRegistry::Global().Find(node, DeviceType::kCPU, in_dtypes, {out.dtype()}));
  MT_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> kernel, def->factory(node));
  for (int r = 0; r < runs; ++r) {
    std::memset(out.data(), 0xff, out.nbytes());  // a run must not rely on the last one's output
    KernelContext ctx(node, DeviceType::kCPU, ptrs, {&ov});
    ctx.set_constant_inputs(constant);
    MT_RETURN_IF_ERROR(kernel->Compute(ctx));
  }
  return out;
}

float Tol(DType dt) { return dt == DType::kF32 ? 2e-5f : dt == DType::kF16 ? 4e-3f : 2e-2f; }

// Checks FusedMatMul against the reference in every float type, with B variable and constant.
void CheckCase(const Case& c, uint32_t seed) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string("dtype ") + DTypeName(dt));
    Tensor a = ToType(Random(c.a, seed), dt), b = ToType(Random(c.b, seed + 1), dt);
    Tensor bias = c.bias.empty() ? Tensor() : ToType(Random(c.bias, seed + 2), dt);
    Tensor z;
    if (c.z) {
      Tensor shape_probe = Reference({c.a, c.b, c.perm_a, c.perm_b, {}, 1.0f, {}, false, ""}, a, b,
                                     Tensor(), Tensor());
      z = ToType(Random(shape_probe.dims(), seed + 3), dt);
    }
    Tensor want = Reference(c, a, b, bias, z);
    auto node = MakeNode("FusedMatMul", {a, b, bias, z}, 1, FusedAttrs(c), "ai.mixtrain");
    for (bool constant_b : {false, true}) {
      SCOPED_TRACE(constant_b ? "constant B" : "variable B");
      auto got = RunKernel(*node.node, {a, b, bias, z}, want.dims(), {false, constant_b, false, false}, 2);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->dtype(), dt);
      ExpectNear(*got, want, Tol(dt));
    }
    // The shape rule agrees with the kernel's output.
    auto inferred = RunCpuKernel(*node.node, {a, b, bias, z}, 20);
    ASSERT_TRUE(inferred.ok()) << inferred.status();
    EXPECT_EQ((*inferred)[0].dims(), want.dims());
  }
}

TEST(FusedMatMulKernel, BiasOddSizes) { CheckCase({.a = {5, 7}, .b = {7, 3}, .bias = {3}}, 1); }

TEST(FusedMatMulKernel, BatchedWithBroadcastBatchBiasResidualGelu) {
  CheckCase({.a = {2, 3, 5, 7}, .b = {3, 7, 6}, .bias = {1, 6}, .z = true, .activation = "Gelu"}, 2);
}

TEST(FusedMatMulKernel, BroadcastA) { CheckCase({.a = {5, 7}, .b = {2, 7, 4}, .bias = {4}}, 3); }

TEST(FusedMatMulKernel, ThreeDimActivationsAgainstSharedWeights) {
  CheckCase({.a = {2, 9, 16}, .b = {16, 33}, .bias = {33}, .z = true, .activation = "Gelu"}, 4);
}

// Attention scores: Q and K^T read in place from [batch, T, heads, d] buffers, scaled.
TEST(FusedMatMulKernel, AttentionScoresPermutedOperandsAlpha) {
  CheckCase({.a = {2, 5, 3, 4}, .b = {2, 5, 3, 4}, .perm_a = {0, 2, 1, 3}, .perm_b = {0, 2, 3, 1},
             .alpha = 0.5f},
            5);
}

// Attention output: V read in place, the result written straight to [batch, T, heads, d].
TEST(FusedMatMulKernel, AttentionValuesPermutedResult) {
  CheckCase({.a = {2, 3, 5, 5}, .b = {2, 5, 3, 4}, .perm_b = {0, 2, 1, 3}, .perm_y = {0, 2, 1, 3}}, 6);
}

// Layouts oneDNN's brgemm matmul does not stride through: the kernel copies them dense around
// the matmul instead (batch dims swapped with matrix dims, a permuted result with a bias).
TEST(FusedMatMulKernel, PermutationsBrgemmRefusesAreCopiedDense) {
  CheckCase({.a = {5, 2, 3, 4}, .b = {3, 6, 2, 4}, .perm_a = {1, 2, 0, 3}, .perm_b = {2, 0, 3, 1},
             .perm_y = {3, 1, 0, 2}, .bias = {6}, .activation = "Relu"},
            15);
}

TEST(FusedMatMulKernel, TransposedTwoDimOperandsWithAlphaAndBias) {
  CheckCase({.a = {7, 5}, .b = {3, 7}, .perm_a = {1, 0}, .perm_b = {1, 0}, .alpha = -1.5f, .bias = {3}}, 7);
}

// fp32 products with B [K, N] as stored and no activation run on oneDNN's sgemm where the
// primitive would be brgemm (AVX-512): the bias, the residual and alpha's order as the
// primitive's (alpha scales the product only), A plain, transposed, and 3-D against 2-D weights.
TEST(FusedMatMulKernel, PlainWeightsEpilogueInC) {
  CheckCase({.a = {6, 11}, .b = {11, 13}, .alpha = 0.75f, .bias = {13}, .z = true}, 16);
  CheckCase({.a = {11, 6}, .b = {11, 13}, .perm_a = {1, 0}, .alpha = -1.5f, .bias = {13}, .z = true}, 17);
  CheckCase({.a = {2, 9, 16}, .b = {16, 33}, .bias = {33}, .z = true}, 18);
  CheckCase({.a = {2, 9, 16}, .b = {16, 33}, .z = true}, 19);
  CheckCase({.a = {40, 64}, .b = {64, 96}, .alpha = 2.0f}, 20);
}

// A bf16 product with A transposed and M long next to N (a classifier's weight gradient over a
// vocabulary) runs as two row blocks of C: each block's rows of A, C and Z, the same B and bias.
TEST(FusedMatMulKernel, TransposedALongMRunsAsRowBlocks) {
  CheckCase({.a = {8, 8203}, .b = {8, 5}, .perm_a = {1, 0}, .bias = {5}, .z = true}, 21);
  CheckCase({.a = {8, 8200}, .b = {8, 3}, .perm_a = {1, 0}, .alpha = 0.5f}, 22);
}

TEST(FusedMatMulKernel, EveryActivation) {
  for (const char* act : {"Relu", "Gelu", "GeluTanh", "Sigmoid", "Tanh"}) {
    SCOPED_TRACE(act);
    CheckCase({.a = {6, 11}, .b = {11, 13}, .alpha = 0.75f, .bias = {13}, .z = true, .activation = act}, 8);
    CheckCase({.a = {6, 11}, .b = {11, 13}, .bias = {13}, .activation = act}, 9);
  }
}

TEST(FusedMatMulKernel, VectorOperands) {
  CheckCase({.a = {7}, .b = {2, 7, 3}, .bias = {3}, .z = true}, 10);
  CheckCase({.a = {4, 7}, .b = {7}, .activation = "Relu"}, 11);
}

TEST(FusedMatMulKernel, RejectsBadAttributes) {
  Tensor a = Random({2, 3}, 1), b = Random({3, 4}, 2), z = Random({4, 2}, 3);
  auto bad_perm = MakeNode("FusedMatMul", {a, b}, 1, {Attribute::Ints("perm_a", {0, 0})}, "ai.mixtrain");
  EXPECT_FALSE(RunCpuKernel(*bad_perm.node, {a, b}).ok());
  auto bad_act = MakeNode("FusedMatMul", {a, b}, 1, {Attribute::String("activation", "Swish")}, "ai.mixtrain");
  EXPECT_FALSE(RunCpuKernel(*bad_act.node, {a, b}).ok());
  auto z_perm = MakeNode("FusedMatMul", {a, b, Tensor(), z}, 1, {Attribute::Ints("perm_y", {1, 0})},
                         "ai.mixtrain");
  EXPECT_FALSE(RunCpuKernel(*z_perm.node, {a, b, Tensor(), z}).ok());
  Tensor bias5 = Random({5}, 4);
  auto bad_bias = MakeNode("FusedMatMul", {a, b, bias5}, 1, {}, "ai.mixtrain");
  EXPECT_FALSE(RunCpuKernel(*bad_bias.node, {a, b, bias5}).ok());
}

// Plain MatMul and Gemm with constant weights (prepacked on the first run) match the variable-B
// result, run after run.
TEST(FusedMatMulKernel, PrepackedWeightsOfMatMulAndGemm) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor a = ToType(Random({3, 10, 24}, 20), dt), b = ToType(Random({24, 40}, 21), dt);
    auto mm = MakeNode("MatMul", {a, b}, 1);
    auto plain = RunKernel(*mm.node, {a, b}, {3, 10, 40}, {false, false}, 1);
    auto packed = RunKernel(*mm.node, {a, b}, {3, 10, 40}, {false, true}, 3);
    ASSERT_TRUE(plain.ok() && packed.ok());
    ExpectNear(*packed, ToF32(*plain), 1e-6f);

    Tensor a2 = ToType(Random({10, 24}, 22), dt), bt = ToType(Random({40, 24}, 23), dt);
    Tensor c = ToType(Random({40}, 24), dt);
    auto gemm = MakeNode("Gemm", {a2, bt, c}, 1, {Attribute::Int("transB", 1), Attribute::Float("alpha", 0.5f)});
    auto gplain = RunKernel(*gemm.node, {a2, bt, c}, {10, 40}, {false, false, false}, 1);
    auto gpacked = RunKernel(*gemm.node, {a2, bt, c}, {10, 40}, {false, true, false}, 3);
    ASSERT_TRUE(gplain.ok() && gpacked.ok());
    ExpectNear(*gpacked, ToF32(*gplain), 1e-6f);
  }
}


// `to` = f32 on bf16/fp16 operands (the training step's weight gradients,
// passes/fp32_grad_products.cc): Y is the fp32 sum of the low-precision products, here A^T B
// with A stored [K, M] as a weight gradient reads it. Against the sum in double of the same
// rounded inputs its error is fp32 accumulation's (1e-5 relative to sum |a b|); the same product
// written in the low type is off by its rounding, more than 30x that.
TEST(FusedMatMulKernel, WideOutputFromLowPrecisionOperands) {
  constexpr int64_t kK = 300, kM = 24, kN = 40;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor a = ToType(Random({kK, kM}, 11), dt), b = ToType(Random({kK, kN}, 12), dt);
    Tensor af = ToF32(a), bf = ToF32(b);
    auto run = [&](bool wide) {
      std::vector<Attribute> attrs = {Attribute::Ints("perm_a", {1, 0})};
      if (wide) attrs.push_back(Attribute::Int("to", 1));
      auto node = MakeNode("FusedMatMul", {a, b}, 1, attrs, "ai.mixtrain");
      auto out = RunCpuKernel(*node.node, {a, b}, 20);
      EXPECT_TRUE(out.ok()) << out.status();
      return out.ok() ? (*out)[0] : Tensor();
    };
    Tensor wide = run(true), low = run(false);
    ASSERT_EQ(wide.dtype(), DType::kF32);
    ASSERT_EQ(low.dtype(), dt);
    ASSERT_EQ(wide.dims(), (std::vector<int64_t>{kM, kN}));
    double err_wide = 0, err_low = 0;
    for (int64_t m = 0; m < kM; ++m) {
      for (int64_t n = 0; n < kN; ++n) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < kK; ++k) {
          const double p = static_cast<double>(af.data_as<float>()[k * kM + m]) * bf.data_as<float>()[k * kN + n];
          sum += p;
          mag += std::fabs(p);
        }
        err_wide = std::max(err_wide, std::fabs(wide.GetDouble(m * kN + n) - sum) / mag);
        err_low = std::max(err_low, std::fabs(low.GetDouble(m * kN + n) - sum) / mag);
      }
    }
    EXPECT_LT(err_wide, 1e-5);
    EXPECT_GT(err_low, 30 * err_wide);
  }
}

// `to` with a bias or Z is refused by the shape rule, and a Y wider than A only for low A.
TEST(FusedMatMulKernel, WideOutputRules) {
  Tensor a = ToType(Random({4, 5}, 1), DType::kBF16), b = ToType(Random({5, 3}, 2), DType::kBF16);
  Tensor bias = ToType(Random({3}, 3), DType::kBF16);
  auto with_bias = MakeNode("FusedMatMul", {a, b, bias}, 1, {Attribute::Int("to", 1)}, "ai.mixtrain");
  EXPECT_FALSE(RunCpuKernel(*with_bias.node, {a, b, bias}, 20).ok());
  auto bad_to = MakeNode("FusedMatMul", {a, b}, 1, {Attribute::Int("to", 7)}, "ai.mixtrain");  // int64
  EXPECT_FALSE(RunCpuKernel(*bad_to.node, {a, b}, 20).ok());
}

}  // namespace
}  // namespace mixtrain
