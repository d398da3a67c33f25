// The fold_views pass: attention's head split as torch's nn.MultiheadAttention exports it folds
// to one transpose per operand, each next to its MatMul (and none after fuse_matmul), computing
// the same values, with a symbolic batch; gradients through the folded graph match central
// differences; chains it must leave alone (dims that do not factor, a graph output inside the
// chain, an intermediate shape read by something that outlives the chain) stay as they were.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/shape_inference.h"
#include "passes/pass_registry.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using inference_test::Count;
using A = Attribute;

constexpr int64_t kT = 5, kH = 2, kD = 3, kE = kH * kD;  // tokens, heads, head dim, model dim

struct Attention {
  G b{17};
  Value* out = nullptr;
};

// qkv [T, N, 3E] (N = `batch`: a number, or the symbol "N") split into heads the way torch's
// MultiheadAttention exports it, scaled, softmax(Q K^T) V, merged back to [T, N, E]. `shape_reader`:
// K's head view is also read by Shape -> Slice -> Concat for its own Reshape target (torch.export).
void BuildAttention(Attention& a, Dim batch, bool shape_reader) {
  Graph& g = a.b.graph();
  const bool symbolic = !batch.known();
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim(kT), batch, Dim(kE)}));
  g.AddInput(x);
  Value* w = a.b.Param("w", {kE, 3 * kE}, 3);
  Value* qkv = a.b.Op1("MatMul", {x, w});  // [T, N, 3E]
  const int64_t n = symbolic ? -1 : batch.value;
  Value* view = a.b.Op1("Reshape", {qkv, a.b.Ints({kT, n, 3, kE})});
  Value* unsq = a.b.Op1("Unsqueeze", {view, a.b.Ints({0})});
  Value* tr = a.b.Op1("Transpose", {unsq}, {A::Ints("perm", {3, 1, 2, 0, 4})});
  Value* sq = a.b.Op1("Squeeze", {tr, a.b.Ints({3})});
  std::vector<Value*> parts = a.b.Op("Split", {sq, a.b.Ints({1, 1, 1})}, {A::Int("axis", 0)}, 3);
  Value* scale = a.b.ConstF({1}, {0.7f});
  std::vector<Value*> heads;
  for (int i = 0; i < 3; ++i) {
    Value* p = a.b.Op1("Squeeze", {parts[i], a.b.Ints({0})});  // [T, N, E]
    Value* r = a.b.Op1("Reshape", {p, a.b.Ints({kT, symbolic ? -1 : n * kH, kD})});
    Value* t = a.b.Op1("Transpose", {r}, {A::Ints("perm", {1, 0, 2})});  // [N*H, T, d]
    Value* h = a.b.Op1("Reshape", {t, a.b.Ints({n, kH, kT, kD})});
    if (i == 1) {  // K^T through 3-D, as torch.export writes it
      Value* target = a.b.Ints({n, kH, kD, kT});
      if (shape_reader) {
        Value* s = a.b.Op1("Shape", {h});
        Value* lead = a.b.Op1("Slice", {s, a.b.Ints({0}), a.b.Ints({2})});
        target = a.b.Op1("Concat", {lead, a.b.Ints({kD, kT})}, {A::Int("axis", 0)});
      }
      Value* r3 = a.b.Op1("Reshape", {h, a.b.Ints({-1, kT, kD})});
      Value* t3 = a.b.Op1("Transpose", {r3}, {A::Ints("perm", {0, 2, 1})});
      h = a.b.Op1("Reshape", {t3, target});
    }
    if (i < 2) h = a.b.Op1("Mul", {h, scale});
    heads.push_back(h);
  }
  Value* scores = a.b.Op1("MatMul", {heads[0], heads[1]});  // [N, H, T, T]
  Value* probs = a.b.Op1("Softmax", {scores}, {A::Int("axis", -1)});
  Value* ctx = a.b.Op1("MatMul", {probs, heads[2]});  // [N, H, T, d]
  Value* merged = a.b.Op1("Transpose", {ctx}, {A::Ints("perm", {2, 0, 1, 3})});
  a.out = a.b.Op1("Reshape", {merged, a.b.Ints({kT, n, kE})});
  g.AddOutput(a.out);
}

std::unique_ptr<Graph> Fold(Graph& g) {
  return inference_test::PassAndCompare(g, "fold_views", DType::kF32, 1e-5);
}

// Every Transpose left reads straight into a MatMul, where fuse_matmul can take it as a perm.
void ExpectTransposesFeedMatMuls(const Graph& g) {
  for (const auto& n : g.nodes()) {
    if (n->op_type() != "Transpose") continue;
    const Value* y = n->output(0);
    ASSERT_EQ(y->consumers.size(), 1u) << n->name();
    const std::string& next = y->consumers[0]->op_type();
    const bool last = g.IsGraphOutput(y) || next == "Reshape";  // the merge back to [T, N, E]
    EXPECT_TRUE(next == "MatMul" || last) << n->name() << " feeds " << next;
  }
}

TEST(FoldViews, TorchAttentionHeadSplitWithSymbolicBatch) {
  for (bool shape_reader : {false, true}) {
    Attention a;
    BuildAttention(a, Dim::Symbol("N"), shape_reader);
    const int before = Count(a.b.graph(), "Transpose");
    EXPECT_EQ(before, 6);  // the qkv transpose, Q, K, V, K^T, and the merge
    auto folded = Fold(a.b.graph());
    // Q, K (the two transposes composed) and V: one each, plus the merge after the product.
    EXPECT_EQ(Count(*folded, "Transpose"), 3 + 1) << "shape reader " << shape_reader;
    EXPECT_EQ(Count(*folded, "Squeeze"), 0);
    EXPECT_EQ(Count(*folded, "Unsqueeze"), 0);
    EXPECT_EQ(Count(*folded, "Shape"), 0);
    ExpectTransposesFeedMatMuls(*folded);
    // The split reads the product's output in its own layout: no copy before it.
    for (const auto& n : folded->nodes())
      if (n->op_type() == "Split") EXPECT_NE(n->input(0)->producer->op_type(), "Transpose");
  }
}

// The inference pipeline then reads Q, K and V in place: no Transpose copies Q, K or V.
TEST(FoldViews, FuseMatMulThenReadsTheHeadsInPlace) {
  Attention a;
  BuildAttention(a, Dim::Symbol("N"), true);
  auto optimized = inference_test::PassAndCompare(a.b.graph(), "inference", DType::kF32, 1e-5);
  EXPECT_EQ(Count(*optimized, "Transpose"), 0);
  // Q K^T and P V take their operands' permutations (and the merge as perm_y).
  EXPECT_EQ(Count(*optimized, "FusedMatMul"), 2);
}

// Gradients of the weight through the folded graph (Split, Reshape, Transpose and Mul rules)
// against central differences.
TEST(FoldViews, GradientsThroughTheFoldedGraph) {
  Attention a;
  BuildAttention(a, Dim(2), false);
  Graph& g = a.b.graph();
  ASSERT_TRUE(InferShapes(g).ok());
  auto pass = CreatePassByName("fold_views");
  ASSERT_TRUE(pass.ok());
  auto changed = (*pass)->Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  g.mutable_outputs().clear();
  gradcheck::AppendWeightedSumLoss(a.b, {a.out});
  auto feeds = inference_test::Feeds(g, 2);
  feeds.erase("w");
  gradcheck::CheckGraph(g, feeds, 1e-2f, 2e-3f);
}

// Dims that do not factor into each other ([4, 6] -> [6, 4]) leave the chain as it was.
TEST(FoldViews, LeavesChainsThatDoNotFactor) {
  G b;
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim(4), Dim(6)}));
  g.AddInput(x);
  Value* r = b.Op1("Reshape", {x, b.Ints({6, 4})});
  Value* t = b.Op1("Transpose", {r}, {A::Ints("perm", {1, 0})});
  Value* y = b.Op1("Reshape", {t, b.Ints({24})});
  g.AddOutput(y);
  auto folded = Fold(g);
  EXPECT_EQ(folded->num_nodes(), 3u);
}

// A graph output inside the chain, or an intermediate shape that a graph output reads, keeps
// the chain; the same chain without them folds.
TEST(FoldViews, LeavesChainsWhoseInsidesAreUsed) {
  for (int variant = 0; variant < 3; ++variant) {
    G b;
    Graph& g = b.graph();
    Value* x = g.AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), Dim(4), Dim(6)}));
    g.AddInput(x);
    Value* r = b.Op1("Reshape", {x, b.Ints({-1, 4, 2, 3})});
    Value* t = b.Op1("Transpose", {r}, {A::Ints("perm", {0, 2, 1, 3})});  // [N, 2, 4, 3]
    Value* t2 = b.Op1("Transpose", {t}, {A::Ints("perm", {0, 1, 3, 2})});  // [N, 2, 3, 4]
    g.AddOutput(t2);
    if (variant == 1) g.AddOutput(t);
    if (variant == 2) g.AddOutput(b.Op1("Shape", {t}));
    auto folded = Fold(g);
    EXPECT_EQ(Count(*folded, "Transpose"), variant == 0 ? 1 : 2) << "variant " << variant;
  }
}

}  // namespace
}  // namespace mixtrain
