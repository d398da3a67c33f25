// The canonicalize pass's rewrite of Gathers at constant scalar indices into one Split (torch's
// MultiheadAttention selects q, k and v so from its stacked projection): the values stay, the
// gradient becomes one Concat instead of a zero-filled GatherGrad per select and their sum, and
// the rewrite leaves alone what it cannot prove equal or cheaper.
#include <functional>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "graph/shape_inference.h"
#include "graph/verifier.h"
#include "passes/pass_registry.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using inference_test::Count;
using A = Attribute;

Value* Input(G& b, const char* name, DType t, std::vector<Dim> dims) {
  Value* v = b.graph().AddValue(name, t, Shape(std::move(dims)));
  b.graph().AddInput(v);
  return v;
}

Value* Scalar(G& b, int64_t k) { return b.IntsShaped({}, {k}); }

void Canonicalize(Graph& g) {
  ASSERT_TRUE(InferShapes(g).ok());
  auto pass = CreatePassByName("canonicalize");
  ASSERT_TRUE(pass.ok()) << pass.status();
  auto changed = (*pass)->Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  absl::Status v = Verify(g);
  ASSERT_TRUE(v.ok()) << v;
}

// stacked = x * W, [3, 2, 4]; q, k, v = stacked[0], stacked[1], stacked[-1]; returns q * k + v.
Value* BuildQkv(G& b) {
  Value* x = Input(b, "x", DType::kF32, {Dim(3), Dim(2), Dim(4)});
  Value* w = b.Param("W", {3, 2, 4}, 5);
  Value* stacked = b.Op1("Mul", {x, w});
  Value* q = b.Op1("Gather", {stacked, Scalar(b, 0)});
  Value* k = b.Op1("Gather", {stacked, Scalar(b, 1)});
  Value* v = b.Op1("Gather", {stacked, Scalar(b, -1)});
  return b.Op1("Add", {b.Op1("Mul", {q, k}), v});
}

TEST(CanonicalizeGathers, ConstantSelectsBecomeOneSplitWithTheSameValues) {
  G b;
  b.graph().AddOutput(BuildQkv(b));
  Graph& g = b.graph();
  ASSERT_TRUE(InferShapes(g).ok());
  std::unique_ptr<Graph> c = g.Clone();
  Canonicalize(*c);
  EXPECT_EQ(Count(*c, "Gather"), 0);
  EXPECT_EQ(Count(*c, "Split"), 1);
  EXPECT_EQ(Count(*c, "Squeeze"), 3);
  auto feeds = inference_test::Feeds(g, 1);
  inference_test::ExpectClose(inference_test::RunGraph(*c, feeds), inference_test::RunGraph(g, feeds), 0);
}

TEST(CanonicalizeGathers, GradientIsOneConcatAndMatchesFiniteDifferences) {
  G b;
  Value* out = BuildQkv(b);
  Graph& g = b.graph();
  gradcheck::AppendWeightedSumLoss(b, {out});
  if (HasFatalFailure()) return;
  Canonicalize(g);
  ASSERT_EQ(Count(g, "Split"), 1);
  auto feeds = inference_test::Feeds(g, 1);
  gradcheck::CheckGraph(g, feeds, 1e-2f, 5e-3f);
  EXPECT_EQ(Count(g, "GatherGrad"), 0);
  EXPECT_EQ(Count(g, "Concat"), 1);
}

// Each graph keeps its Gathers: one select only; another reader of the stacked tensor; an index
// fed at run time; selects along different axes; selects covering less than half the axis; a
// select that is a graph output. Every other select feeds a Neg, so only the named reason stops it.
TEST(CanonicalizeGathers, LeavesAloneWhatItCannotRewrite) {
  struct Case {
    const char* name;
    int dim0;
    std::function<void(G&, Value*)> build;  // reads the stacked [dim0, 4, 4] tensor
  };
  auto out = [](G& b, Value* v) { b.graph().AddOutput(b.Op1("Neg", {v})); };
  const std::vector<Case> cases = {
      {"one select", 3, [&](G& b, Value* s) { out(b, b.Op1("Gather", {s, Scalar(b, 1)})); }},
      {"another reader", 2,
       [&](G& b, Value* s) {
         out(b, b.Op1("Gather", {s, Scalar(b, 0)}));
         out(b, b.Op1("Gather", {s, Scalar(b, 1)}));
         out(b, b.Op1("ReduceSum", {s}));
       }},
      {"fed index", 2,
       [&](G& b, Value* s) {
         Value* i = Input(b, "i", DType::kI64, {});
         out(b, b.Op1("Gather", {s, i}));
         out(b, b.Op1("Gather", {s, Scalar(b, 1)}));
       }},
      {"two axes", 4,
       [&](G& b, Value* s) {
         out(b, b.Op1("Gather", {s, Scalar(b, 0)}));
         out(b, b.Op1("Gather", {s, Scalar(b, 1)}, {A::Int("axis", 1)}));
       }},
      {"a quarter of the axis", 8,
       [&](G& b, Value* s) {
         out(b, b.Op1("Gather", {s, Scalar(b, 0)}));
         out(b, b.Op1("Gather", {s, Scalar(b, 1)}));
       }},
      {"select is a graph output", 2,
       [&](G& b, Value* s) {
         b.graph().AddOutput(b.Op1("Gather", {s, Scalar(b, 0)}));
         out(b, b.Op1("Gather", {s, Scalar(b, 1)}));
       }},
      {"indices tensor", 2,
       [&](G& b, Value* s) {
         out(b, b.Op1("Gather", {s, b.Ints({0})}));
         out(b, b.Op1("Gather", {s, Scalar(b, 1)}));
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    G b;
    Value* x = Input(b, "x", DType::kF32, {Dim(c.dim0), Dim(4), Dim(4)});
    Value* s = b.Op1("Mul", {x, b.Param("W", {c.dim0, 4, 4}, 3)});
    c.build(b, s);
    const int gathers = Count(b.graph(), "Gather");
    Canonicalize(b.graph());
    EXPECT_EQ(Count(b.graph(), "Gather"), gathers);
    EXPECT_EQ(Count(b.graph(), "Split"), 0);
  }
  // The control: the same builder with two constant selects of a 2-long axis does rewrite.
  G b;
  Value* x = Input(b, "x", DType::kF32, {Dim(2), Dim(4), Dim(4)});
  Value* s = b.Op1("Mul", {x, b.Param("W", {2, 4, 4}, 3)});
  out(b, b.Op1("Gather", {s, Scalar(b, 0)}));
  out(b, b.Op1("Gather", {s, Scalar(b, 1)}));
  Canonicalize(b.graph());
  EXPECT_EQ(Count(b.graph(), "Gather"), 0);
  EXPECT_EQ(Count(b.graph(), "Split"), 1);
}

}  // namespace
}  // namespace mixtrain

namespace mixtrain {
namespace {

// An exporter that merges equal initializers (TorchScript in eval mode: every fresh BatchNorm's
// zeros and ones) reads one tensor through Identities that carry each module's own name. Each
// BatchNorm keeps statistics of its own under that name, so training updates each one; an
// Identity with any other reader is bypassed as before.
TEST(CanonicalizeBatchNormStatistics, MergedStatisticsBecomeOneCopyPerBatchNorm) {
  G b(15);
  Graph& g = b.graph();
  Value* x = Input(b, "x", DType::kF32, {Dim(2), Dim(3), Dim(4), Dim(4)});
  Value* mean = b.Param("bn1.running_mean", {3}, std::vector<float>{0, 0, 0});
  Value* var = b.Param("bn1.running_var", {3}, std::vector<float>{1, 1, 1});
  Value* mean2 = b.Op1("Identity", {mean});
  Value* var2 = b.Op1("Identity", {var});
  Value* shared = b.Op1("Identity", {var});  // read by a BatchNorm and by a Mul: bypassed
  Value* y1 = b.Op1("BatchNormalization", {x, b.Param("bn1.weight", {3}, 1), b.Param("bn1.bias", {3}, 2), mean, var});
  Value* y2 = b.Op1("BatchNormalization", {y1, b.Param("bn2.weight", {3}, 3), b.Param("bn2.bias", {3}, 4), mean2, var2});
  Value* y3 = b.Op1("BatchNormalization", {y2, b.Param("bn3.weight", {3}, 5), b.Param("bn3.bias", {3}, 6), mean, shared});
  g.AddOutput(b.Op1("Mul", {y3, b.Op1("Unsqueeze", {b.Op1("Unsqueeze", {shared, b.IntsShaped({1}, {1})}),
                                                    b.IntsShaped({1}, {1})})}));
  const std::string mean2_name = mean2->name, var2_name = var2->name;
  Canonicalize(g);
  const Node* bn2 = y2->producer;
  ASSERT_NE(bn2, nullptr);
  ASSERT_TRUE(bn2->input(3)->is_initializer());
  EXPECT_EQ(bn2->input(3)->name, mean2_name);
  EXPECT_EQ(bn2->input(4)->name, var2_name);
  EXPECT_NE(bn2->input(3), mean);
  EXPECT_NE(bn2->input(3)->initializer->data(), mean->initializer->data());  // its own tensor
  EXPECT_EQ(bn2->input(4)->initializer->data_as<float>()[2], 1.0f);
  const Node* bn3 = y3->producer;
  EXPECT_EQ(bn3->input(3), mean);  // read directly: one module's statistics
  EXPECT_EQ(bn3->input(4), var);   // the Identity with another reader went
  EXPECT_EQ(Count(g, "Identity"), 0);
}

}  // namespace
}  // namespace mixtrain
