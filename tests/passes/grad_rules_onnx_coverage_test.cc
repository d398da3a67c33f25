// Finite-difference checks of the rules in passes/grad_rules_onnx_coverage.cc (and the Clip forms
// of grad_rules_elementwise.cc), each at an opset where its op exists. Inputs stay at least 2h away
// from every kink (Elu/Celu at 0, HardSwish at +-3, HardSigmoid's saturation points, Shrink's
// and ThresholdedRelu's thresholds, ties of Min/Max), as autodiff_test_util.h explains.
#include <gmock/gmock.h>

#include "tests/passes/autodiff_test_util.h"

namespace mixtrain::gradcheck {
namespace {

using A = Attribute;
using Vs = std::vector<Value*>;

void Unary(const std::string& op, std::vector<float> x, std::vector<A> attrs = {}, int64_t opset = 17) {
  Check([&](G& g) { return Vs{g.Op1(op, {g.Param("x", {2, 5}, x)}, attrs)}; }, opset);
}

// --- activations --------------------------------------------------------------------------------

TEST(GradRulesOnnxCoverage, HardSwish) {
  Unary("HardSwish", {-4.5f, -3.5f, -2.5f, -1.0f, -0.2f, 0.3f, 1.2f, 2.4f, 3.3f, 4.8f}, {}, 14);
}
TEST(GradRulesOnnxCoverage, HardSigmoid) {  // linear on (-0.8, 1.2) with these alpha and beta
  Unary("HardSigmoid", {-2.0f, -1.1f, -0.7f, -0.3f, 0.0f, 0.4f, 0.9f, 1.1f, 1.4f, 3.0f},
        {A::Float("alpha", 0.5f), A::Float("beta", 0.4f)}, 6);
}
TEST(GradRulesOnnxCoverage, HardSigmoidDefaults) {  // linear on (-2.5, 2.5)
  Unary("HardSigmoid", {-3.5f, -2.0f, -1.2f, -0.5f, 0.0f, 0.6f, 1.4f, 2.2f, 2.9f, 4.0f});
}
TEST(GradRulesOnnxCoverage, Mish) { Unary("Mish", Random(10, 3, -3, 3), {}, 18); }
TEST(GradRulesOnnxCoverage, Elu) { Unary("Elu", AwayFromZero(10, 3), {A::Float("alpha", 0.7f)}, 6); }
TEST(GradRulesOnnxCoverage, Selu) {
  Unary("Selu", AwayFromZero(10, 3), {A::Float("alpha", 1.5f), A::Float("gamma", 1.2f)});
}
TEST(GradRulesOnnxCoverage, SeluDefaults) { Unary("Selu", AwayFromZero(10, 4)); }
TEST(GradRulesOnnxCoverage, Celu) { Unary("Celu", AwayFromZero(10, 3), {A::Float("alpha", 0.5f)}, 12); }
TEST(GradRulesOnnxCoverage, ThresholdedRelu) {
  Unary("ThresholdedRelu", {-1.0f, -0.3f, 0.1f, 0.3f, 0.45f, 0.55f, 0.7f, 1.0f, 1.5f, 2.0f},
        {A::Float("alpha", 0.5f)}, 10);
}
TEST(GradRulesOnnxCoverage, Shrink) {
  Unary("Shrink", {-1.5f, -0.8f, -0.45f, -0.2f, 0.0f, 0.3f, 0.45f, 0.55f, 0.9f, 2.0f},
        {A::Float("lambd", 0.5f), A::Float("bias", 0.2f)}, 9);
}
TEST(GradRulesOnnxCoverage, Softsign) { Unary("Softsign", AwayFromZero(10, 3), {}, 13); }

// The slope broadcast per channel ([C, 1, 1]) and along the last axis ([W]); both differentiated.
TEST(GradRulesOnnxCoverage, PReluPerChannel) {
  Check([](G& g) {
    return Vs{g.Op1("PRelu", {g.Param("x", {2, 3, 2, 2}, AwayFromZero(24, 1)),
                              g.Param("slope", {3, 1, 1}, Random(3, 2))})};
  }, 9);
}
TEST(GradRulesOnnxCoverage, PReluLastAxis) {
  Check([](G& g) {
    return Vs{g.Op1("PRelu", {g.Param("x", {3, 4}, AwayFromZero(12, 5)),
                              g.Param("slope", {4}, Random(4, 6))})};
  }, 16);
}

// --- Clip: the bound forms ----------------------------------------------------------------------

TEST(GradRulesOnnxCoverage, ClipAttributesOpset6) {
  Unary("Clip", Distinct(10, 4), {A::Float("min", -0.42f), A::Float("max", 0.33f)}, 6);
}
TEST(GradRulesOnnxCoverage, ClipMaxOnly) {
  Check([](G& g) {
    Value* x = g.Param("x", {2, 5}, Distinct(10, 5));
    return Vs{g.Op1("Clip", {x, nullptr, g.ConstF({}, {-0.33f})})};
  }, 13);
}
TEST(GradRulesOnnxCoverage, ClipMinOnly) {
  Check([](G& g) {
    Value* x = g.Param("x", {2, 5}, Distinct(10, 6));
    return Vs{g.Op1("Clip", {x, g.ConstF({}, {-0.63f})})};
  }, 13);
}

// --- trigonometric and hyperbolic ---------------------------------------------------------------

TEST(GradRulesOnnxCoverage, Sin) { Unary("Sin", Random(10, 3, -3, 3)); }
TEST(GradRulesOnnxCoverage, Cos) { Unary("Cos", Random(10, 3, -3, 3)); }
TEST(GradRulesOnnxCoverage, Tan) { Unary("Tan", Random(10, 3, -1, 1)); }
TEST(GradRulesOnnxCoverage, Asin) { Unary("Asin", Random(10, 3, -0.8f, 0.8f)); }
TEST(GradRulesOnnxCoverage, Acos) { Unary("Acos", Random(10, 3, -0.8f, 0.8f)); }
TEST(GradRulesOnnxCoverage, Atan) { Unary("Atan", Random(10, 3, -2, 2)); }
TEST(GradRulesOnnxCoverage, Sinh) { Unary("Sinh", Random(10, 3, -2, 2)); }
TEST(GradRulesOnnxCoverage, Cosh) { Unary("Cosh", Random(10, 3, -2, 2)); }
TEST(GradRulesOnnxCoverage, Asinh) { Unary("Asinh", Random(10, 3, -2, 2)); }
TEST(GradRulesOnnxCoverage, Acosh) { Unary("Acosh", Random(10, 3, 1.2f, 3)); }
TEST(GradRulesOnnxCoverage, Atanh) { Unary("Atanh", Random(10, 3, -0.8f, 0.8f)); }

// Piecewise-constant ops pass no gradient: x * op(x) has derivative op(x) only. Values sit away
// from integers and halves, so a step of h changes no op's output.
TEST(GradRulesOnnxCoverage, PiecewiseConstantOpsHaveZeroGradient) {
  std::vector<float> x{0.2f, 0.7f, 1.3f, 1.8f, -0.4f, -1.6f, 2.2f, -2.7f, 0.9f, -0.1f};
  for (const char* op : {"Sign", "Floor", "Ceil", "Round"}) {
    SCOPED_TRACE(op);
    Check([&](G& g) {
      Value* p = g.Param("x", {2, 5}, x);
      return Vs{g.Op1("Mul", {p, g.Op1(op, {p})})};
    });
  }
}
TEST(GradRulesOnnxCoverage, HardmaxHasZeroGradient) {
  Check([](G& g) {
    Value* p = g.Param("x", {2, 5}, Distinct(10, 7));
    return Vs{g.Op1("Mul", {p, g.Op1("Hardmax", {p}, {A::Int("axis", 1)})})};
  }, 13);
}

// --- variadic and casts -------------------------------------------------------------------------

// Three inputs broadcast against each other: [2, 3], [3] and [2, 1].
Vs ThreeInputs(G& g, const std::string& op, std::vector<float> a, std::vector<float> b,
               std::vector<float> c) {
  return Vs{g.Op1(op, {g.Param("a", {2, 3}, a), g.Param("b", {3}, b), g.Param("c", {2, 1}, c)})};
}
TEST(GradRulesOnnxCoverage, SumThreeInputs) {
  Check([](G& g) { return ThreeInputs(g, "Sum", Random(6, 1), Random(3, 2), Random(2, 3)); });
}
TEST(GradRulesOnnxCoverage, MeanThreeInputs) {
  Check([](G& g) { return ThreeInputs(g, "Mean", Random(6, 1), Random(3, 2), Random(2, 3)); });
}
// a is a 0.1-spaced ramp; b and c sit 1/3 and 2/3 of the way between its values, so no two
// inputs come within 2h of each other.
TEST(GradRulesOnnxCoverage, MaxMinThreeInputs) {
  std::vector<float> a{-0.3f, 0.2f, -0.1f, 0.1f, 0.0f, -0.2f};
  std::vector<float> b{-0.0667f, 0.0333f, 0.1333f}, c{-0.2333f, 0.2667f};
  for (const char* op : {"Max", "Min"}) {
    SCOPED_TRACE(op);
    Check([&](G& g) { return ThreeInputs(g, op, a, b, c); });
  }
}

// Round trip through fp16 (values and step exact in fp16: the quotient is exact).
TEST(GradRulesOnnxCoverage, CastLikeRoundTrip) {
  std::vector<float> x{0.5f, -0.25f, 0.75f, 1.0f};
  Check([&](G& g) {
    Value* like = g.graph().AddInitializer("c_half", Tensor(DType::kF16, {1}));
    Value* h = g.Op1("CastLike", {g.Param("x", {4}, x), like});
    return Vs{g.Op1("Cast", {h}, {A::Int("to", ToOnnxType(DType::kF32))})};
  }, 15, 0.25f, 1e-2f);
}

// --- reductions ---------------------------------------------------------------------------------

// Reduce over axis 1 of a [2, 3, 4] parameter: axes as an attribute before opset 18, as an input
// from 18.
void Reduce(const std::string& op, std::vector<float> x, int64_t opset, bool keepdims) {
  Check([&](G& g) {
    Value* p = g.Param("x", {2, 3, 4}, x);
    A kd = A::Int("keepdims", keepdims ? 1 : 0);
    if (opset >= 18) return Vs{g.Op1(op, {p, g.Ints({1})}, {kd})};
    return Vs{g.Op1(op, {p}, {A::Ints("axes", {1}), kd})};
  }, opset);
}
TEST(GradRulesOnnxCoverage, ReduceMin) { Reduce("ReduceMin", Distinct(24, 1), 17, false); }
TEST(GradRulesOnnxCoverage, ReduceMinAxesInput) { Reduce("ReduceMin", Distinct(24, 2), 18, true); }
TEST(GradRulesOnnxCoverage, ReduceL1) { Reduce("ReduceL1", AwayFromZero(24, 1), 13, true); }
TEST(GradRulesOnnxCoverage, ReduceL2) { Reduce("ReduceL2", Random(24, 1), 17, false); }
TEST(GradRulesOnnxCoverage, ReduceL2AxesInput) { Reduce("ReduceL2", Random(24, 2), 18, false); }
TEST(GradRulesOnnxCoverage, ReduceLogSumExp) { Reduce("ReduceLogSumExp", Random(24, 1, -2, 2), 13, false); }
TEST(GradRulesOnnxCoverage, ReduceLogSumExpAxesInput) {
  Reduce("ReduceLogSumExp", Random(24, 1, -2, 2), 18, true);
}
TEST(GradRulesOnnxCoverage, ReduceLogSum) { Reduce("ReduceLogSum", Random(24, 1, 0.5f, 2), 13, true); }
TEST(GradRulesOnnxCoverage, ReduceProd) { Reduce("ReduceProd", Random(24, 1, 0.5f, 1.5f), 13, false); }
TEST(GradRulesOnnxCoverage, ReduceProdAxesInput) {
  Reduce("ReduceProd", Random(24, 3, -1.5f, -0.5f), 18, true);
}
TEST(GradRulesOnnxCoverage, ReduceLogSumExpAllAxes) {
  Check([](G& g) {
    return Vs{g.Op1("ReduceLogSumExp", {g.Param("x", {2, 3}, 1)}, {A::Int("keepdims", 0)})};
  }, 18);
}

// --- triangles and contractions -----------------------------------------------------------------

TEST(GradRulesOnnxCoverage, TriluUpperWithK) {
  Check([](G& g) {
    Value* k = g.graph().AddInitializer("c_k", Tensor::ScalarI64(1));
    return Vs{g.Op1("Trilu", {g.Param("x", {2, 3, 4}, 1), k})};
  }, 14);
}
TEST(GradRulesOnnxCoverage, TriluLower) {
  Check([](G& g) {
    return Vs{g.Op1("Trilu", {g.Param("x", {3, 4}, 1)}, {A::Int("upper", 0)})};
  }, 14);
}

// Einsum over parameters of the given shapes, every one differentiated.
void Einsum(const std::string& equation, const std::vector<std::vector<int64_t>>& shapes) {
  Check([&](G& g) {
    Vs ins;
    for (size_t i = 0; i < shapes.size(); ++i)
      ins.push_back(g.Param("x" + std::to_string(i), shapes[i], static_cast<uint32_t>(i + 1)));
    return Vs{g.Op1("Einsum", ins, {A::String("equation", equation)})};
  }, 12);
}
TEST(GradRulesOnnxCoverage, EinsumMatMul) { Einsum("ij,jk->ik", {{2, 3}, {3, 4}}); }
TEST(GradRulesOnnxCoverage, EinsumBatchedTransposedOutput) { Einsum("bij,bkj->bki", {{2, 3, 4}, {2, 2, 4}}); }
TEST(GradRulesOnnxCoverage, EinsumImplicitOutput) { Einsum("ij,jk", {{2, 3}, {3, 4}}); }
TEST(GradRulesOnnxCoverage, EinsumOuter) { Einsum("i,j->ij", {{3}, {2}}); }
TEST(GradRulesOnnxCoverage, EinsumSummedLabel) { Einsum("ijk,j->i", {{2, 3, 2}, {3}}); }
TEST(GradRulesOnnxCoverage, EinsumUnaryTranspose) { Einsum("ijk->kij", {{2, 3, 4}}); }
TEST(GradRulesOnnxCoverage, EinsumUnarySumAll) { Einsum("ij->", {{2, 3}}); }
TEST(GradRulesOnnxCoverage, EinsumThreeOperands) { Einsum("ij,jk,kl->il", {{2, 3}, {3, 2}, {2, 4}}); }
TEST(GradRulesOnnxCoverage, EinsumEllipsis) { Einsum("...ij,jk->...ik", {{2, 2, 3}, {3, 2}}); }
// Ellipsis dims broadcast: [2, 1] against [3] gives [2, 3]; x0's size-1 dim is summed back.
TEST(GradRulesOnnxCoverage, EinsumEllipsisBroadcast) {
  Einsum("...ij,...jk->...ik", {{2, 1, 2, 3}, {3, 3, 2}});
}
// x's dims are known only at run time (the Reshape's shape is computed from float values, which
// shape inference does not track), w's statically.
TEST(GradRulesOnnxCoverage, EinsumRunTimeDims) {
  Check([](G& g) {
    Value* shape = g.Op1("Cast", {g.ConstF({2}, {2, 3})}, {A::Int("to", ToOnnxType(DType::kI64))});
    Value* x = g.Op1("Reshape", {g.Param("x", {6}, 1), shape});
    Value* y = g.Op1("Einsum", {g.Param("w", {3, 4}, 2), x}, {A::String("equation", "jk,ij->ik")});
    return Vs{g.Op1("Reshape", {y, g.Ints({2, 4})})};  // static again for the test's loss
  }, 12);
}
// The diagonal sits in a frozen operand, which the gradient of the other one reads as is.
TEST(GradRulesOnnxCoverage, EinsumDiagonalOfConstantOperand) {
  Check([](G& g) {
    Value* m = g.ConstF({3, 3}, Random(9, 4));
    return Vs{g.Op1("Einsum", {m, g.Param("v", {3}, 2)}, {A::String("equation", "ii,i->i")})};
  }, 12);
}
TEST(GradRulesOnnxCoverage, EinsumDiagonalIsRefused) {
  G b(12);
  Value* y = b.Op1("Einsum", {b.Param("x", {3, 3}, 1)}, {A::String("equation", "ii->i")});
  AppendWeightedSumLoss(b, {y});
  AutodiffOptions opt;
  opt.freeze = "c_.*";
  auto st = MakeAutodiffPass(opt)->Run(b.graph());
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), ::testing::HasSubstr("diagonal"));
}

// --- depth and space ----------------------------------------------------------------------------

TEST(GradRulesOnnxCoverage, DepthToSpaceDCR) {
  Check([](G& g) {
    return Vs{g.Op1("DepthToSpace", {g.Param("x", {1, 8, 2, 3}, 1)}, {A::Int("blocksize", 2)})};
  }, 13);
}
TEST(GradRulesOnnxCoverage, DepthToSpaceCRD) {  // PyTorch's PixelShuffle
  Check([](G& g) {
    return Vs{g.Op1("DepthToSpace", {g.Param("x", {2, 8, 2, 3}, 1)},
                    {A::Int("blocksize", 2), A::String("mode", "CRD")})};
  }, 13);
}
TEST(GradRulesOnnxCoverage, SpaceToDepth) {
  Check([](G& g) {
    return Vs{g.Op1("SpaceToDepth", {g.Param("x", {2, 2, 4, 6}, 1)}, {A::Int("blocksize", 2)})};
  }, 13);
}

// --- gather and scatter -------------------------------------------------------------------------

TEST(GradRulesOnnxCoverage, GatherNDRepeatedTuples) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({3, 2}, {0, 1, 2, -1, 0, 1});
    return Vs{g.Op1("GatherND", {g.Param("x", {3, 4, 2}, 1), idx})};
  }, 13);
}
TEST(GradRulesOnnxCoverage, GatherNDSlices) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({2, 2, 1}, {2, 0, 2, 1});
    return Vs{g.Op1("GatherND", {g.Param("x", {3, 4}, 1), idx})};
  }, 16);
}
// batch_dims = 1: per batch, tuples of one index into dim 1 (repeated in batch 0).
TEST(GradRulesOnnxCoverage, GatherNDBatchDims1) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({2, 3, 1}, {2, 0, 2, -1, 1, 0});
    return Vs{g.Op1("GatherND", {g.Param("x", {2, 3, 4}, 1), idx}, {A::Int("batch_dims", 1)})};
  }, 12);
}
// batch_dims = 2 with whole rows as tuples of two (a batch of [2, 3], slices of one element).
TEST(GradRulesOnnxCoverage, GatherNDBatchDims2) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({2, 3, 2, 1}, {0, 3, 1, 1, 2, 2, 3, 0, 1, 2, 0, 0});
    return Vs{g.Op1("GatherND", {g.Param("x", {2, 3, 4}, 1), idx}, {A::Int("batch_dims", 2)})};
  }, 13);
}
TEST(GradRulesOnnxCoverage, GatherElementsRepeated) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({3, 2}, {0, 3, 1, 1, -1, 2});
    return Vs{g.Op1("GatherElements", {g.Param("x", {3, 4}, 1), idx}, {A::Int("axis", 1)})};
  }, 13);
}
TEST(GradRulesOnnxCoverage, ScatterND) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({2, 1}, {3, 1});
    return Vs{g.Op1("ScatterND", {g.Param("data", {4, 3}, 1), idx, g.Param("upd", {2, 3}, 2)})};
  }, 13);
}
TEST(GradRulesOnnxCoverage, ScatterNDAddRepeated) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({3, 2}, {1, 2, 0, 0, 1, 2});
    return Vs{g.Op1("ScatterND", {g.Param("data", {2, 3}, 1), idx, g.Param("upd", {3}, 2)},
                    {A::String("reduction", "add")})};
  }, 16);
}
TEST(GradRulesOnnxCoverage, ScatterElements) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({2, 3}, {2, 0, 1, 1, 2, 0});
    return Vs{g.Op1("ScatterElements", {g.Param("data", {3, 3}, 1), idx, g.Param("upd", {2, 3}, 2)},
                    {A::Int("axis", 0)})};
  }, 13);
}
TEST(GradRulesOnnxCoverage, ScatterElementsAddRepeated) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({2, 2}, {1, 1, 0, 3});
    return Vs{g.Op1("ScatterElements", {g.Param("data", {2, 4}, 1), idx, g.Param("upd", {2, 2}, 2)},
                    {A::Int("axis", 1), A::String("reduction", "add")})};
  }, 16);
}
TEST(GradRulesOnnxCoverage, ScatterOpset9) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({1, 3}, {3, 0, 2});
    return Vs{g.Op1("Scatter", {g.Param("data", {2, 4}, 1), idx, g.Param("upd", {1, 3}, 2)},
                    {A::Int("axis", 1)})};
  }, 9);
}

TEST(GradRulesOnnxCoverage, TopK) {  // distinct values, so the selection does not move under h
  Check([](G& g) {
    Value* x = g.Param("x", {3, 5}, Distinct(15, 4));
    Node* n = g.graph().AddNode("TopK", {x, g.Ints({2})}, 2, "topk");
    n->SetAttr(A::Int("axis", 1));
    return Vs{n->output(0)};
  }, 11);
}
TEST(GradRulesOnnxCoverage, GlobalMaxPool) {
  Check([](G& g) { return Vs{g.Op1("GlobalMaxPool", {g.Param("x", {2, 3, 2, 3}, Distinct(36, 5))})}; }, 13);
}
TEST(GradRulesOnnxCoverage, LpNormalizationL2) {
  Check([](G& g) { return Vs{g.Op1("LpNormalization", {g.Param("x", {3, 4}, 6)}, {A::Int("axis", 1)})}; }, 13);
}
TEST(GradRulesOnnxCoverage, LpNormalizationL1) {
  Check([](G& g) {
    return Vs{g.Op1("LpNormalization", {g.Param("x", {4, 3}, AwayFromZero(12, 7))},
                    {A::Int("axis", 0), A::Int("p", 1)})};
  }, 13);
}

}  // namespace
}  // namespace mixtrain::gradcheck
