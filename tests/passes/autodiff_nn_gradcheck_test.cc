// Finite-difference checks of the NN gradient rules and the ai.mixtrain backward kernels they emit:
// MatMul/Gemm (1-D, batched, broadcast, transposed), Conv/ConvTranspose (1-D/2-D, strides, pads,
// dilations, groups, bias), pooling, normalization, softmax and the losses.
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain::gradcheck {
namespace {

using A = Attribute;
using Vs = std::vector<Value*>;

TEST(NnGradCheck, MatMul2D) {
  Check([](G& g) { return Vs{g.Op1("MatMul", {g.Param("a", {3, 4}, 1), g.Param("b", {4, 2}, 2)})}; });
}
TEST(NnGradCheck, MatMulBatchBroadcast) {
  Check([](G& g) {
    return Vs{g.Op1("MatMul", {g.Param("a", {2, 1, 3, 4}, 1), g.Param("b", {3, 4, 2}, 2)})};
  });
}
TEST(NnGradCheck, MatMulVectorLeft) {
  Check([](G& g) { return Vs{g.Op1("MatMul", {g.Param("a", {4}, 1), g.Param("b", {2, 4, 3}, 2)})}; });
}
TEST(NnGradCheck, MatMulVectorRight) {
  Check([](G& g) { return Vs{g.Op1("MatMul", {g.Param("a", {2, 3, 4}, 1), g.Param("b", {4}, 2)})}; });
}

void Gemm(int64_t ta, int64_t tb, std::vector<int64_t> c_dims) {
  Check([&](G& g) {
    Value* a = g.Param("a", ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4}, 1);
    Value* b = g.Param("b", tb ? std::vector<int64_t>{2, 4} : std::vector<int64_t>{4, 2}, 2);
    Value* c = g.Param("c", c_dims, 3);
    return Vs{g.Op1("Gemm", {a, b, c},
                    {A::Int("transA", ta), A::Int("transB", tb), A::Float("alpha", 0.7f),
                     A::Float("beta", 1.3f)})};
  });
}
TEST(NnGradCheck, Gemm) { Gemm(0, 0, {3, 2}); }
TEST(NnGradCheck, GemmTransABroadcastC) { Gemm(1, 0, {2}); }
TEST(NnGradCheck, GemmTransBScalarC) { Gemm(0, 1, {1}); }
TEST(NnGradCheck, GemmTransAB) { Gemm(1, 1, {3, 1}); }

TEST(NnGradCheck, Conv2DPadsStridesBias) {
  Check([](G& g) {
    return Vs{g.Op1("Conv", {g.Param("x", {2, 2, 5, 5}, 1), g.Param("w", {3, 2, 3, 3}, 2),
                             g.Param("b", {3}, 3)},
                    {A::Ints("pads", {1, 0, 1, 2}), A::Ints("strides", {2, 1})})};
  });
}
TEST(NnGradCheck, Conv2DGroupsDilation) {
  Check([](G& g) {
    return Vs{g.Op1("Conv", {g.Param("x", {1, 4, 5, 5}, 1), g.Param("w", {2, 2, 2, 2}, 2)},
                    {A::Int("group", 2), A::Ints("dilations", {2, 1})})};
  });
}
TEST(NnGradCheck, Conv1DSamePad) {
  Check([](G& g) {
    return Vs{g.Op1("Conv", {g.Param("x", {2, 2, 7}, 1), g.Param("w", {3, 2, 3}, 2)},
                    {A::String("auto_pad", "SAME_UPPER"), A::Ints("strides", {2})})};
  });
}
TEST(NnGradCheck, DepthwiseConv) {
  Check([](G& g) {
    return Vs{g.Op1("Conv", {g.Param("x", {1, 3, 4, 4}, 1), g.Param("w", {3, 1, 3, 3}, 2)},
                    {A::Int("group", 3), A::Ints("pads", {1, 1, 1, 1})})};
  });
}
TEST(NnGradCheck, ConvTransposeStrideOutputPadding) {
  Check([](G& g) {
    return Vs{g.Op1("ConvTranspose", {g.Param("x", {2, 2, 3, 3}, 1), g.Param("w", {2, 3, 3, 3}, 2),
                                      g.Param("b", {3}, 3)},
                    {A::Ints("strides", {2, 2}), A::Ints("pads", {1, 1, 1, 1}),
                     A::Ints("output_padding", {1, 1})})};
  });
}
TEST(NnGradCheck, ConvTransposeGroups1D) {
  Check([](G& g) {
    return Vs{g.Op1("ConvTranspose", {g.Param("x", {1, 4, 4}, 1), g.Param("w", {4, 1, 3}, 2)},
                    {A::Int("group", 2), A::Ints("strides", {2})})};
  });
}
TEST(NnGradCheck, MaxPool) {
  Check([](G& g) {
    return Vs{g.Op1("MaxPool", {g.Param("x", {1, 2, 5, 5}, Distinct(50, 1))},
                    {A::Ints("kernel_shape", {3, 3}), A::Ints("strides", {2, 2}),
                     A::Ints("pads", {1, 1, 1, 1})})};
  });
}
TEST(NnGradCheck, MaxPoolCeil1D) {
  Check([](G& g) {
    return Vs{g.Op1("MaxPool", {g.Param("x", {1, 2, 6}, Distinct(12, 2))},
                    {A::Ints("kernel_shape", {2}), A::Ints("strides", {2}), A::Int("ceil_mode", 1),
                     A::Ints("pads", {0, 1})})};
  });
}
TEST(NnGradCheck, AveragePoolPads) {
  Check([](G& g) {
    return Vs{g.Op1("AveragePool", {g.Param("x", {1, 2, 4, 4}, 1)},
                    {A::Ints("kernel_shape", {3, 3}), A::Ints("pads", {1, 1, 1, 1})})};
  });
}
TEST(NnGradCheck, AveragePoolCountIncludePad) {
  Check([](G& g) {
    return Vs{g.Op1("AveragePool", {g.Param("x", {1, 1, 5, 5}, 1)},
                    {A::Ints("kernel_shape", {2, 3}), A::Ints("strides", {2, 2}),
                     A::Ints("pads", {1, 1, 1, 1}), A::Int("count_include_pad", 1)})};
  });
}
TEST(NnGradCheck, GlobalAveragePool) {
  Check([](G& g) { return Vs{g.Op1("GlobalAveragePool", {g.Param("x", {2, 3, 2, 3}, 1)})}; });
}

// BatchNormalization in training form (what the train_mode pass makes of an exported eval node).
void BatchNorm(int64_t opset) {
  Check([&](G& g) {
    Value* x = g.Param("x", {3, 2, 2, 2}, 1);
    Value* y = g.Op1("BatchNormalization",
                     {x, g.Param("scale", {2}, 2), g.Param("bias", {2}, 3), g.ConstF({2}, {0.1f, -0.2f}),
                      g.ConstF({2}, {1.5f, 0.7f})},
                     {A::Float("epsilon", 1e-3f)});
    auto st = MakeTrainModePass()->Run(g.graph());
    EXPECT_TRUE(st.ok() && *st);
    return Vs{y};
  }, opset);
}
TEST(NnGradCheck, BatchNormTrainingOpset15) { BatchNorm(15); }
TEST(NnGradCheck, BatchNormTrainingOpset12) { BatchNorm(12); }

TEST(NnGradCheck, BatchNormInference) {
  Check([](G& g) {
    return Vs{g.Op1("BatchNormalization",
                    {g.Param("x", {2, 2, 3}, 1), g.Param("scale", {2}, 2), g.Param("bias", {2}, 3),
                     g.ConstF({2}, {0.1f, -0.2f}), g.ConstF({2}, {1.5f, 0.7f})})};
  });
}
TEST(NnGradCheck, LayerNormalization) {
  Check([](G& g) {
    return Vs{g.Op1("LayerNormalization",
                    {g.Param("x", {2, 3, 4}, 1), g.Param("scale", {3, 4}, 2), g.Param("bias", {3, 4}, 3)},
                    {A::Int("axis", 1)})};
  });
}
TEST(NnGradCheck, Softmax) {
  Check([](G& g) { return Vs{g.Op1("Softmax", {g.Param("x", {2, 3, 4}, 1)}, {A::Int("axis", 1)})}; });
}
// Over the last axis, the rule emits one ai.mixtrain SoftmaxGrad (the axis-1 case above composes).
TEST(NnGradCheck, SoftmaxLastAxisFused) {
  Check([](G& g) { return Vs{g.Op1("Softmax", {g.Param("x", {2, 3, 5}, 1)})}; });
}
// fuse_softmax's op: the mask broadcasts over heads and queries' rows differ; masked entries
// get no gradient, the scale scales the rest.
TEST(NnGradCheck, MaskedSoftmaxBroadcastMaskAndScale) {
  Check([](G& g) {
    Value* mask = g.Bools({1, 3, 4}, {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1});
    return Vs{g.Mixtrain1("MaskedSoftmax", {g.Param("x", {2, 3, 4}, 1), mask},
                          {A::Float("scale", 0.7f), A::Float("fill", -1e4f)})};
  });
}
TEST(NnGradCheck, MaskedSoftmaxRowMask) {  // a mask of one value per row (inner stride 0)
  Check([](G& g) {
    Value* mask = g.Bools({2, 3, 1}, {1, 0, 1, 1, 1, 0});
    return Vs{g.Mixtrain1("MaskedSoftmax", {g.Param("x", {2, 3, 4}, 1), mask},
                          {A::Float("fill", 0.0f)})};
  });
}
TEST(NnGradCheck, MixtrainGelu) {  // fuse_gelu's op below opset 20
  Check([](G& g) { return Vs{g.Mixtrain1("Gelu", {g.Param("x", {3, 4}, 1)})}; });
}
TEST(NnGradCheck, SoftmaxOpset11Coerced) {
  Check([](G& g) { return Vs{g.Op1("Softmax", {g.Param("x", {2, 3, 4}, 1)}, {A::Int("axis", 1)})}; }, 11);
}
TEST(NnGradCheck, LogSoftmax) {
  Check([](G& g) { return Vs{g.Op1("LogSoftmax", {g.Param("x", {3, 5}, 1)})}; });
}
TEST(NnGradCheck, SoftmaxCrossEntropyMean) {
  Check([](G& g) {
    return Vs{g.Op1("SoftmaxCrossEntropyLoss", {g.Param("x", {4, 3}, 1), g.Ints({2, 0, 1, 2})})};
  });
}
TEST(NnGradCheck, SoftmaxCrossEntropySpatialWeightsIgnore) {
  Check([](G& g) {
    Vs outs = g.Op("SoftmaxCrossEntropyLoss",
                   {g.Param("x", {2, 3, 2}, 1), g.IntsShaped({2, 2}, {0, 2, -1, 1}),
                    g.ConstF({3}, {0.5f, 1.0f, 2.0f})},
                   {A::Int("ignore_index", -1)}, 2);
    return outs;  // the loss and log_prob both feed the test loss
  });
}
// N x C rows (the fp32 row kernel): class weights and an ignored row.
TEST(NnGradCheck, SoftmaxCrossEntropyRowsWeightsIgnore) {
  Check([](G& g) {
    return Vs{g.Op1("SoftmaxCrossEntropyLoss",
                    {g.Param("x", {5, 7}, 1), g.Ints({0, 6, -1, 3, 6}),
                     g.ConstF({7}, {0.5f, 1.0f, 2.0f, 1.5f, 0.25f, 3.0f, 1.0f})},
                    {A::Int("ignore_index", -1)})};
  });
}
TEST(NnGradCheck, SoftmaxCrossEntropyNone) {
  Check([](G& g) {
    return Vs{g.Op1("SoftmaxCrossEntropyLoss", {g.Param("x", {3, 4}, 1), g.Ints({3, 0, 1})},
                    {A::String("reduction", "none")})};
  });
}
TEST(NnGradCheck, NegativeLogLikelihoodLoss) {
  Check([](G& g) {
    Value* lp = g.Op1("LogSoftmax", {g.Param("x", {3, 4}, 1)}, {A::Int("axis", 1)});
    return Vs{g.Op1("NegativeLogLikelihoodLoss", {lp, g.Ints({3, 0, 1}), g.ConstF({4}, {1, 2, 3, 4})},
                    {A::String("reduction", "sum")})};
  });
}

}  // namespace
}  // namespace mixtrain::gradcheck
