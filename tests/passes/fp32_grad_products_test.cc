// The fp32_grad_products pass on an AMP (bf16) MLP, differentiated as the training step is: the
// weight gradients' Gemm + Cast pairs become FusedMatMuls that write fp32 (a conv's ConvGrad its
// dW and dB, a LayerNorm's gradient its dScale and dBias, a bias's ReduceSum becomes
// ai.mixtrain ReduceSum), and their values are
// the products the Casts rounded (within bf16's rounding of each other, not all equal); products
// with an epilogue operand, or whose low result something else reads, stay as they are.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/passes/cpu_passes.h"
#include "gtest/gtest.h"
#include "graph/half.h"
#include "graph/onnx_export.h"
#include "graph/verifier.h"
#include "passes/passes.h"
#include "passes/precision.h"
#include "passes/training.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using inference_test::Count;

// x [8, 16] -> MatMul w1 -> Relu -> MatMul w2 [32, 5] (or a Conv w1 [4, 3, 3, 3] + b1 -> Relu on
// x [2, 3, 8, 8], or MatMul w1 -> LayerNorm -> MatMul w2) -> weighted-sum loss, in bf16 AMP, then autodiff and fuse_matmul
// (training variant); `widen` runs the pass after them.
enum class Net { kMlp, kConv, kLayerNorm, kBias };

std::unique_ptr<Graph> Step(bool widen, Net net = Net::kMlp) {
  G b;
  Graph& g = b.graph();
  Value* y;
  if (net == Net::kBias) {  // x [2, 8, 16] -> MatMul w1 + b1 -> MatMul w2: b1's gradient sums over 2 x 8
    Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 8, 16}));
    g.AddInput(x);
    Value* h = b.Op1("Add", {b.Op1("MatMul", {x, b.Param("w1", {16, 32}, 1)}), b.Param("b1", {32}, 2)});
    y = b.Op1("MatMul", {h, b.Param("w2", {32, 5}, 3)});
  } else if (net == Net::kLayerNorm) {  // x [8, 16] -> MatMul w1 -> LayerNorm(s1, b1)
    Value* x = g.AddValue("x", DType::kF32, Shape::Of({8, 16}));
    g.AddInput(x);
    Value* h = b.Op1("MatMul", {x, b.Param("w1", {16, 32}, 1)});
    Value* n = b.Op1("LayerNormalization", {h, b.Param("s1", {32}, 2), b.Param("b1", {32}, 3)},
                     {Attribute::Int("axis", -1)});
    y = b.Op1("MatMul", {n, b.Param("w2", {32, 5}, 4)});  // so the policy runs the norm in bf16
  } else if (net == Net::kConv) {
    Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3, 8, 8}));
    g.AddInput(x);
    y = b.Op1("Relu", {b.Op1("Conv", {x, b.Param("w1", {4, 3, 3, 3}, 1), b.Param("b1", {4}, 2)},
                             {Attribute::Ints("pads", {1, 1, 1, 1})})});
  } else {
    Value* x = g.AddValue("x", DType::kF32, Shape::Of({8, 16}));
    g.AddInput(x);
    Value* h = b.Op1("Relu", {b.Op1("MatMul", {x, b.Param("w1", {16, 32}, 1)})});
    y = b.Op1("MatMul", {h, b.Param("w2", {32, 5}, 2)});
  }
  gradcheck::AppendWeightedSumLoss(b, {y});
  std::unique_ptr<Graph> out = g.Clone();
  PassManager pm;
  pm.Add(MakePrecisionPass(PrecisionPolicy::Default(PrecisionPreset::kAmp, DType::kBF16)));
  AutodiffOptions ad;
  ad.freeze = "c_.*";
  pm.Add(MakeAutodiffPass(ad));
  pm.Add(MakeFuseMatMulTrainingPass());
  if (widen) pm.Add(MakeFp32GradProductsPass());
  pm.Add(MakeCleanupPass());
  absl::Status st = pm.Run(*out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// The gradients of `params` in `base` (without the pass) and `wide` (with it): within bf16's
// rounding of each other, and most of them different (fp32 sums are rarely bf16 numbers).
void ExpectRoundingApart(const Graph& base, const Graph& wide, const std::vector<std::string>& params) {
  auto feeds = inference_test::Feeds(base, 8);
  std::vector<Tensor> a = inference_test::RunGraph(base, feeds), w = inference_test::RunGraph(wide, feeds);
  ASSERT_EQ(a.size(), w.size());
  int64_t differ = 0, total = 0;
  for (size_t o = 0; o < a.size(); ++o) {
    const std::string& name = base.outputs()[o]->name;
    if (std::find(params.begin(), params.end(), name) == params.end()) {
      inference_test::ExpectClose({w[o]}, {a[o]}, 0);  // the loss and other outputs are unchanged
      continue;
    }
    for (int64_t i = 0; i < a[o].numel(); ++i) {
      const double rounded = a[o].GetDouble(i), exact = w[o].GetDouble(i);
      EXPECT_NEAR(rounded, exact, std::ldexp(std::fabs(exact), -8) + 1e-30) << name << " " << i;
      differ += rounded != exact;
      ++total;
    }
  }
  EXPECT_GT(differ, total / 2);
}

TEST(Fp32GradProducts, ConvWeightAndBiasGradientsComeOutFp32) {
  std::unique_ptr<Graph> base = Step(false, Net::kConv), wide = Step(true, Net::kConv);
  ASSERT_TRUE(Verify(*wide).ok()) << Verify(*wide);
  EXPECT_EQ(Count(*wide, "Cast"), Count(*base, "Cast") - 2);
  const Node* cg = inference_test::Find(*wide, "ConvGrad");
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(cg->attr_int("params_to", 0), 1);
  EXPECT_EQ(cg->output(1)->dtype, DType::kF32);
  EXPECT_EQ(cg->output(2)->dtype, DType::kF32);
  ExpectRoundingApart(*base, *wide, {"grad/w1", "grad/b1"});
}

TEST(Fp32GradProducts, LayerNormScaleAndBiasGradientsComeOutFp32) {
  std::unique_ptr<Graph> base = Step(false, Net::kLayerNorm), wide = Step(true, Net::kLayerNorm);
  ASSERT_TRUE(Verify(*wide).ok()) << Verify(*wide);
  EXPECT_EQ(Count(*wide, "Cast"), Count(*base, "Cast") - 4);  // w1's, w2's, s1's and b1's
  const Node* ln = inference_test::Find(*wide, "LayerNormalizationGrad");
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->attr_int("params_to", 0), 1);
  EXPECT_EQ(ln->input(1)->dtype, DType::kBF16);
  EXPECT_EQ(ln->output(1)->dtype, DType::kF32);
  EXPECT_EQ(ln->output(2)->dtype, DType::kF32);
  ExpectRoundingApart(*base, *wide, {"grad/w1", "grad/w2", "grad/s1", "grad/b1"});
}

TEST(Fp32GradProducts, BiasGradientsComeOutFp32) {
  std::unique_ptr<Graph> base = Step(false, Net::kBias), wide = Step(true, Net::kBias);
  ASSERT_TRUE(Verify(*wide).ok()) << Verify(*wide);
  EXPECT_EQ(Count(*wide, "Cast"), Count(*base, "Cast") - 3);  // w1's, w2's and b1's
  int wide_sums = 0;  // the loss's own ReduceSums stay ONNX's, in fp32
  for (const auto& n : wide->nodes())
    if (n->op_type() == "ReduceSum" && n->domain() == kMixtrainDomain) {
      ++wide_sums;
      EXPECT_EQ(n->input(0)->dtype, DType::kBF16);
      EXPECT_EQ(n->attr_int("to", 0), 1);
    }
  EXPECT_EQ(wide_sums, 1);
  EXPECT_EQ(wide->FindValue("grad/b1")->dtype, DType::kF32);
  ExpectRoundingApart(*base, *wide, {"grad/w1", "grad/w2", "grad/b1"});
}

// ai.mixtrain ReduceSum's kernel: bf16 summed into fp32 as the double sum rounded once.
TEST(Fp32GradProducts, WideReduceSumKernel) {
  Tensor x(DType::kBF16, {3, 70, 5});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data_as<uint16_t>()[i] = FloatToBFloat16(0.37f * static_cast<float>((i * 7919) % 101) - 17.0f);
  for (bool keepdims : {false, true}) {
    auto n = testing_util::MakeNode("ReduceSum", {x, Tensor::FromVector<int64_t>(DType::kI64, {2}, {0, 1})}, 1,
                                    {Attribute::Int("to", 1), Attribute::Int("keepdims", keepdims)}, "ai.mixtrain");
    auto out = testing_util::RunCpuKernel(*n.node, {x, Tensor::FromVector<int64_t>(DType::kI64, {2}, {0, 1})});
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& y = (*out)[0];
    ASSERT_EQ(y.dtype(), DType::kF32);
    ASSERT_EQ(y.numel(), 5);
    for (int64_t c = 0; c < 5; ++c) {
      double want = 0;
      for (int64_t i = c; i < x.numel(); i += 5) want += x.GetDouble(i);
      EXPECT_EQ(y.GetDouble(c), static_cast<double>(static_cast<float>(want))) << c;
    }
  }
}

TEST(Fp32GradProducts, WeightGradientsComeOutFp32) {
  std::unique_ptr<Graph> base = Step(false), wide = Step(true);
  ASSERT_TRUE(Verify(*wide).ok()) << Verify(*wide);
  EXPECT_EQ(Count(*wide, "Cast"), Count(*base, "Cast") - 2);
  for (const char* p : {"grad/w1", "grad/w2"}) {
    const Value* v = wide->FindValue(p);
    ASSERT_NE(v, nullptr) << p;
    ASSERT_NE(v->producer, nullptr) << p;
    // The gradient is the product's own output (an Identity may name it).
    const Node* n = v->producer->op_type() == "Identity" ? v->producer->input(0)->producer : v->producer;
    ASSERT_NE(n, nullptr) << p;
    EXPECT_EQ(n->op_type(), "FusedMatMul") << p;
    EXPECT_EQ(n->attr_int("to", 0), 1) << p;
    EXPECT_EQ(n->input(0)->dtype, DType::kBF16) << p;
    EXPECT_EQ(v->dtype, DType::kF32) << p;
  }
  ExpectRoundingApart(*base, *wide, {"grad/w1", "grad/w2"});
}

// Cast(ReduceSum(x)) with no view between (what the dump fuzzer found: the old sum's value dies
// with the Cast, and was written to after).
TEST(Fp32GradProducts, ReduceSumReadByTheCastAlone) {
  G b;
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kBF16, Shape::Of({4, 6}));
  g.AddInput(x);
  Value* s = b.Op1("ReduceSum", {x, b.Ints({0})}, {Attribute::Int("keepdims", 0)});
  Value* y = b.Op1("Cast", {s}, {Attribute::Int("to", 1)});
  g.AddOutput(y);
  ASSERT_TRUE(InferShapes(g).ok());
  std::unique_ptr<Graph> before = g.Clone();
  auto changed = MakeFp32GradProductsPass()->Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(Verify(g).ok()) << Verify(g);
  EXPECT_EQ(Count(g, "Cast"), 0);
  ASSERT_EQ(g.outputs()[0]->producer->domain(), kMixtrainDomain);
  auto feeds = inference_test::Feeds(*before, 1);
  std::vector<Tensor> wide = inference_test::RunGraph(g, feeds), low = inference_test::RunGraph(*before, feeds);
  ASSERT_EQ(wide.size(), 1u);
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_NEAR(wide[0].GetDouble(i), low[0].GetDouble(i), std::ldexp(std::fabs(wide[0].GetDouble(i)), -8));
}

// A product with a bias, or whose bf16 result is also read elsewhere, keeps its Cast.
TEST(Fp32GradProducts, LeavesProductsItCannotWiden) {
  for (int variant = 0; variant < 2; ++variant) {
    G b;
    Graph& g = b.graph();
    Value* x = g.AddValue("x", DType::kBF16, Shape::Of({4, 6}));
    g.AddInput(x);
    Value* w = g.AddValue("w", DType::kBF16, Shape::Of({6, 3}));
    g.AddInput(w);
    std::vector<Value*> ins = {x, w};
    if (variant == 0) {
      Value* bias = g.AddValue("bias", DType::kBF16, Shape::Of({3}));
      g.AddInput(bias);
      ins.push_back(bias);
    }
    Value* p = b.Op1("Gemm", ins);
    Value* wide = b.Op1("Cast", {p}, {Attribute::Int("to", 1)});
    g.AddOutput(wide);
    if (variant == 1) g.AddOutput(p);
    ASSERT_TRUE(InferShapes(g).ok());
    auto pass = MakeFp32GradProductsPass();
    auto changed = pass->Run(g);
    ASSERT_TRUE(changed.ok());
    EXPECT_FALSE(*changed) << "variant " << variant;
    EXPECT_EQ(Count(g, "Cast"), 1);
  }
}

}  // namespace
}  // namespace mixtrain
