// The fuse_backward pass: Relu's gradient folded into the MaxPoolGrad that reads the Relu's
// output. The fused graph must compute bit-identical gradients (it selects the same values, no
// arithmetic changes), and must leave the chain alone where the pattern does not hold exactly.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "graph/verifier.h"
#include "passes/pass_registry.h"
#include "passes/passes.h"
#include "passes/training.h"
#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using A = Attribute;

using gradcheck::CountOps;

// x -> Conv -> Relu -> [extra] -> MaxPool 2x2 (or 3x3/2 overlapping) -> weighted-sum loss, with
// autodiff run. `also_use_relu` adds a second consumer of the Relu's output.
void Build(G& b, bool overlapping, bool also_use_relu) {
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3, 9, 9}));
  g.AddInput(x);
  Value* c = b.Op1("Conv", {x, b.Param("cw", {4, 3, 3, 3}, 1), b.Param("cb", {4}, 2)},
                   {A::Ints("pads", {1, 1, 1, 1})});
  Value* z = b.Op1("Relu", {c});
  std::vector<A> pool = overlapping
                            ? std::vector<A>{A::Ints("kernel_shape", {3, 3}), A::Ints("strides", {2, 2})}
                            : std::vector<A>{A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})};
  std::vector<Value*> outs = {b.Op1("MaxPool", {z}, pool)};
  if (also_use_relu) outs.push_back(b.Op1("Sigmoid", {z}));
  gradcheck::AppendWeightedSumLoss(b, outs);
  AutodiffOptions opt;
  opt.freeze = "c_.*";
  auto st = MakeAutodiffPass(opt)->Run(g);
  ASSERT_TRUE(st.ok()) << st.status().message();
}

std::vector<Tensor> Grads(const Graph& g, const Tensor& x) {
  auto s = Session::Create(g);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return {};
  auto r = (*s)->Run({{"x", x}}, {"grad/cw", "grad/cb"});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<Tensor>{};
}

// Runs `pass` on g, which must change it and leave a valid graph.
void RunAndExpectChange(std::unique_ptr<Pass> pass, Graph& g) {
  auto changed = pass->Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).message();
}

// Inputs with many exact zeros after the Relu and ties inside windows.
Tensor Input() {
  Tensor x(DType::kF32, {2, 3, 9, 9});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>((i * 37) % 7) - 3.0f;
  return x;
}

TEST(FuseBackwardPass, ReluGradFoldsIntoMaxPoolGradWithIdenticalGradients) {
  for (bool overlapping : {false, true}) {
    SCOPED_TRACE(overlapping ? "3x3/2 windows" : "2x2/2 windows");
    G b;
    Build(b, overlapping, false);
    Graph& g = b.graph();
    ASSERT_EQ(CountOps(g, "ReluGrad"), 1);
    const std::vector<Tensor> before = Grads(g, Input());
    ASSERT_NO_FATAL_FAILURE(RunAndExpectChange(MakeFuseBackwardPass(), g));
    EXPECT_EQ(CountOps(g, "ReluGrad"), 0);
    for (const auto& n : g.nodes())
      if (n->op_type() == "MaxPoolGrad") EXPECT_EQ(n->attr_int("relu", 0), 1);
    const std::vector<Tensor> after = Grads(g, Input());
    ASSERT_EQ(before.size(), 2u);
    ASSERT_EQ(after.size(), 2u);
    for (size_t k = 0; k < 2; ++k)
      for (int64_t i = 0; i < before[k].numel(); ++i)
        ASSERT_EQ(after[k].data_as<float>()[i], before[k].data_as<float>()[i]) << k << "[" << i << "]";
    // Nothing left to fuse.
    auto again = MakeFuseBackwardPass()->Run(g);
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(*again);
  }
}

// The Relu's output also feeds a Sigmoid: its gradient is the sum of two contributions, so the
// ReluGrad reads an Add, not the MaxPoolGrad, and stays.
TEST(FuseBackwardPass, LeavesAReluWithOtherConsumersAlone) {
  G b;
  Build(b, false, true);
  Graph& g = b.graph();
  auto changed = MakeFuseBackwardPass()->Run(g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(g, "ReluGrad"), 1);
}

// fuse_conv_epilogue on the differentiated graph: the Conv and its Relu become one FusedConv
// writing the Relu's output (which the backward reads); the gradients stay the same (a Relu of
// the fp32 accumulator is exact either way).
TEST(FuseConvEpiloguePass, ConvReluFusesInTheTrainingStep) {
  G b;
  Build(b, false, false);
  Graph& g = b.graph();
  const std::vector<Tensor> before = Grads(g, Input());
  ASSERT_NO_FATAL_FAILURE(RunAndExpectChange(MakeFuseConvEpiloguePass(), g));
  EXPECT_EQ(CountOps(g, "Relu"), 0);
  EXPECT_EQ(CountOps(g, "Conv"), 0);
  ASSERT_EQ(CountOps(g, "FusedConv"), 1);
  for (const auto& n : g.nodes())
    if (n->op_type() == "FusedConv") EXPECT_EQ(n->attr_string("activation", ""), "Relu");
  const std::vector<Tensor> after = Grads(g, Input());
  ASSERT_EQ(before.size(), 2u);
  ASSERT_EQ(after.size(), 2u);
  for (size_t k = 0; k < 2; ++k)
    for (int64_t i = 0; i < before[k].numel(); ++i)
      ASSERT_NEAR(after[k].data_as<float>()[i], before[k].data_as<float>()[i],
                  1e-5 * (1 + std::fabs(before[k].data_as<float>()[i])))
          << k << "[" << i << "]";
}

// A LeakyRelu's gradient reads its input, the conv's output: a second reader, so no fusion
// (the fused node would not produce the value the gradient needs).
TEST(FuseConvEpiloguePass, LeavesAnActivationWhoseGradientReadsTheConvOutput) {
  G b;
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3, 9, 9}));
  g.AddInput(x);
  Value* c = b.Op1("Conv", {x, b.Param("cw", {4, 3, 3, 3}, 1), b.Param("cb", {4}, 2)},
                   {A::Ints("pads", {1, 1, 1, 1})});
  gradcheck::AppendWeightedSumLoss(b, {b.Op1("LeakyRelu", {c}, {A::Float("alpha", 0.1f)})});
  AutodiffOptions opt;
  opt.freeze = "c_.*";
  ASSERT_TRUE(MakeAutodiffPass(opt)->Run(g).ok());
  ASSERT_GT(c->consumers.size(), 1u) << "LeakyRelu's gradient is expected to read its input";
  auto changed = MakeFuseConvEpiloguePass()->Run(g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(g, "FusedConv"), 0);
}

TEST(FuseBackwardPass, RegisteredByName) {
  auto p = CreatePassByName("fuse_backward");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->name(), "fuse_backward");
}

}  // namespace
}  // namespace mixtrain
