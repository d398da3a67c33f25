// Structural tests of the train_mode, loss and autodiff passes on small graphs: what each pass
// adds, names and leaves out, and the errors a user can cause. Numerics are in the gradcheck tests.
#include <algorithm>

#include <gtest/gtest.h>

#include "graph/onnx_export.h"
#include "graph/verifier.h"
#include "passes/pass_registry.h"
#include "passes/passes.h"
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using A = Attribute;

using gradcheck::CountOps;

bool HasOutput(const Graph& g, const std::string& name) {
  const Value* v = g.FindValue(name);
  return v != nullptr && g.IsGraphOutput(v);
}

// x[N,4] -> MatMul(w[4,3]) -> Add(b[3]) -> logits
struct Linear {
  G b{17};
  Value* x;
  Value* logits;
  Linear() {
    x = b.graph().AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), Dim(4)}));
    b.graph().AddInput(x);
    Value* h = b.Op1("MatMul", {x, b.Param("w", {4, 3}, 1)});
    logits = b.Op1("Add", {h, b.Param("bias", {3}, 2)});
    b.graph().AddOutput(logits);
    MT_CHECK_OK(InferShapes(b.graph()));
  }
};

TEST(TrainModePass, BatchNormOpset15GetsTrainingModeAndState) {
  G b(15);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3, 4, 4}));
  g.AddInput(x);
  Value* y = b.Op1("BatchNormalization", {x, b.Param("s", {3}, 1), b.Param("bb", {3}, 2),
                                          b.Param("rm", {3}, 3), b.Param("rv", {3}, 4)},
                   {A::Float("momentum", 0.9f)});
  g.AddOutput(y);
  auto changed = MakeTrainModePass()->Run(g);
  ASSERT_TRUE(changed.ok() && *changed);
  ASSERT_TRUE(Verify(g).ok());
  const Node* bn = y->producer;
  EXPECT_EQ(bn->attr_int("training_mode", 0), 1);
  EXPECT_EQ(bn->attr_float("momentum", 0), 0.9f);
  ASSERT_EQ(bn->num_outputs(), 3u);
  auto updates = StateUpdates(g);
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(updates[0], std::make_pair(std::string("state/rm"), std::string("rm")));
  EXPECT_EQ(updates[1], std::make_pair(std::string("state/rv"), std::string("rv")));
  EXPECT_EQ(g.FindValue("state/rm")->producer, bn);
  // Running it again changes nothing.
  auto again = MakeTrainModePass()->Run(g);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST(TrainModePass, BatchNormOpset9FormGetsRunningStatOutputs) {
  G b(12);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3}));
  g.AddInput(x);
  Value* y = b.Op1("BatchNormalization", {x, b.Param("s", {3}, 1), b.Param("bb", {3}, 2),
                                          b.Param("rm", {3}, 3), b.Param("rv", {3}, 4)});
  g.AddOutput(y);
  ASSERT_TRUE(MakeTrainModePass()->Run(g).ok());
  ASSERT_TRUE(Verify(g).ok());
  EXPECT_FALSE(y->producer->has_attr("training_mode"));  // no such attribute before opset 14
  EXPECT_NE(y->producer->output(1), nullptr);
  EXPECT_NE(y->producer->output(2), nullptr);
  EXPECT_EQ(StateUpdates(g).size(), 2u);
}

// Each Dropout gets training_mode, a mask output and a seed of its own: two dropouts of one shape
// must not draw the same masks; the seed depends on the configured one and is the same in every
// build of the graph (a rerun or resumed run draws the same masks).
TEST(TrainModePass, DropoutGetsTrainingModeSeedAndMask) {
  auto seeds = [](int64_t config_seed) {
    G b(13);
    Graph& g = b.graph();
    Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3}));
    g.AddInput(x);
    Value* y1 = b.Op1("Dropout", {x, b.ConstF({}, {0.25f})});
    Value* y2 = b.Op1("Dropout", {y1, b.ConstF({}, {0.25f})});
    g.AddOutput(y2);
    TrainModeOptions opt;
    opt.seed = config_seed;
    EXPECT_TRUE(MakeTrainModePass(opt)->Run(g).ok());
    EXPECT_TRUE(Verify(g).ok());
    std::vector<int64_t> out;
    for (const Value* y : {y1, y2}) {
      const Node* d = y->producer;
      EXPECT_TRUE(d->has_attr("seed"));
      out.push_back(d->attr_int("seed", -1));
      EXPECT_GE(out.back(), 0);
      EXPECT_TRUE(d->input(2) != nullptr && d->input(2)->initializer->GetInt(0) == 1);
      EXPECT_TRUE(d->output(1) != nullptr && d->output(1)->dtype == DType::kBool);
    }
    return out;
  };
  const std::vector<int64_t> a = seeds(42);
  EXPECT_NE(a[0], a[1]);
  EXPECT_EQ(seeds(42), a);
  EXPECT_NE(seeds(43), a);
}

TEST(LossPass, CrossEntropyAddsLabelsAndScalarLoss) {
  Linear m;
  Graph& g = m.b.graph();
  ASSERT_TRUE(MakeLossPass({})->Run(g).ok());
  ASSERT_TRUE(Verify(g).ok());
  Value* labels = g.FindValue("labels");
  ASSERT_NE(labels, nullptr);
  EXPECT_EQ(labels->dtype, DType::kI64);
  EXPECT_EQ(labels->shape.ToString(), "[N]");
  EXPECT_TRUE(std::find(g.inputs().begin(), g.inputs().end(), labels) != g.inputs().end());
  ASSERT_TRUE(HasOutput(g, "loss"));
  EXPECT_EQ(g.FindValue("loss")->producer->op_type(), "SoftmaxCrossEntropyLoss");
  EXPECT_EQ(g.FindValue("loss")->producer->attr_string("reduction", ""), "mean");
  EXPECT_TRUE(HasOutput(g, m.logits->name));  // the model's output stays
}

TEST(LossPass, RegressionLossesUseFloatLabels) {
  for (const char* kind : {"mse", "l1", "bce_with_logits"}) {
    Linear m;
    Graph& g = m.b.graph();
    LossOptions o;
    o.kind = kind;
    o.labels = "target";
    ASSERT_TRUE(MakeLossPass(o)->Run(g).ok()) << kind;
    ASSERT_TRUE(Verify(g).ok()) << kind;
    EXPECT_EQ(g.FindValue("target")->dtype, DType::kF32) << kind;
    EXPECT_EQ(g.FindValue("target")->shape, m.logits->shape) << kind;
    EXPECT_EQ(g.FindValue("loss")->producer->op_type(), "ReduceMean") << kind;
  }
}

TEST(LossPass, ExistingOutputAndErrors) {
  Linear m;
  Graph& g = m.b.graph();
  LossOptions o;
  o.kind = "output:" + m.logits->name;
  ASSERT_TRUE(MakeLossPass(o)->Run(g).ok());
  EXPECT_EQ(g.FindValue("loss")->producer->input(0), m.logits);

  Linear m2;
  o.kind = "output:nope";
  auto st = MakeLossPass(o)->Run(m2.b.graph());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.status().message()).find("nope"), std::string::npos);
  o.kind = "hinge";
  st = MakeLossPass(o)->Run(m2.b.graph());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.status().message()).find("hinge"), std::string::npos);
}

TEST(AutodiffPass, GradOutputsForEveryFloatParameterOnly) {
  Linear m;
  Graph& g = m.b.graph();
  ASSERT_TRUE(MakeLossPass({})->Run(g).ok());
  ASSERT_TRUE(MakeAutodiffPass()->Run(g).ok());
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).message();
  for (const char* p : {"w", "bias"}) {
    Value* gv = g.FindValue(std::string("grad/") + p);
    ASSERT_NE(gv, nullptr) << p;
    EXPECT_TRUE(g.IsGraphOutput(gv));
    EXPECT_EQ(gv->dtype, DType::kF32);
    EXPECT_EQ(gv->shape, g.FindValue(p)->shape);
  }
  EXPECT_EQ(g.FindValue("grad/x"), nullptr);  // inputs are data, not parameters
  // Pruned: the input gradient dX = dY @ W^T is not computed, only dW = X^T @ dY.
  EXPECT_EQ(CountOps(g, "MatMul"), 2);
  EXPECT_EQ(CountOps(g, "SoftmaxCrossEntropyLossGrad"), 1);
}

TEST(AutodiffPass, FreezeAndTrainableRegexes) {
  {
    Linear m;
    ASSERT_TRUE(MakeLossPass({})->Run(m.b.graph()).ok());
    AutodiffOptions o;
    o.freeze = "bi.*";
    ASSERT_TRUE(MakeAutodiffPass(o)->Run(m.b.graph()).ok());
    EXPECT_NE(m.b.graph().FindValue("grad/w"), nullptr);
    EXPECT_EQ(m.b.graph().FindValue("grad/bias"), nullptr);
  }
  {
    Linear m;
    ASSERT_TRUE(MakeLossPass({})->Run(m.b.graph()).ok());
    AutodiffOptions o;
    o.trainable = "bias";
    ASSERT_TRUE(MakeAutodiffPass(o)->Run(m.b.graph()).ok());
    EXPECT_EQ(m.b.graph().FindValue("grad/w"), nullptr);
    EXPECT_NE(m.b.graph().FindValue("grad/bias"), nullptr);
    EXPECT_EQ(CountOps(m.b.graph(), "MatMul"), 1);  // nothing flows back through the MatMul
  }
  {
    Linear m;
    ASSERT_TRUE(MakeLossPass({})->Run(m.b.graph()).ok());
    AutodiffOptions o;
    o.freeze = ".*";
    auto st = MakeAutodiffPass(o)->Run(m.b.graph());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(std::string(st.status().message()).find("no trainable parameter"), std::string::npos);
    o.freeze = "([";
    st = MakeAutodiffPass(o)->Run(m.b.graph());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(std::string(st.status().message()).find("regex"), std::string::npos);
  }
}

// A causal-mask buffer reaches the loss through Where's condition and an integer/bool path only:
// it is not trainable; a float "mask" multiplied in is, unless frozen.
TEST(AutodiffPass, IntegerAndBoolPathsStopGradients) {
  G b(17);
  Graph& g = b.graph();
  Value* x = b.Param("x", {2, 3}, 1);
  Value* mask = g.AddInitializer("mask", Tensor::FromVector<uint8_t>(DType::kBool, {2, 3}, {1, 0, 1, 1, 1, 0}));
  Value* limit = b.Param("limit", {1}, 2);  // only Clip's max: not differentiable
  Value* shape_src = b.Param("shape_src", {3, 2}, 3);  // only its shape is read
  Value* y = b.Op1("Where", {mask, x, b.ConstF({}, {0.0f})});
  y = b.Op1("Clip", {y, nullptr, limit});
  y = b.Op1("Reshape", {y, b.Op1("Shape", {shape_src})});
  g.AddOutput(y);
  LossOptions lo;
  lo.kind = "mse";
  ASSERT_TRUE(MakeLossPass(lo)->Run(g).ok());
  auto st = MakeAutodiffPass()->Run(g);
  ASSERT_TRUE(st.ok()) << st.status().message();
  ASSERT_TRUE(Verify(g).ok());
  EXPECT_NE(g.FindValue("grad/x"), nullptr);
  EXPECT_EQ(g.FindValue("grad/limit"), nullptr);
  EXPECT_EQ(g.FindValue("grad/shape_src"), nullptr);
  EXPECT_EQ(g.FindValue("grad/mask"), nullptr);
}

// fp32 master weight cast to fp16 for the forward: the gradient arrives in fp32 via a Cast back.
TEST(AutodiffPass, CastGradientReturnsToSourceType) {
  G b(17);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF16, Shape::Of({2, 4}));
  g.AddInput(x);
  Value* w16 = b.Op1("Cast", {b.Param("w", {4, 3}, 1)}, {A::Int("to", ToOnnxType(DType::kF16))});
  Value* y = b.Op1("Cast", {b.Op1("MatMul", {x, w16})}, {A::Int("to", ToOnnxType(DType::kF32))});
  g.AddOutput(y);
  ASSERT_TRUE(MakeLossPass({})->Run(g).ok());
  auto st = MakeAutodiffPass()->Run(g);
  ASSERT_TRUE(st.ok()) << st.status().message();
  ASSERT_TRUE(Verify(g).ok());
  Value* gw = g.FindValue("grad/w");
  ASSERT_NE(gw, nullptr);
  EXPECT_EQ(gw->dtype, DType::kF32);
  const Node* id = gw->producer;
  ASSERT_NE(id, nullptr);
  const Node* cast = id->input(0)->producer;
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(cast->op_type(), "Cast");
  EXPECT_EQ(cast->attr_int("to", 0), ToOnnxType(DType::kF32));
  EXPECT_EQ(cast->input(0)->dtype, DType::kF16);
}

TEST(AutodiffPass, MissingRuleNamesTheOp) {
  G b(17);
  Graph& g = b.graph();
  Value* y = b.Op1("MysteryOp", {b.Param("w", {3}, 1)});
  y->dtype = DType::kF32;
  y->shape = Shape::Of({3});
  Value* loss = g.AddValue("loss", DType::kF32, Shape(std::vector<Dim>{}));
  g.AddNode("ReduceSum", {y}, {loss}, "sum")->SetAttr(A::Int("keepdims", 0));
  g.AddOutput(loss);
  auto st = MakeAutodiffPass()->Run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.status().message()).find("MysteryOp"), std::string::npos)
      << st.status().message();
}

TEST(AutodiffPass, MissingLossIsAnError) {
  Linear m;
  auto st = MakeAutodiffPass()->Run(m.b.graph());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.status().message()).find("loss"), std::string::npos);
}

TEST(AutodiffPass, RegisteredByName) {
  for (const char* name : {"train_mode", "loss", "autodiff"}) {
    auto p = CreatePassByName(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
}

// The dumped train graph (ai.mixtrain ops included) passes onnx::checker.
TEST(AutodiffPass, BackwardGraphPassesOnnxChecker) {
  G b(17);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 1, 6, 6}));
  g.AddInput(x);
  Value* h = b.Op1("Conv", {x, b.Param("cw", {2, 1, 3, 3}, 1), b.Param("cb", {2}, 2)});
  h = b.Op1("MaxPool", {h}, {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})});
  h = b.Op1("Flatten", {h});
  h = b.Op1("Gemm", {h, b.Param("fw", {3, 8}, 3), b.Param("fb", {3}, 4)}, {A::Int("transB", 1)});
  g.AddOutput(h);
  ASSERT_TRUE(MakeLossPass({})->Run(g).ok());
  ASSERT_TRUE(MakeAutodiffPass()->Run(g).ok());
  EXPECT_EQ(CountOps(g, "ConvGrad"), 1);
  EXPECT_EQ(CountOps(g, "MaxPoolGrad"), 1);
  RegisterMixtrainSchemas();
  absl::Status st = CheckOnnxModel(ExportOnnx(g));
  EXPECT_TRUE(st.ok()) << st.message();
}

}  // namespace
}  // namespace mixtrain
