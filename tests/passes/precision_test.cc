// Precision pass: one structural test per propagation rule, on small graphs.
#include "passes/precision.h"

#include <gtest/gtest.h>

#include "graph/verifier.h"

namespace mixtrain {
namespace {

// A little graph builder: values are f32 [4,4] unless said otherwise.
struct G {
  Graph g;
  Value* In(const std::string& name) {
    Value* v = g.AddValue(name, DType::kF32, Shape::Of({4, 4}));
    g.AddInput(v);
    return v;
  }
  Value* W(const std::string& name) {
    return g.AddInitializer(name, Tensor(DType::kF32, {4, 4}));
  }
  Value* Op(const std::string& op, std::vector<Value*> ins, const std::string& name) {
    Node* n = g.AddNode(op, ins, 1, name);
    n->output(0)->dtype = DType::kF32;
    n->output(0)->shape = Shape::Of({4, 4});
    return n->output(0);
  }
  Node* N(const std::string& name) {
    for (const auto& n : g.nodes())
      if (n->name() == name) return n.get();
    return nullptr;
  }
  std::string Prec(const std::string& name) {
    Node* n = N(name);
    return n ? n->annotations()["precision"] : "missing";
  }
  int Casts() {
    int c = 0;
    for (const auto& n : g.nodes()) c += n->op_type() == "Cast";
    return c;
  }
};

PrecisionPolicy Amp(DType low = DType::kF16) {
  return PrecisionPolicy::Default(PrecisionPreset::kAmp, low);
}

void RunPasses(Graph& g, PrecisionPolicy p) {
  PassManager pm;
  pm.Add(MakePrecisionPass(std::move(p)));
  pm.Add(MakeCleanupPass());
  ASSERT_TRUE(pm.Run(g).ok());
  ASSERT_TRUE(Verify(g).ok());
}

TEST(PrecisionTest, AllowRunsLowWithCastsAtBoundaries) {
  G b;
  Value* x = b.In("x");
  Value* y = b.Op("MatMul", {x, b.W("w")}, "mm");
  b.g.AddOutput(y);
  RunPasses(b.g, Amp());
  EXPECT_EQ(b.Prec("mm"), "f16");
  // x and w cast to f16, result cast back to f32 under the output's name.
  EXPECT_EQ(b.Casts(), 3);
  EXPECT_EQ(b.g.outputs()[0]->name, y->name);
  EXPECT_EQ(b.g.outputs()[0]->dtype, DType::kF32);
  EXPECT_EQ(b.N("mm")->output(0)->dtype, DType::kF16);
}

TEST(PrecisionTest, InferBetweenAllowGoesLow) {
  G b;
  Value* h = b.Op("MatMul", {b.In("x"), b.W("w1")}, "mm1");
  Value* a = b.Op("Add", {h, b.W("bias")}, "add");
  Value* s = b.Op("Sigmoid", {a}, "sig");
  b.g.AddOutput(b.Op("MatMul", {s, b.W("w2")}, "mm2"));
  RunPasses(b.g, Amp());
  EXPECT_EQ(b.Prec("add"), "f16");
  EXPECT_EQ(b.Prec("sig"), "f16");
  // No cast between mm1 and mm2: only x, w1, bias, w2 in and the output back.
  EXPECT_EQ(b.Casts(), 5);
}

TEST(PrecisionTest, InferAfterAllowButNotBeforeOneStaysFp32) {
  G b;
  Value* h = b.Op("MatMul", {b.In("x"), b.W("w1")}, "mm");
  b.g.AddOutput(b.Op("Add", {h, b.W("bias")}, "add"));
  RunPasses(b.g, Amp());
  EXPECT_EQ(b.Prec("mm"), "f16");
  EXPECT_EQ(b.Prec("add"), "f32");
}

TEST(PrecisionTest, DenySpreadsForwardThroughInferAndClear) {
  G b;
  Value* h = b.Op("MatMul", {b.In("x"), b.W("w1")}, "mm1");
  Value* e = b.Op("Softmax", {h}, "softmax");
  Value* r = b.Op("Relu", {e}, "relu");         // clear after deny: fp32
  Value* m = b.Op("Mul", {r, b.W("scale")}, "mul");  // infer after deny: fp32
  b.g.AddOutput(b.Op("MatMul", {m, b.W("w2")}, "mm2"));
  RunPasses(b.g, Amp());
  EXPECT_EQ(b.Prec("softmax"), "f32");
  EXPECT_EQ(b.Prec("relu"), "f32");
  EXPECT_EQ(b.Prec("mul"), "f32");  // between allow nodes, but deny wins
  EXPECT_EQ(b.Prec("mm2"), "f16");
}

TEST(PrecisionTest, ClearFollowsLowInput) {
  G b;
  Value* h = b.Op("Conv", {b.In("x"), b.W("w")}, "conv");
  b.g.AddOutput(b.Op("Relu", {h}, "relu"));
  RunPasses(b.g, Amp());
  EXPECT_EQ(b.Prec("relu"), "f16");
}

TEST(PrecisionTest, ClearFeedingOnlyAllowGoesLow) {
  G b;
  Value* t = b.Op("Transpose", {b.In("x")}, "transpose");
  b.g.AddOutput(b.Op("MatMul", {t, b.W("w")}, "mm"));
  RunPasses(b.g, Amp());
  EXPECT_EQ(b.Prec("transpose"), "f16");  // the cast moves before it
}

TEST(PrecisionTest, Bf16DefaultsKeepSoftmaxLowBetweenAllowNodes) {
  G b;
  Value* h = b.Op("MatMul", {b.In("x"), b.W("w1")}, "mm1");
  Value* e = b.Op("Softmax", {h}, "softmax");
  b.g.AddOutput(b.Op("MatMul", {e, b.W("w2")}, "mm2"));
  RunPasses(b.g, Amp(DType::kBF16));
  EXPECT_EQ(b.Prec("softmax"), "bf16");
}

TEST(PrecisionTest, WeightCastMadeOnceAndShared) {
  G b;
  Value* w = b.W("w");
  Value* h1 = b.Op("MatMul", {b.In("x"), w}, "mm1");
  b.g.AddOutput(b.Op("MatMul", {h1, w}, "mm2"));
  RunPasses(b.g, Amp());
  int casts_of_w = 0;
  for (const auto& n : b.g.nodes())
    casts_of_w += n->op_type() == "Cast" && n->input(0) == w;
  EXPECT_EQ(casts_of_w, 1);
  EXPECT_EQ(b.N("mm1")->input(1), b.N("mm2")->input(1));
}

TEST(PrecisionTest, BatchNormStatsStayFp32) {
  G b;
  Value* h = b.Op("Conv", {b.In("x"), b.W("w")}, "conv");
  Value* bn = b.Op("BatchNormalization", {h, b.W("s"), b.W("b"), b.W("m"), b.W("v")}, "bn");
  b.g.AddOutput(b.Op("Conv", {bn, b.W("w2")}, "conv2"));
  RunPasses(b.g, Amp());
  Node* n = b.N("bn");
  EXPECT_EQ(b.Prec("bn"), "f16");
  EXPECT_EQ(n->input(0)->dtype, DType::kF16);
  for (int i = 1; i <= 4; ++i) EXPECT_EQ(n->input(i)->dtype, DType::kF32) << "input " << i;
}

TEST(PrecisionTest, Fp32PresetChangesNothing) {
  G b;
  b.g.AddOutput(b.Op("MatMul", {b.In("x"), b.W("w")}, "mm"));
  PassManager pm;
  pm.Add(MakePrecisionPass(PrecisionPolicy::Default(PrecisionPreset::kFp32, DType::kF16)));
  ASSERT_TRUE(pm.Run(b.g).ok());
  EXPECT_EQ(b.Casts(), 0);
}

TEST(PrecisionTest, HalfPresetRunsInferNodesLowEvenOutsideAllowRegions) {
  G b;
  Value* a = b.Op("Add", {b.In("x"), b.W("bias")}, "add");
  Value* e = b.Op("Exp", {a}, "exp");
  b.g.AddOutput(e);
  RunPasses(b.g, PrecisionPolicy::Default(PrecisionPreset::kHalf, DType::kF16));
  EXPECT_EQ(b.Prec("add"), "f16");
  EXPECT_EQ(b.Prec("exp"), "f32");  // deny stays fp32
}

TEST(PrecisionTest, UserEditsAndPinnedNodes) {
  G b;
  Value* h = b.Op("MatMul", {b.In("x"), b.W("w1")}, "mm1");
  b.g.AddOutput(b.Op("MatMul", {h, b.W("w2")}, "head/mm2"));
  PrecisionPolicy p = Amp();
  ASSERT_TRUE(p.AddFp32NodeRegex("^head/").ok());
  RunPasses(b.g, p);
  EXPECT_EQ(b.Prec("mm1"), "f16");
  EXPECT_EQ(b.Prec("head/mm2"), "f32");
  PrecisionPolicy bad = Amp();
  EXPECT_FALSE(bad.AddFp32NodeRegex("(").ok());
}

TEST(PrecisionTest, ReportCountsNodesFlopsAndCasts) {
  G b;
  b.g.AddOutput(b.Op("MatMul", {b.In("x"), b.W("w")}, "mm"));
  RunPasses(b.g, Amp());
  std::string r = PrecisionReportText(b.g);
  EXPECT_NE(r.find("f16=1"), std::string::npos) << r;
  EXPECT_NE(r.find("casts inserted: 3"), std::string::npos) << r;
  EXPECT_NE(r.find("f16=128 (100.0%)"), std::string::npos) << r;  // 2*4*4*4
}

TEST(CleanupTest, FoldsExactRoundTripOnly) {
  Graph g;
  Value* x = g.AddValue("x", DType::kF16, Shape::Of({2}));
  g.AddInput(x);
  Node* up = g.AddNode("Cast", {x}, 1, "up");
  up->SetAttr(Attribute::Int("to", ToOnnxType(DType::kF32)));
  up->output(0)->dtype = DType::kF32;
  Node* down = g.AddNode("Cast", {up->output(0)}, 1, "down");
  down->SetAttr(Attribute::Int("to", ToOnnxType(DType::kF16)));
  down->output(0)->dtype = DType::kF16;
  Node* neg = g.AddNode("Neg", {down->output(0)}, 1, "neg");
  g.AddOutput(neg->output(0));
  // And the lossy direction, which must stay: f32 -> f16 -> f32.
  Value* y = g.AddValue("y", DType::kF32, Shape::Of({2}));
  g.AddInput(y);
  Node* a = g.AddNode("Cast", {y}, 1, "a");
  a->SetAttr(Attribute::Int("to", ToOnnxType(DType::kF16)));
  a->output(0)->dtype = DType::kF16;
  Node* c = g.AddNode("Cast", {a->output(0)}, 1, "c");
  c->SetAttr(Attribute::Int("to", ToOnnxType(DType::kF32)));
  c->output(0)->dtype = DType::kF32;
  g.AddOutput(c->output(0));
  PassManager pm;
  pm.Add(MakeCleanupPass());
  ASSERT_TRUE(pm.Run(g).ok());
  EXPECT_EQ(neg->input(0), x);
  int casts = 0;
  for (const auto& n : g.nodes()) casts += n->op_type() == "Cast";
  EXPECT_EQ(casts, 2);  // a and c remain
}

}  // namespace
}  // namespace mixtrain
