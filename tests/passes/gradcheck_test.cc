// Finite-difference checks of the elementwise and movement gradient rules (the NN ops are in
// autodiff_nn_gradcheck_test.cc), broadcasting shapes included. See autodiff_test_util.h for
// why the check runs in fp32 and how its tolerance is chosen.
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain::gradcheck {
namespace {

using A = Attribute;
using Vs = std::vector<Value*>;

// A binary op on a [2,3,4] parameter and a broadcast [3,1] one, both differentiated.
void Binary(const std::string& op, std::vector<float> a, std::vector<float> b) {
  Check([&](G& g) {
    return Vs{g.Op1(op, {g.Param("a", {2, 3, 4}, a), g.Param("b", {3, 1}, b)})};
  });
}

TEST(GradCheck, Add) { Binary("Add", Random(24, 1), Random(3, 2)); }
TEST(GradCheck, Sub) { Binary("Sub", Random(24, 1), Random(3, 2)); }
TEST(GradCheck, Mul) { Binary("Mul", Random(24, 1), Random(3, 2)); }
TEST(GradCheck, Div) { Binary("Div", Random(24, 1), Random(3, 2, 0.5f, 2.0f)); }
TEST(GradCheck, Pow) { Binary("Pow", Random(24, 1, 0.5f, 2.0f), Random(3, 2, 0.5f, 2.5f)); }
// b sits between the 0.05-spaced values of a, so a step of h never swaps which one is larger.
TEST(GradCheck, Max) { Binary("Max", Distinct(24, 1), {-0.975f, -0.525f, -0.125f}); }
TEST(GradCheck, Min) { Binary("Min", Distinct(24, 1), {-0.975f, -0.525f, -0.125f}); }

// The Reshape's target shape is only known at run time, so undoing Add's broadcasting of b
// (and ReduceMean's count) is decided at run time (ai.mixtrain.SumToShape, CountOver).
TEST(GradCheck, BroadcastAfterDynamicReshape) {
  Check([](G& g) {
    Value* shape = g.Op1("Shape", {g.ConstF({3, 2}, Random(6, 9))});
    Value* x = g.Op1("Reshape", {g.Param("x", {6}, 1), shape});
    Value* y = g.Op1("Add", {x, g.Param("b", {1, 2}, 2)});
    Value* m = g.Op1("ReduceMean", {y}, {A::Ints("axes", {0})});
    return Vs{g.Op1("Reshape", {m, g.Ints({1, 2})})};  // static again for the test's loss
  });
}

TEST(GradCheck, SameValueTwice) {  // x * x: fan-out into one node
  Check([](G& g) {
    Value* x = g.Param("x", {5}, 1);
    return Vs{g.Op1("Mul", {x, x})};
  });
}

void Unary(const std::string& op, std::vector<float> x, std::vector<A> attrs = {}, int64_t opset = 17) {
  Check([&](G& g) { return Vs{g.Op1(op, {g.Param("x", {2, 5}, x)}, attrs)}; }, opset);
}

TEST(GradCheck, Sqrt) { Unary("Sqrt", Random(10, 3, 0.5f, 2.0f)); }
TEST(GradCheck, Reciprocal) { Unary("Reciprocal", Random(10, 3, 0.5f, 2.0f)); }
TEST(GradCheck, Neg) { Unary("Neg", Random(10, 3)); }
TEST(GradCheck, Abs) { Unary("Abs", AwayFromZero(10, 3)); }
TEST(GradCheck, Exp) { Unary("Exp", Random(10, 3)); }
TEST(GradCheck, Log) { Unary("Log", Random(10, 3, 0.5f, 2.0f)); }
TEST(GradCheck, Erf) { Unary("Erf", Random(10, 3)); }
TEST(GradCheck, Relu) { Unary("Relu", AwayFromZero(10, 3)); }
TEST(GradCheck, LeakyRelu) { Unary("LeakyRelu", AwayFromZero(10, 3), {A::Float("alpha", 0.2f)}); }
TEST(GradCheck, Sigmoid) { Unary("Sigmoid", Random(10, 3)); }
TEST(GradCheck, Tanh) { Unary("Tanh", Random(10, 3)); }
TEST(GradCheck, Softplus) { Unary("Softplus", Random(10, 3)); }
TEST(GradCheck, Gelu) { Unary("Gelu", Random(10, 3, -2, 2), {}, 20); }
TEST(GradCheck, GeluTanh) { Unary("Gelu", Random(10, 3, -2, 2), {A::String("approximate", "tanh")}, 20); }
TEST(GradCheck, Identity) { Unary("Identity", Random(10, 3)); }

TEST(GradCheck, Clip) {
  Check([](G& g) {
    Value* x = g.Param("x", {2, 5}, Distinct(10, 4));
    return Vs{g.Op1("Clip", {x, g.ConstF({}, {-0.42f}), g.ConstF({}, {0.33f})})};
  });
}

TEST(GradCheck, Where) {
  Check([](G& g) {
    Value* c = g.Bools({2, 1}, {1, 0});
    return Vs{g.Op1("Where", {c, g.Param("a", {2, 3}, 1), g.Param("b", {3}, 2)})};
  });
}

// Round trip through fp16 on values exact in fp16 with a step exact in fp16: the loss is linear,
// so the difference quotient is exact and the gradient must arrive in fp32.
TEST(GradCheck, CastRoundTrip) {
  std::vector<float> x{0.5f, -0.25f, 0.75f, 1.0f};
  Check([&](G& g) {
    Value* h = g.Op1("Cast", {g.Param("x", {4}, x)}, {A::Int("to", ToOnnxType(DType::kF16))});
    return Vs{g.Op1("Cast", {h}, {A::Int("to", ToOnnxType(DType::kF32))})};
  }, 17, 0.25f, 1e-2f);
}

// --- movement -----------------------------------------------------------------------------------

TEST(GradCheck, Reshape) {
  Check([](G& g) { return Vs{g.Op1("Reshape", {g.Param("x", {2, 6}, 1), g.Ints({3, -1})})}; });
}
TEST(GradCheck, Flatten) {
  Check([](G& g) { return Vs{g.Op1("Flatten", {g.Param("x", {2, 3, 2}, 1)}, {A::Int("axis", 2)})}; });
}
TEST(GradCheck, SqueezeUnsqueeze) {
  Check([](G& g) {
    Value* s = g.Op1("Squeeze", {g.Param("x", {2, 1, 3}, 1), g.Ints({1})});
    return Vs{g.Op1("Unsqueeze", {s, g.Ints({0})})};
  });
}
TEST(GradCheck, SqueezeOpset11) {
  Check([](G& g) {
    return Vs{g.Op1("Squeeze", {g.Param("x", {2, 1, 3}, 1)}, {A::Ints("axes", {1})})};
  }, 11);
}
TEST(GradCheck, Transpose) {
  Check([](G& g) {
    return Vs{g.Op1("Transpose", {g.Param("x", {2, 3, 4}, 1)}, {A::Ints("perm", {1, 2, 0})})};
  });
}
TEST(GradCheck, Concat) {
  Check([](G& g) {
    return Vs{g.Op1("Concat", {g.Param("a", {2, 1}, 1), g.Param("b", {2, 3}, 2)}, {A::Int("axis", -1)})};
  });
}
// Past 32 inputs (an unrolled 33-step sequence, a DenseNet-style concat): the inputs after the
// 32nd once carried no gradient, silently, because the differentiable-input mask had 32 bits.
TEST(GradCheck, ConcatAndSumOfFortyInputs) {
  Check([](G& g) {
    Vs parts, terms;
    for (int i = 0; i < 40; ++i) {
      parts.push_back(g.Param("p" + std::to_string(i), {1, 2}, 100 + i));
      terms.push_back(g.Param("t" + std::to_string(i), {2}, 200 + i));
    }
    return Vs{g.Op1("Concat", parts, {A::Int("axis", 0)}), g.Op1("Sum", terms)};
  });
}
TEST(GradCheck, SplitOneOutputUnused) {
  Check([](G& g) {
    Vs parts = g.Op("Split", {g.Param("x", {2, 6}, 1), g.Ints({1, 2, 3})}, {A::Int("axis", 1)}, 3);
    return Vs{parts[0], parts[2]};
  });
}
TEST(GradCheck, Slice) {
  Check([](G& g) {
    return Vs{g.Op1("Slice", {g.Param("x", {3, 5}, 1), g.Ints({1, -4}), g.Ints({3, 100}), g.Ints({1, 0})})};
  });
}
TEST(GradCheck, Pad) {
  Check([](G& g) {
    return Vs{g.Op1("Pad", {g.Param("x", {2, 3}, 1), g.Ints({0, 1, 2, 0})})};
  });
}
TEST(GradCheck, GatherRepeatedIndices) {
  Check([](G& g) {
    Value* idx = g.IntsShaped({2, 2}, {2, 0, 2, -1});
    return Vs{g.Op1("Gather", {g.Param("x", {4, 3}, 1), idx}, {A::Int("axis", 0)})};
  });
}
TEST(GradCheck, GatherAxis1) {
  Check([](G& g) {
    return Vs{g.Op1("Gather", {g.Param("x", {2, 4}, 1), g.Ints({3, 1})}, {A::Int("axis", 1)})};
  });
}
TEST(GradCheck, Expand) {
  Check([](G& g) { return Vs{g.Op1("Expand", {g.Param("x", {3, 1}, 1), g.Ints({2, 3, 4})})}; });
}
TEST(GradCheck, Tile) {
  Check([](G& g) { return Vs{g.Op1("Tile", {g.Param("x", {2, 3}, 1), g.Ints({2, 2})})}; });
}
TEST(GradCheck, ReduceSumKeepdims) {
  Check([](G& g) {
    return Vs{g.Op1("ReduceSum", {g.Param("x", {2, 3, 4}, 1), g.Ints({1})}, {A::Int("keepdims", 1)})};
  });
}
TEST(GradCheck, ReduceMeanNoKeepdims) {
  Check([](G& g) {
    return Vs{g.Op1("ReduceMean", {g.Param("x", {2, 3, 4}, 1)},
                    {A::Ints("axes", {0, 2}), A::Int("keepdims", 0)})};
  });
}
TEST(GradCheck, ReduceMaxOpset18) {
  Check([](G& g) {
    return Vs{g.Op1("ReduceMax", {g.Param("x", {2, 3, 4}, Distinct(24, 5)), g.Ints({-1})},
                    {A::Int("keepdims", 0)})};
  }, 18);
}
TEST(GradCheck, ReduceSumSquare) {
  Check([](G& g) {
    return Vs{g.Op1("ReduceSumSquare", {g.Param("x", {2, 3}, 1)}, {A::Ints("axes", {1})})};
  });
}
TEST(GradCheck, CumSum) {
  Check([](G& g) { return Vs{g.Op1("CumSum", {g.Param("x", {2, 4}, 1), g.Ints({1})})}; });
}
TEST(GradCheck, CumSumReverseExclusive) {
  Check([](G& g) {
    return Vs{g.Op1("CumSum", {g.Param("x", {2, 4}, 1), g.Ints({0})},
                    {A::Int("reverse", 1), A::Int("exclusive", 1)})};
  });
}

}  // namespace
}  // namespace mixtrain::gradcheck
