// Which initializers train (passes/parameters.h): by the position a node reads them in, looked
// up through the views and casts exporters put in between, whatever the exporter named them;
// names only break ties for values in no parameter position. The graphs copy what the three
// exporters write (names, folds, chains) for the layers that broke the name rule.
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/shape_inference.h"
#include "passes/parameter_positions.h"
#include "passes/parameters.h"
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using A = Attribute;
using R = InitializerRole;

std::map<std::string, InitializerClass> Classes(Graph& g) {
  EXPECT_TRUE(InferShapes(g).ok());
  std::map<std::string, InitializerClass> out;
  for (const auto& [v, c] : ClassifyInitializers(g)) out[v->name] = c;
  return out;
}

Value* Input(Graph& g, const std::string& name, std::vector<int64_t> dims) {
  Value* x = g.AddValue(name, DType::kF32, Shape::Of(dims));
  g.AddInput(x);
  return x;
}

std::vector<std::string> Warnings(const Graph& g, TrainableSelection sel = {}) {
  auto w = TrainabilityWarnings(g, sel);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *w : std::vector<std::string>{};
}

bool Mentions(const std::vector<std::string>& lines, const std::string& a, const std::string& b) {
  for (const std::string& l : lines)
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
  return false;
}

// tf2onnx's Keras Conv2D stack: kernels read through ReadVariableOp, but the biases are the
// outputs of a folded Squeeze and a depthwise kernel a folded transpose; a Dense bias added
// after the MatMul under a folded name. All in parameter positions: all train. The BatchNorm
// epsilon (a scalar added to a variance) sits in none and stays tf2onnx's constant.
TEST(Parameters, Tf2OnnxConvBiasesAndDepthwiseKernelsTrain) {
  G b(13);
  Graph& g = b.graph();
  g.producer_name = "tf2onnx";
  Value* x = Input(g, "x", {2, 3, 8, 8});
  Value* y = b.Op1("Conv", {x, b.Param("functional_1/conv1_1/convolution/ReadVariableOp:0", {8, 3, 3, 3}, 1),
                            b.Param("functional_1/conv1_1/Squeeze:0", {8}, 2)});
  y = b.Op1("Conv", {y, b.Param("const_fold_opt__153", {8, 1, 3, 3}, 3), b.Param("functional_1/dw_1/Squeeze:0", {8}, 4)},
            {A::Int("group", 8)});
  Value* var = b.Op1("ReduceMean", {b.Op1("Mul", {y, y})}, {A::Ints("axes", {0, 2, 3})});
  y = b.Op1("Div", {y, b.Op1("Sqrt", {b.Op1("Add", {var, b.Param("const_fold_opt__85", {1}, std::vector<float>{1e-3f})})})});
  y = b.Op1("Reshape", {b.Op1("GlobalAveragePool", {y}), b.Ints({2, 8})});
  y = b.Op1("MatMul", {y, b.Param("functional_1/logits_1/Cast/ReadVariableOp:0", {8, 5}, 5)});
  g.AddOutput(b.Op1("Add", {y, b.Param("const_fold_opt__90", {5}, 6)}));
  auto c = Classes(g);
  for (const char* p : {"functional_1/conv1_1/convolution/ReadVariableOp:0", "functional_1/conv1_1/Squeeze:0",
                        "const_fold_opt__153", "functional_1/dw_1/Squeeze:0", "functional_1/logits_1/Cast/ReadVariableOp:0",
                        "const_fold_opt__90"})
    EXPECT_EQ(c[p].role, R::kParameter) << p << ": " << c[p].reason;
  EXPECT_NE(c["const_fold_opt__153"].position.find("Conv W"), std::string::npos) << c["const_fold_opt__153"].position;
  EXPECT_NE(c["functional_1/dw_1/Squeeze:0"].position.find("Conv B"), std::string::npos);
  EXPECT_NE(c["const_fold_opt__90"].position.find("a bias"), std::string::npos);
  EXPECT_EQ(c["const_fold_opt__85"].role, R::kConstant) << c["const_fold_opt__85"].reason;
  EXPECT_TRUE(c["const_fold_opt__85"].position.empty());
  EXPECT_TRUE(Warnings(g).empty());
}

// tf2onnx's Keras Conv1D: the kernel behind Unsqueeze + Transpose (a folded ExpandDims), the bias
// added after the Squeeze that undoes the Unsqueeze; a PReLU written out by Keras as
// relu(x) + (-alpha) * relu(-x), with -alpha folded ("p1_1/Neg:0") or behind a Neg node. Followed
// through the chains, every weight is in a parameter position.
TEST(Parameters, Tf2OnnxConv1DAndPReluThroughViewsAndNeg) {
  for (bool neg_node : {false, true}) {
    SCOPED_TRACE(neg_node ? "slope behind a Neg node" : "slope folded negated");
    G b(13);
    Graph& g = b.graph();
    g.producer_name = "tf2onnx";
    Value* x = Input(g, "x", {2, 4, 16});
    Value* k = b.Param("functional_1/c1_1/convolution/ExpandDims_1", {3, 4, 8}, 1);
    Value* w = b.Op1("Transpose", {b.Op1("Unsqueeze", {k, b.Ints({0})})}, {A::Ints("perm", {3, 2, 0, 1})});
    Value* y = b.Op1("Conv", {b.Op1("Unsqueeze", {x, b.Ints({2})}), w});
    y = b.Op1("Add", {b.Op1("Squeeze", {y, b.Ints({2})}), b.Param("const_fold_opt__60", {1, 8, 1}, 2)});
    Value* alpha = neg_node ? b.Op1("Neg", {b.Param("functional_1/p1_1/ReadVariable", {8, 14}, 3)})
                            : b.Param("functional_1/p1_1/Neg:0", {8, 14}, 3);
    Value* neg = b.Op1("Mul", {b.Op1("Relu", {b.Op1("Neg", {y})}), alpha});
    g.AddOutput(b.Op1("Add", {b.Op1("Relu", {y}), neg}));
    auto c = Classes(g);
    for (const auto& [name, cls] : c)
      if (name.rfind("c_i", 0) != 0)  // the axes
        EXPECT_EQ(cls.role, R::kParameter) << name << ": " << cls.reason;
    EXPECT_NE(c["functional_1/c1_1/convolution/ExpandDims_1"].position.find("Conv W"), std::string::npos);
    EXPECT_NE(c["const_fold_opt__60"].position.find("Add B, a bias"), std::string::npos);
  }
}

// tf2onnx folds an inference-mode Keras BatchNormalization: into the conv's kernel and bias
// (".../merged_input", ".../batchnorm/sub:0"), or, after a depthwise conv with a bias, into a
// Mul by a per-channel scale and an Add of a per-channel shift. All are the layer's weights now.
TEST(Parameters, Tf2OnnxFoldedBatchNormScaleAndShiftTrain) {
  G b(13);
  Graph& g = b.graph();
  g.producer_name = "tf2onnx";
  Value* x = Input(g, "x", {2, 3, 8, 8});
  Value* y = b.Op1("Conv", {x, b.Param("functional_1/stem_1/convolution/merged_input:0", {8, 3, 3, 3}, 1),
                            b.Param("functional_1/bn1_1/batchnorm/sub:0", {8}, 2)});
  y = b.Op1("Mul", {y, b.Param("functional_1/bn2_1/batchnorm/mul:0", {1, 8, 1, 1}, 3)});
  y = b.Op1("Add", {y, b.Param("const_fold_opt__36", {1, 8, 1, 1}, 4)});
  g.AddOutput(b.Op1("Relu", {y}));
  for (const auto& [name, cls] : Classes(g)) EXPECT_EQ(cls.role, R::kParameter) << name << ": " << cls.reason;
}

// A norm written out by TF (Keras's LayerNormalization; BatchNormalization exported in training
// mode): x * inv + (beta - mean * inv) with inv = gamma / sqrt(var + eps), gamma and beta
// reshaped under folded names. gamma is a scale, beta the bias of a scaled term (added or
// subtracted); the epsilon stays the exporter's.
TEST(Parameters, Tf2OnnxWrittenOutNormScaleAndShiftTrain) {
  for (bool sub : {false, true}) {
    SCOPED_TRACE(sub ? "beta - mean * inv (BatchNorm)" : "(-mean) * inv + beta (LayerNorm)");
    G b(13);
    Graph& g = b.graph();
    g.producer_name = "tf2onnx";
    Value* x = Input(g, "x", {2, 6, 16});
    Value* mean = b.Op1("ReduceMean", {x}, {A::Ints("axes", {-1})});
    Value* centered = b.Op1("Sub", {x, mean});
    Value* var = b.Op1("ReduceMean", {b.Op1("Mul", {centered, centered})}, {A::Ints("axes", {-1})});
    Value* eps = b.Param("functional_1/ln_1/add/y:0", {}, std::vector<float>{1e-3f});
    Value* rsqrt = b.Op1("Reciprocal", {b.Op1("Sqrt", {b.Op1("Add", {var, eps})})});
    Value* inv = b.Op1("Mul", {rsqrt, b.Param("functional_1/ln_1/Reshape:0", {1, 1, 16}, 1)});
    Value* beta = b.Param("functional_1/ln_1/Reshape_1:0", {1, 1, 16}, 2);
    Value* shift = sub ? b.Op1("Sub", {beta, b.Op1("Mul", {mean, inv})})
                       : b.Op1("Add", {b.Op1("Mul", {b.Op1("Neg", {mean}), inv}), beta});
    g.AddOutput(b.Op1("Add", {b.Op1("Mul", {x, inv}), shift}));
    auto c = Classes(g);
    EXPECT_NE(c["functional_1/ln_1/Reshape:0"].position.find("Mul B, a scale"), std::string::npos);
    EXPECT_NE(c["functional_1/ln_1/Reshape_1:0"].position.find(sub ? "Sub A, a bias" : "Add B, a bias"), std::string::npos)
        << c["functional_1/ln_1/Reshape_1:0"].reason;
    EXPECT_EQ(c["functional_1/ln_1/add/y:0"].role, R::kConstant);
  }
}

// TorchScript with constant folding: nn.PReLU()'s one-element slope becomes "onnx::PRelu_62",
// a name its folded scalars share (x * 0.5 -> "onnx::Mul_7", a Pow exponent). The slope trains;
// the scalars, in no parameter position, stay constants.
TEST(Parameters, TorchScriptOneElementSlopeTrainsFoldedScalarsDoNot) {
  G b(17);
  Graph& g = b.graph();
  g.producer_name = "pytorch";
  Value* x = Input(g, "x", {2, 4, 5, 5});
  Value* y = b.Op1("Conv", {x, b.Param("conv.weight", {4, 4, 3, 3}, 1)}, {A::Ints("pads", {1, 1, 1, 1})});
  y = b.Op1("PRelu", {y, b.Param("onnx::PRelu_62", {1, 1, 1}, std::vector<float>{0.25f})});
  y = b.Op1("Mul", {y, b.Param("onnx::Mul_7", {}, std::vector<float>{0.5f})});
  y = b.Op1("Pow", {y, b.Param("onnx::Pow_9", {}, std::vector<float>{2.0f})});
  g.AddOutput(y);
  auto c = Classes(g);
  EXPECT_EQ(c["onnx::PRelu_62"].role, R::kParameter) << c["onnx::PRelu_62"].reason;
  EXPECT_NE(c["onnx::PRelu_62"].position.find("PRelu slope"), std::string::npos);
  EXPECT_EQ(c["onnx::Mul_7"].role, R::kConstant);
  EXPECT_EQ(c["onnx::Pow_9"].role, R::kConstant);
  EXPECT_EQ(c["conv.weight"].role, R::kParameter);
  EXPECT_TRUE(Warnings(g).empty());
}

// The rest of the table: Gemm B and C, MatMul's constant operand either side, norms' scale and
// bias (BatchNorm's running statistics are state), Gather's table, recurrent W/R/B, ConvTranspose;
// a Cast in between (the precision pass's) changes nothing. Reading only the dims (Shape) is no
// read, so a value read so and as a weight is not ambiguous.
TEST(Parameters, EveryRowOfTheTable) {
  G b(17);
  Graph& g = b.graph();
  g.producer_name = "tf2onnx";  // whose naming would freeze every one of them
  Value* ids = g.AddValue("ids", DType::kI64, Shape::Of({2, 3}));
  g.AddInput(ids);
  Value* e = b.Op1("Gather", {b.Param("t", {10, 4}, 1), ids});                        // [2,3,4]
  Value* h = b.Op1("LayerNormalization", {e, b.Param("ln_s", {4}, 2), b.Param("ln_b", {4}, 3)}, {A::Int("axis", -1)});
  Value* w16 = b.Op1("Cast", {b.Param("mm_w", {4, 4}, 4)}, {A::Int("to", ToOnnxType(DType::kF16))});
  h = b.Op1("MatMul", {h, b.Op1("Cast", {w16}, {A::Int("to", ToOnnxType(DType::kF32))})});
  h = b.Op1("MatMul", {b.Param("mm_left", {3, 3}, 5), h});                           // W x
  std::vector<Value*> rnn = b.Op("GRU", {h, b.Param("gru_w", {1, 6, 4}, 6), b.Param("gru_r", {1, 6, 2}, 7),
                                         b.Param("gru_b", {1, 12}, 8)},
                                 {A::Int("hidden_size", 2)}, 2);
  Value* flat = b.Op1("Reshape", {rnn[1], b.Ints({2, 3})});
  flat = b.Op1("Gemm", {flat, b.Param("gemm_b", {3, 6}, 9), b.Param("gemm_c", {6}, 10)});
  Value* img = b.Op1("Reshape", {flat, b.Ints({2, 6, 1, 1})});
  img = b.Op1("BatchNormalization", {img, b.Param("bn_s", {6}, 11), b.Param("bn_b", {6}, 12), b.Param("bn_m", {6}, 13),
                                     b.Param("bn_v", {6}, std::vector<float>{1, 1, 1, 1, 1, 1})});
  img = b.Op1("InstanceNormalization", {img, b.Param("in_s", {6}, 14), b.Param("in_b", {6}, 15)});
  img = b.Op1("ConvTranspose", {img, b.Param("ct_w", {6, 2, 2, 2}, 16), b.Param("ct_b", {2}, 17)});
  Value* shape_only = b.Param("shape_read", {4, 4}, 18);
  img = b.Op1("Reshape", {img, b.Op1("Shape", {shape_only})});
  g.AddOutput(b.Op1("MatMul", {img, shape_only}));
  auto c = Classes(g);
  for (const char* p : {"t", "ln_s", "ln_b", "mm_w", "mm_left", "gru_w", "gru_r", "gru_b", "gemm_b", "gemm_c", "bn_s",
                        "bn_b", "in_s", "in_b", "ct_w", "ct_b", "shape_read"})
    EXPECT_EQ(c[p].role, R::kParameter) << p << ": " << c[p].reason;
  EXPECT_EQ(c["bn_m"].role, R::kState);
  EXPECT_EQ(c["bn_v"].role, R::kState);
  EXPECT_NE(c["t"].position.find("Gather data"), std::string::npos);
  EXPECT_NE(c["mm_w"].position.find("MatMul B"), std::string::npos);
  EXPECT_NE(c["mm_left"].position.find("MatMul A"), std::string::npos);
  EXPECT_TRUE(c["shape_read"].ambiguity.empty());
  EXPECT_TRUE(Warnings(g).empty());
}

// Both torch exporters assemble an LSTM's W from Slices of weight_ih in ONNX's gate order,
// Concat-ed and Unsqueeze-d: a Concat of constants only is followed, so W is read as LSTM W even
// where names would not say so.
TEST(Parameters, RecurrentWeightsAssembledFromSlicesAreParameters) {
  G b(14);
  Graph& g = b.graph();
  g.producer_name = "tf2onnx";  // no name rule would keep them
  Value* x = Input(g, "x", {5, 2, 3});
  Value* w = b.Param("w_ih", {8, 3}, 1);
  auto gates = [&](Value* p, int64_t h) {
    Value* first = b.Op1("Slice", {p, b.Ints({0}), b.Ints({h}), b.Ints({0})});
    Value* rest = b.Op1("Slice", {p, b.Ints({h}), b.Ints({4 * h}), b.Ints({0})});
    return b.Op1("Unsqueeze", {b.Op1("Concat", {rest, first}, {A::Int("axis", 0)}), b.Ints({0})});
  };
  std::vector<Value*> out = b.Op("LSTM", {x, gates(w, 2), gates(b.Param("w_hh", {8, 2}, 2), 2)},
                                 {A::Int("hidden_size", 2)}, 2);
  g.AddOutput(out[1]);
  auto c = Classes(g);
  for (const char* p : {"w_ih", "w_hh"}) {
    EXPECT_EQ(c[p].role, R::kParameter) << p << ": " << c[p].reason;
    EXPECT_NE(c[p].position.find("LSTM"), std::string::npos) << c[p].position;
  }
}

// Not a bias and not a scale: a constant added to what no product made (a positional table
// added to an embedding), a one-element factor, an attention mask added to the scores (a
// product, but the mask spans two axes) and rotary tables multiplied into q (two axes, and q is
// no relu(-x)).
TEST(Parameters, AddAndMulConstantsOutsideTheirPositionsAreNotParameters) {
  G b(17);
  Graph& g = b.graph();
  g.producer_name = "tf2onnx";
  Value* x = Input(g, "x", {2, 6, 4});
  Value* y = b.Op1("Add", {b.Op1("Relu", {x}), b.Param("const_fold_opt__1", {6, 4}, 1)});
  y = b.Op1("Mul", {y, b.Param("const_fold_opt__2", {1}, std::vector<float>{0.5f})});
  Value* q = b.Op1("Mul", {y, b.Param("const_fold_opt__3", {1, 6, 4}, 3)});
  Value* scores = b.Op1("MatMul", {q, b.Op1("Transpose", {y}, {A::Ints("perm", {0, 2, 1})})});
  g.AddOutput(b.Op1("Add", {scores, b.Param("const_fold_opt__4", {1, 6, 6}, 4)}));
  auto c = Classes(g);
  for (const char* k : {"const_fold_opt__1", "const_fold_opt__2", "const_fold_opt__3", "const_fold_opt__4"}) {
    EXPECT_EQ(c[k].role, R::kConstant) << k << ": " << c[k].reason;
    EXPECT_TRUE(c[k].position.empty()) << k << ": " << c[k].position;
  }
}

// One value read as a PReLU slope and as a Pow exponent: the rule cannot know which the
// framework meant. It trains (a parameter position wins), and the warning names it and the flag
// that decides it; with --freeze matching it the warning says it is frozen although a slope.
TEST(Parameters, ScalarReadAsSlopeAndExponentIsAmbiguous) {
  G b(17);
  Graph& g = b.graph();
  g.producer_name = "pytorch";
  Value* x = Input(g, "x", {2, 3});
  Value* s = b.Param("onnx::PRelu_5", {1}, std::vector<float>{0.25f});
  g.AddOutput(b.Op1("Pow", {b.Op1("PRelu", {x, s}), s}));
  auto c = Classes(g);
  EXPECT_EQ(c["onnx::PRelu_5"].role, R::kParameter);
  const std::string& amb = c["onnx::PRelu_5"].ambiguity;
  EXPECT_NE(amb.find("PRelu slope"), std::string::npos) << amb;
  EXPECT_NE(amb.find("Pow input 1"), std::string::npos) << amb;
  EXPECT_NE(amb.find("--freeze='onnx::PRelu_5'"), std::string::npos) << amb;
  EXPECT_TRUE(Mentions(Warnings(g), "onnx::PRelu_5", "--freeze"));
  std::vector<std::string> frozen = Warnings(g, {"", "onnx::PRelu_5"});
  ASSERT_EQ(frozen.size(), 1u);
  EXPECT_TRUE(Mentions(frozen, "PRelu slope", "--freeze matches it")) << frozen[0];
}

// The flag a warning suggests is a regex: names with regex characters come quoted.
TEST(Parameters, SuggestedFlagQuotesRegexCharacters) {
  G b(17);
  Graph& g = b.graph();
  Value* x = Input(g, "x", {2, 3});
  Value* s = b.Param("a.b(c)", {1}, std::vector<float>{0.25f});
  g.AddOutput(b.Op1("Pow", {b.Op1("PRelu", {x, s}), s}));
  auto c = Classes(g);
  EXPECT_NE(c["a.b(c)"].ambiguity.find(R"(--freeze='a\.b\(c\)')"), std::string::npos) << c["a.b(c)"].ambiguity;
}

// torch.export's signature outranks the position: a BUFFER read as a conv kernel (a fixed blur
// filter) does not train, and the warning says so; a PARAMETER trains.
TEST(Parameters, TorchExportMetadataOutranksThePositionAndIsReported) {
  G b(18);
  Graph& g = b.graph();
  Value* x = Input(g, "x", {1, 2, 5, 5});
  Value* blur = b.Param("blur", {2, 1, 3, 3}, 1);
  Value* w = b.Param("conv.weight", {2, 2, 1, 1}, 2);
  blur->metadata[kTorchExportKind] = "BUFFER";
  w->metadata[kTorchExportKind] = "PARAMETER";
  g.AddOutput(b.Op1("Conv", {b.Op1("Conv", {x, blur}, {A::Int("group", 2)}), w}));
  auto c = Classes(g);
  EXPECT_EQ(c["blur"].role, R::kConstant);
  EXPECT_EQ(c["conv.weight"].role, R::kParameter);
  std::vector<std::string> w1 = Warnings(g);
  ASSERT_EQ(w1.size(), 1u);
  EXPECT_TRUE(Mentions(w1, "'blur' is read as Conv W", "torch.export BUFFER")) << w1[0];
  std::vector<std::string> w2 = Warnings(g, {"conv\\.weight", ""});
  EXPECT_TRUE(Mentions(w2, "'blur'", "torch.export BUFFER"));
  std::vector<std::string> w3 = Warnings(g, {"blur", ""});
  EXPECT_TRUE(Mentions(w3, "'conv.weight'", "--trainable does not match it"));
}

// Canonicalization's folds (a Constant node's value, TorchScript's GroupNorm ones and zeros for
// its InstanceNormalization) are the exporter's constants even in a parameter position.
TEST(Parameters, ConstantsCanonicalizationFoldedStayConstants) {
  G b(17);
  Graph& g = b.graph();
  Value* x = Input(g, "x", {2, 4, 3});
  Value* ones = b.Param("/gn/Constant_1_output_0", {4}, std::vector<float>{1, 1, 1, 1});
  ones->metadata[kFoldedMetadata] = "Constant";
  g.AddOutput(b.Op1("InstanceNormalization", {x, ones, b.Param("gn.bias", {4}, 1)}));
  auto c = Classes(g);
  EXPECT_EQ(c["/gn/Constant_1_output_0"].role, R::kConstant);
  EXPECT_EQ(c["gn.bias"].role, R::kParameter);
  EXPECT_TRUE(Warnings(g).empty());
}

// A frozen weight: --freeze matching a value in a parameter position is reported.
TEST(Parameters, FreezingAWeightIsReported) {
  G b(17);
  Graph& g = b.graph();
  Value* x = Input(g, "x", {2, 3});
  g.AddOutput(b.Op1("Gemm", {x, b.Param("fc.weight", {3, 2}, 1), b.Param("fc.bias", {2}, 2)}));
  ASSERT_TRUE(InferShapes(g).ok());
  std::vector<std::string> w = Warnings(g, {"", "fc\\.bias"});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(Mentions(w, "'fc.bias' is read as Gemm C", "--freeze matches it")) << w[0];
  EXPECT_FALSE(TrainabilityWarnings(g, {"", "(["}).ok());
}

}  // namespace
}  // namespace mixtrain
