// The fuse_matmul inference pass: which chains it folds into ai.mixtrain FusedMatMul and which it
// must leave alone (shared intermediates, graph outputs, wrong shapes or order), and that the
// rewritten graph computes what the original did: on small graphs, and on the shipped gpt_mini and
// mlp models after the whole inference pipeline, in fp32 (tight) and bf16 (loose); the optimized
// gpt_mini passes onnx::checker.
#include <cmath>
#include <map>
#include <random>

#include "kernels/host_evaluator.h"
#include "kernels/backend.h"
#include "gtest/gtest.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "graph/verifier.h"
#include "passes/inference.h"
#include "passes/pass_registry.h"
#include "passes/passes.h"
#include "passes/training.h"
#include "passes/low_precision.h"
#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using inference_test::Count;
using inference_test::ExpectClose;
using inference_test::Find;
using inference_test::Feeds;
using inference_test::RunGraph;
using A = Attribute;

std::unique_ptr<Graph> FuseAndCompare(Graph& g, double tol = 1e-5) {
  return inference_test::PassAndCompare(g, "fuse_matmul", DType::kF32, tol);
}

// x[B, T, 8] @ w[8, 6] + bias, then `act` (empty: none) and + z.
struct Mlp {
  G b{20};
  Value *x, *w, *bias, *z, *mm, *y;
};

void BuildLinear(Mlp& m, const char* act, bool residual) {
  Graph& g = m.b.graph();
  m.x = g.AddValue("x", DType::kF32, Shape({Dim::Symbol("B"), Dim(5), Dim(8)}));
  g.AddInput(m.x);
  m.z = g.AddValue("z", DType::kF32, Shape({Dim::Symbol("B"), Dim(5), Dim(6)}));
  g.AddInput(m.z);
  m.w = m.b.Param("w", {8, 6}, 1);
  m.bias = m.b.Param("bias", {6}, 2);
  m.mm = m.b.Op1("MatMul", {m.x, m.w});
  m.y = m.b.Op1("Add", {m.mm, m.bias});
  if (act != nullptr) m.y = m.b.Op1(act, {m.y});
  if (residual) m.y = m.b.Op1("Add", {m.z, m.y});
}

TEST(FuseMatMul, LinearBiasGeluResidualBecomeOneNode) {
  Mlp m;
  BuildLinear(m, "Gelu", true);
  m.b.graph().AddOutput(m.y);
  auto fused = FuseAndCompare(m.b.graph());
  ASSERT_EQ(fused->num_nodes(), 1u);
  Node* f = Find(*fused, "FusedMatMul");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->domain(), kMixtrainDomain);
  EXPECT_EQ(f->attr_string("activation", ""), "Gelu");
  ASSERT_EQ(f->num_inputs(), 4u);
  EXPECT_EQ(f->input(2)->name, "bias");
  EXPECT_EQ(f->input(3)->name, "z");
  EXPECT_EQ(f->output(0)->name, m.y->name);  // the graph output keeps its value
}

TEST(FuseMatMul, EveryActivationAndGeluTanh) {
  for (const char* act : {"Relu", "Sigmoid", "Tanh"}) {
    Mlp m;
    BuildLinear(m, act, false);
    m.b.graph().AddOutput(m.y);
    auto fused = FuseAndCompare(m.b.graph());
    ASSERT_EQ(fused->num_nodes(), 1u) << act;
    EXPECT_EQ(Find(*fused, "FusedMatMul")->attr_string("activation", ""), act);
  }
  Mlp m;
  BuildLinear(m, nullptr, false);
  Graph& g = m.b.graph();
  g.AddOutput(m.b.Op1("Gelu", {m.y}, {A::String("approximate", "tanh")}));
  ASSERT_TRUE(InferShapes(g).ok());
  auto fused = FuseAndCompare(g);
  ASSERT_EQ(fused->num_nodes(), 1u);
  EXPECT_EQ(Find(*fused, "FusedMatMul")->attr_string("activation", ""), "GeluTanh");
}

TEST(FuseMatMul, SharedIntermediateStaysAndChainStopsThere) {
  Mlp m;
  BuildLinear(m, "Relu", false);
  Graph& g = m.b.graph();
  g.AddOutput(m.y);
  Value* other = m.b.Op1("Neg", {m.mm});  // the product is read elsewhere too
  g.AddOutput(other);
  auto fused = FuseAndCompare(g);
  EXPECT_EQ(Count(*fused, "FusedMatMul"), 0);
  EXPECT_EQ(Count(*fused, "MatMul"), 1);
  EXPECT_EQ(Count(*fused, "Relu"), 1);
}

TEST(FuseMatMul, GraphOutputIntermediateIsKept) {
  Mlp m;
  BuildLinear(m, "Relu", false);
  Graph& g = m.b.graph();
  Value* biased = m.y->producer->input(0);
  g.AddOutput(biased);  // MatMul + bias is an output: the Relu must stay outside
  g.AddOutput(m.y);
  auto fused = FuseAndCompare(g);
  ASSERT_EQ(Count(*fused, "FusedMatMul"), 1);
  EXPECT_EQ(Find(*fused, "FusedMatMul")->output(0)->name, biased->name);
  EXPECT_FALSE(Find(*fused, "FusedMatMul")->has_attr("activation"));
  EXPECT_EQ(Count(*fused, "Relu"), 1);
}

TEST(FuseMatMul, ScaleFoldsOnlyBeforeBias) {
  G b(17);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({4, 8}));
  g.AddInput(x);
  Value* y = b.Op1("MatMul", {x, b.Param("w", {8, 6}, 1)});
  y = b.Op1("Mul", {b.ConstF({}, {0.5f}), y});
  y = b.Op1("Mul", {y, b.ConstF({1, 1}, {3.0f})});
  y = b.Op1("Add", {y, b.Param("bias", {1, 6}, 2)});
  y = b.Op1("Mul", {y, b.ConstF({}, {2.0f})});  // after the bias: stays
  g.AddOutput(y);
  auto fused = FuseAndCompare(g);
  Node* f = Find(*fused, "FusedMatMul");
  ASSERT_NE(f, nullptr);
  EXPECT_FLOAT_EQ(f->attr_float("alpha", 1), 1.5f);
  EXPECT_EQ(Count(*fused, "Mul"), 1);
}

TEST(FuseMatMul, NonScalarOrVariableMulAndNonBiasAddStay) {
  G b(17);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({4, 8}));
  Value* s = g.AddValue("s", DType::kF32, Shape::Of({}));
  g.AddInput(x);
  g.AddInput(s);
  Value* y = b.Op1("MatMul", {x, b.Param("w", {8, 6}, 1)});
  y = b.Op1("Mul", {y, s});                             // not a constant
  Value* y2 = b.Op1("MatMul", {x, b.Param("w2", {8, 6}, 3)});
  y2 = b.Op1("Mul", {y2, b.ConstF({6}, {1, 2, 3, 4, 5, 6})});  // not a scalar
  Value* y3 = b.Op1("MatMul", {x, b.Param("w3", {8, 6}, 4)});
  y3 = b.Op1("Add", {y3, b.Param("col", {4, 1}, 5)});  // broadcast over N, not a bias
  Value* y4 = b.Op1("MatMul", {x, b.Param("w4", {8, 6}, 6)});
  y4 = b.Op1("Add", {y4, b.Param("big", {2, 4, 6}, 7)});  // broadcasting grows the shape
  for (Value* v : {y, y2, y3, y4}) g.AddOutput(v);
  auto fused = FuseAndCompare(g);
  EXPECT_EQ(Count(*fused, "FusedMatMul"), 0);
  EXPECT_EQ(Count(*fused, "MatMul"), 4);
}

// Z joins after the activation: Relu(MatMul + Z) keeps its Relu.
TEST(FuseMatMul, ResidualBeforeActivationKeepsTheActivation) {
  Mlp m;
  Graph& g = m.b.graph();
  m.x = g.AddValue("x", DType::kF32, Shape::Of({5, 8}));
  m.z = g.AddValue("z", DType::kF32, Shape::Of({5, 6}));
  g.AddInput(m.x);
  g.AddInput(m.z);
  Value* y = m.b.Op1("Relu", {m.b.Op1("Add", {m.b.Op1("MatMul", {m.x, m.b.Param("w", {8, 6}, 1)}), m.z})});
  g.AddOutput(y);
  auto fused = FuseAndCompare(g);
  ASSERT_EQ(Count(*fused, "FusedMatMul"), 1);
  EXPECT_EQ(Find(*fused, "FusedMatMul")->num_inputs(), 4u);
  EXPECT_EQ(Count(*fused, "Relu"), 1);
}

// gpt-style attention: Q K^T from [B, T, H, D] views, scaled; softmax; @ V; back to [B, T, H, D].
TEST(FuseMatMul, AttentionTransposesFoldIntoPermutations) {
  G b(17);
  Graph& g = b.graph();
  Value* q = g.AddValue("q", DType::kF32, Shape({Dim::Symbol("B"), Dim(5), Dim(2), Dim(4)}));
  Value* k = g.AddValue("k", DType::kF32, Shape({Dim::Symbol("B"), Dim(5), Dim(2), Dim(4)}));
  Value* v = g.AddValue("v", DType::kF32, Shape({Dim::Symbol("B"), Dim(5), Dim(2), Dim(4)}));
  for (Value* in : {q, k, v}) g.AddInput(in);
  Value* qt = b.Op1("Transpose", {q}, {A::Ints("perm", {0, 2, 1, 3})});
  Value* kt = b.Op1("Transpose", {k}, {A::Ints("perm", {0, 2, 3, 1})});
  Value* vt = b.Op1("Transpose", {v}, {A::Ints("perm", {0, 2, 1, 3})});
  Value* s = b.Op1("Mul", {b.Op1("MatMul", {qt, kt}), b.ConstF({}, {0.5f})});
  Value* p = b.Op1("Softmax", {s}, {A::Int("axis", -1)});
  Value* o = b.Op1("Transpose", {b.Op1("MatMul", {p, vt})}, {A::Ints("perm", {0, 2, 1, 3})});
  g.AddOutput(o);
  auto fused = FuseAndCompare(g);
  EXPECT_EQ(Count(*fused, "Transpose"), 0);
  EXPECT_EQ(Count(*fused, "Mul"), 0);
  ASSERT_EQ(Count(*fused, "FusedMatMul"), 2);
  const Node* scores = fused->FindValue(s->name)->producer;
  EXPECT_EQ(scores->attr_ints("perm_a"), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(scores->attr_ints("perm_b"), (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_FLOAT_EQ(scores->attr_float("alpha", 1), 0.5f);
  const Node* out = fused->FindValue(o->name)->producer;
  EXPECT_EQ(out->attr_ints("perm_y"), (std::vector<int64_t>{0, 2, 1, 3}));
}

// A Transpose that ends one chain and feeds the next MatMul stays (it is the first chain's
// result); the next chain does not read through it.
TEST(FuseMatMul, ChainsDoNotReadEachOthersIntermediates) {
  G b(17);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({4, 6}));
  g.AddInput(x);
  Value* t = b.Op1("Transpose", {b.Op1("MatMul", {x, b.Param("w", {6, 4}, 1)})});
  Value* y = b.Op1("MatMul", {t, b.Param("w2", {4, 3}, 2)});
  // Two products meeting in one Add: only one chain takes it.
  Value* y2 = b.Op1("MatMul", {x, b.Param("w3", {6, 3}, 3)});
  Value* y3 = b.Op1("MatMul", {x, b.Param("w4", {6, 3}, 4)});
  g.AddOutput(y);
  g.AddOutput(b.Op1("Add", {y2, y3}));
  auto fused = FuseAndCompare(g);
  EXPECT_EQ(Count(*fused, "Add"), 0);
}

TEST(FuseMatMul, GemmWithBiasVectorAndActivationBecomesFusedMatMul) {
  G b(17);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), Dim(8)}));
  g.AddInput(x);
  Value* y = b.Op1("Gemm", {x, b.Param("w", {6, 8}, 1), b.Param("c", {6}, 2)},
                   {A::Int("transB", 1), A::Float("alpha", 0.5f)});
  y = b.Op1("Relu", {y});
  Value* y2 = b.Op1("Gemm", {x, b.Param("w2", {8, 6}, 3), b.Param("c2", {1, 6}, 4)},
                    {A::Float("beta", 2.0f)});  // beta != 1: stays a Gemm
  g.AddOutput(b.Op1("Relu", {y2}));
  Value* y3 = b.Op1("Gemm", {x, b.Param("w3", {6, 8}, 5), b.Param("c3", {6}, 6)},
                    {A::Int("transB", 1)});  // nothing to fold: stays a Gemm
  g.AddOutput(y);
  g.AddOutput(y3);
  auto fused = FuseAndCompare(g);
  ASSERT_EQ(Count(*fused, "FusedMatMul"), 1);
  EXPECT_EQ(Count(*fused, "Gemm"), 2);
  Node* f = Find(*fused, "FusedMatMul");
  EXPECT_EQ(f->attr_ints("perm_b"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(f->attr_string("activation", ""), "Relu");
}

// onnx::checker on the exported graph. Debian's ONNX (1.12) knows IR version 8 and opset 17; the
// shipped models say 18, so they are checked as opset 17, where the one opset-18 attribute they
// use, Split's num_outputs, is the default (an even split into the node's outputs).
absl::Status CheckedByOnnx(const Graph& g) {
  onnx::ModelProto m = ExportOnnx(g);
  m.set_ir_version(std::min<int64_t>(m.ir_version(), 8));
  for (auto& op : *m.mutable_opset_import())
    if (op.domain().empty()) op.set_version(std::min<int64_t>(op.version(), 17));
  for (auto& node : *m.mutable_graph()->mutable_node()) {
    if (node.op_type() != "Split") continue;
    auto* attrs = node.mutable_attribute();
    for (int i = attrs->size() - 1; i >= 0; --i)
      if (attrs->Get(i).name() == "num_outputs") attrs->DeleteSubrange(i, 1);
  }
  return CheckOnnxModel(m);
}

// ---- shipped models: the whole inference pipeline vs the graph as imported -----------------

void CheckModel(const std::string& file, DType dtype, double tol, int min_fused) {
  SCOPED_TRACE(file + " " + DTypeName(dtype));
  auto g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/" + file);
  ASSERT_TRUE(g.ok()) << g.status();
  if (dtype != DType::kF32) ASSERT_TRUE(LowerFloatModel(**g, dtype).ok());
  std::unique_ptr<Graph> opt = (*g)->Clone();
  absl::Status st = OptimizeForInference(*opt, CpuBackend().target());
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_GE(Count(*opt, "FusedMatMul"), min_fused);
  auto feeds = Feeds(**g, 4);
  ExpectClose(RunGraph(*opt, feeds), RunGraph(**g, feeds), tol);
  EXPECT_TRUE(CheckedByOnnx(*opt).ok()) << CheckedByOnnx(*opt);
}

// Gemm(dY, Transpose(W), transB = 1), what autodiff writes for dX of a product that read W^T:
// W read in place (the two transposes cancel), the W^T copy gone once nothing else reads it.
TEST(FuseMatMul, GemmTransBOfATransposeReadsTheSourceInPlace) {
  G b(20);
  Graph& g = b.graph();
  Value* dy = g.AddValue("dy", DType::kF32, Shape::Of({4, 6}));
  g.AddInput(dy);
  Value* w = b.Param("w", {6, 8}, 3);
  Value* wt = b.Op1("Transpose", {w}, {A::Ints("perm", {1, 0})});  // [8, 6]
  g.AddOutput(b.Op1("Gemm", {dy, wt}, {A::Int("transB", 1)}));  // dy [4,6] @ wt^T [6,8]
  auto fused = FuseAndCompare(g);
  const Node* f = Find(*fused, "FusedMatMul");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->input(1)->name, "w");
  EXPECT_FALSE(f->has_attr("perm_b"));  // (W^T)^T = W
  EXPECT_EQ(Count(*fused, "Transpose"), 0);
}

// A weight gradient dW = X^T dY of inputs x [5, 3] and dy [5, 7]: a Gemm with transA, [3, 7].
Value* WeightGradientGemm(G& b) {
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({5, 3}));
  Value* dy = g.AddValue("dy", DType::kF32, Shape::Of({5, 7}));
  g.AddInput(x);
  g.AddInput(dy);
  return b.Op1("Gemm", {x, dy}, {A::Int("transA", 1)});
}

// A weight gradient transposed for a tied weight: one FusedMatMul computing (X^T dY)^T = dY^T X,
// written plainly (no perm_y).
TEST(FuseMatMul, GemmTransAAndAnOutputTransposeBecomeOneNode) {
  G b(20);
  Graph& g = b.graph();
  Value* dw = WeightGradientGemm(b);
  g.AddOutput(b.Op1("Transpose", {dw}, {A::Ints("perm", {1, 0})}));  // [7, 3]
  auto fused = FuseAndCompare(g);
  ASSERT_EQ(fused->num_nodes(), 1u);
  const Node* f = Find(*fused, "FusedMatMul");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->input(0)->name, "dy");
  EXPECT_EQ(f->input(1)->name, "x");
  EXPECT_EQ(f->attr_ints("perm_a"), (std::vector<int64_t>{1, 0}));
  EXPECT_FALSE(f->has_attr("perm_b"));
  EXPECT_FALSE(f->has_attr("perm_y"));
}

// The fused node runs where the product ran, not where the chain's last op was or at the end
// (a weight gradient only the optimizer reads would keep its operands alive until then).
TEST(FuseMatMul, FusedNodeTakesTheProductsPlace) {
  G b(20);
  Graph& g = b.graph();
  Value* dw = WeightGradientGemm(b);  // the product, first
  Value* other = g.FindValue("dy");
  for (int i = 0; i < 4; ++i) other = b.Op1("Sigmoid", {other});  // unrelated work in between
  g.AddOutput(other);
  g.AddOutput(b.Op1("Transpose", {dw}, {A::Ints("perm", {1, 0})}));  // last
  auto fused = FuseAndCompare(g);
  ASSERT_EQ(fused->nodes().size(), 5u);
  EXPECT_EQ(fused->nodes()[0]->op_type(), "FusedMatMul");
}

TEST(FuseMatMulModels, GptMini) {
  CheckModel("gpt_mini.onnx", DType::kF32, 1e-5, 12);
  CheckModel("gpt_mini.onnx", DType::kBF16, 2e-2, 12);
}

TEST(FuseMatMulModels, Mlp) {
  CheckModel("mlp.onnx", DType::kF32, 1e-5, 2);  // fc1 + Relu, fc2 + Relu; the logits Gemm stays
  CheckModel("mlp.onnx", DType::kBF16, 1e-2, 2);
}

// Every Transpose of gpt_mini's attention is read or written in place.
TEST(FuseMatMulModels, GptMiniAttentionHasNoTransposes) {
  auto g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/gpt_mini.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(OptimizeForInference(**g, CpuBackend().target()).ok());
  EXPECT_EQ(Count(**g, "Transpose"), 0);
  EXPECT_EQ(Count(**g, "MatMul"), 1);  // the logits: a graph output with nothing to fold
}

// ---- the training step's variant, on the differentiated graph ------------------------------

// gpt_mini differentiated (forward fusions, loss, autodiff as the training step runs them), then
// the training fuse_matmul: the attention's forward and backward Transposes (autodiff's
// transposes of forward transposes compose) are read in place, and every gradient is unchanged.
TEST(FuseMatMulTraining, GptMiniGradientsUnchangedAndTransposesFolded) {
  auto model = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/gpt_mini.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  GradientGraphOptions opt;
  opt.autodiff.evaluator = &EvaluateOnHost;
  opt.loss.kind = "cross_entropy";
  opt.loss.class_axis = -1;
  auto g = BuildGradientGraph(**model, opt);
  ASSERT_TRUE(g.ok()) << g.status();
  std::unique_ptr<Graph> fused = (*g)->Clone();
  auto changed = MakeFuseMatMulTrainingPass()->Run(*fused);
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_TRUE(*changed);
  auto cleanup = CreatePassByName("cleanup");  // drops the Transposes no one reads any more
  ASSERT_TRUE(cleanup.ok());
  ASSERT_TRUE((*cleanup)->Run(*fused).ok());
  ASSERT_TRUE(Verify(*fused).ok()) << Verify(*fused);
  const int before = Count(**g, "Transpose"), after = Count(*fused, "Transpose");
  EXPECT_EQ(before, 24);  // 8 forward, 16 backward
  EXPECT_LE(after, 4) << "of " << before;
  EXPECT_GE(Count(*fused, "FusedMatMul"), 20);
  auto feeds = Feeds(**model, 4);
  Tensor labels(DType::kI64, {4, 32});
  for (int64_t i = 0; i < labels.numel(); ++i) labels.data_as<int64_t>()[i] = (i * 7) % 64;
  feeds["labels"] = labels;
  ExpectClose(RunGraph(*fused, feeds), RunGraph(**g, feeds), 1e-5);
}

// A Relu stays apart in training (oneDNN's relu post-op turns NaN into 0); bias still folds.
TEST(FuseMatMulTraining, ReluStaysApart) {
  Mlp m;
  BuildLinear(m, "Relu", false);
  m.b.graph().AddOutput(m.y);
  auto changed = MakeFuseMatMulTrainingPass()->Run(m.b.graph());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(Count(m.b.graph(), "Relu"), 1);
  ASSERT_EQ(Count(m.b.graph(), "FusedMatMul"), 1);
  EXPECT_EQ(Find(m.b.graph(), "FusedMatMul")->attr_string("activation", ""), "");
}

}  // namespace
}  // namespace mixtrain
