// Canonicalization's rewrites of what exporters write for their own runtime (passes/
// canonicalize_rules.h): Constant nodes into initializers, sequences into tensors (the same
// values as the sequence ops' definitions, worked out here by hand), and random-mask dropout into
// one Dropout with the ratio the mask keeps, leaving alone every variant it cannot prove.
#include <string>
#include <vector>

#include "kernels/host_evaluator.h"
#include "gtest/gtest.h"
#include "graph/shape_inference.h"
#include "graph/verifier.h"
#include "passes/canonicalize.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using inference_test::Count;
using inference_test::Find;
using A = Attribute;

Value* Input(G& b, const char* name, std::vector<int64_t> dims) {
  Value* v = b.graph().AddValue(name, DType::kF32, Shape::Of(dims));
  b.graph().AddInput(v);
  return v;
}

// A float scalar as a Constant node, as exporters write one.
Value* ConstantNode(G& b, float v) {
  return b.Op1("Constant", {}, {A::TensorAttr("value", Tensor::Scalar(v))});
}

CanonicalizeReport Canonicalize(Graph& g) {
  CanonicalizeReport report;
  CanonicalizeOptions o;
  o.evaluator = &EvaluateOnHost;
  o.params.freeze = "c_.*";  // G's float constants
  o.report = &report;
  EXPECT_TRUE(InferShapes(g).ok());
  auto changed = MakeCanonicalizePass(o)->Run(g);
  EXPECT_TRUE(changed.ok()) << changed.status();
  absl::Status v = Verify(g);
  EXPECT_TRUE(v.ok()) << v;
  return report;
}

std::vector<float> Values(const Tensor& t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<float>(t.GetDouble(i)));
  return v;
}

TEST(CanonicalizeConstants, ConstantNodesBecomeInitializersCountedAsFolded) {
  G b;
  Value* x = Input(b, "x", {2, 3});
  b.graph().AddOutput(b.Op1("Mul", {x, ConstantNode(b, 0.5f)}));
  const CanonicalizeReport r = Canonicalize(b.graph());
  EXPECT_EQ(Count(b.graph(), "Constant"), 0);
  EXPECT_EQ(r.folded_nodes, 1);
  const Node* mul = Find(b.graph(), "Mul");
  ASSERT_NE(mul, nullptr);
  ASSERT_TRUE(mul->input(1)->is_initializer());
  EXPECT_EQ(mul->input(1)->initializer->GetDouble(0), 0.5);
}

// x [3, 2] -> SplitToSequence(keepdims=0) -> SequenceAt(-1), SequenceLength; a, b -> SequenceConstruct ->
// ConcatFromSequence(axis 0, new_axis 1) (stack) and (axis 1) (cat).
TEST(CanonicalizeSequences, BecomeSplitsAndConcatsWithTheSequenceOpsValues) {
  G b;
  Value* x = Input(b, "x", {3, 2});
  Value* seq = b.Op1("SplitToSequence", {x}, {A::Int("axis", 0), A::Int("keepdims", 0)});
  b.graph().AddOutput(b.Op1("Neg", {b.Op1("SequenceAt", {seq, b.IntsShaped({}, {-1})})}));
  Value* len = b.Op1("SequenceLength", {seq});
  b.graph().AddOutput(b.Op1("Add", {len, b.IntsShaped({}, {0})}));
  Value* a = Input(b, "a", {2, 2});
  Value* c = Input(b, "c", {2, 2});
  Value* ac = b.Op1("SequenceConstruct", {a, c});
  b.graph().AddOutput(b.Op1("Neg", {b.Op1("ConcatFromSequence", {ac}, {A::Int("axis", 0), A::Int("new_axis", 1)})}));
  b.graph().AddOutput(b.Op1("Neg", {b.Op1("ConcatFromSequence", {ac}, {A::Int("axis", 1)})}));
  Graph& g = b.graph();
  Canonicalize(g);
  for (const char* op : {"SplitToSequence", "SequenceAt", "SequenceLength", "SequenceConstruct", "ConcatFromSequence"})
    EXPECT_EQ(Count(g, op), 0) << op;
  std::map<std::string, Tensor> feeds;
  feeds["x"] = Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  feeds["a"] = Tensor::FromVector<float>(DType::kF32, {2, 2}, {1, 2, 3, 4});
  feeds["c"] = Tensor::FromVector<float>(DType::kF32, {2, 2}, {5, 6, 7, 8});
  std::vector<Tensor> out = inference_test::RunGraph(g, feeds);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].dims(), std::vector<int64_t>({2}));  // the last row, squeezed
  EXPECT_EQ(Values(out[0]), std::vector<float>({-5, -6}));
  EXPECT_EQ(out[1].GetInt(0), 3);
  EXPECT_EQ(out[2].dims(), std::vector<int64_t>({2, 2, 2}));  // stack
  EXPECT_EQ(Values(out[2]), std::vector<float>({-1, -2, -3, -4, -5, -6, -7, -8}));
  EXPECT_EQ(out[3].dims(), std::vector<int64_t>({2, 4}));  // cat along axis 1
  EXPECT_EQ(Values(out[3]), std::vector<float>({-1, -2, -5, -6, -3, -4, -7, -8}));
}

// A sequence read by a position fed at run time cannot become pieces: nothing changes.
TEST(CanonicalizeSequences, LeavesAloneASequenceReadAtAFedPosition) {
  G b;
  Value* x = Input(b, "x", {3, 2});
  Value* i = b.graph().AddValue("i", DType::kI64, Shape::Of({}));
  b.graph().AddInput(i);
  Value* seq = b.Op1("SplitToSequence", {x}, {A::Int("axis", 0)});
  b.graph().AddOutput(b.Op1("Neg", {b.Op1("SequenceAt", {seq, i})}));
  b.graph().AddOutput(b.Op1("Neg", {b.Op1("SequenceAt", {seq, b.IntsShaped({}, {0})})}));
  Canonicalize(b.graph());
  EXPECT_EQ(Count(b.graph(), "SplitToSequence"), 1);
  EXPECT_EQ(Count(b.graph(), "SequenceAt"), 2);
  EXPECT_EQ(Count(b.graph(), "Split"), 0);
}

// The dropout mask variants: `mask` builds keep = Less/Greater(RandomUniformLike(x), c) cast to
// float, `apply` multiplies it into x with its scalars. Returns the ratio of the Dropout the graph
// ends with, or -1 when it keeps its RandomUniformLike.
double RatioAfterCanonicalize(const std::function<Value*(G&, Value* x, Value* keep)>& apply, const char* cmp,
                              float c, std::vector<A> rand_attrs = {}) {
  G b(18);
  Value* x = Input(b, "x", {4, 8});
  Value* r = b.Op1("RandomUniformLike", {x}, std::move(rand_attrs));
  Value* keep = b.Op1("Cast", {b.Op1(cmp, {r, ConstantNode(b, c)})}, {A::Int("to", 1)});
  b.graph().AddOutput(b.Op1("Neg", {apply(b, x, keep)}));
  Graph& g = b.graph();
  Canonicalize(g);
  if (Count(g, "RandomUniformLike") > 0) return -1;
  EXPECT_EQ(Count(g, "Dropout"), 1);
  EXPECT_EQ(Count(g, "Less") + Count(g, "Greater") + Count(g, "Mul") + Count(g, "Div"), 0);
  const Node* d = Find(g, "Dropout");
  if (d == nullptr || d->input(1) == nullptr || !d->input(1)->is_initializer()) return -2;
  EXPECT_TRUE(d->input(2) != nullptr && d->input(2)->is_initializer() && d->input(2)->initializer->GetInt(0) == 1)
      << "training_mode";
  EXPECT_EQ(d->input(0)->name, "x");
  return d->input(1)->initializer->GetDouble(0);
}

TEST(CanonicalizeDropout, RandomMasksBecomeDropoutWithTheRatioTheyDrop) {
  // dynamo's bernoulli for an in-place nn.Dropout(0.2): x * (Cast(r < 0.8) / 0.8)
  EXPECT_NEAR(RatioAfterCanonicalize([](G& b, Value* x, Value* k) {
                return b.Op1("Mul", {x, b.Op1("Div", {k, ConstantNode(b, 0.8f)})});
              }, "Less", 0.8f), 0.2, 1e-6);
  // torch's dropout decomposition: (Cast(r > 0.3) * x) * (1 / 0.7)
  EXPECT_NEAR(RatioAfterCanonicalize([](G& b, Value* x, Value* k) {
                return b.Op1("Mul", {b.Op1("Mul", {k, x}), ConstantNode(b, 1.0f / 0.7f)});
              }, "Greater", 0.3f), 0.3, 1e-6);
  // Where(r < 0.9, x / 0.9, 0), the mask uncast
  EXPECT_NEAR(RatioAfterCanonicalize([](G& b, Value* x, Value* k) {
                Value* mask = k->producer->input(0);  // the comparison, before RatioAfterCanonicalize's Cast
                return b.Op1("Where", {mask, b.Op1("Div", {x, ConstantNode(b, 0.9f)}), ConstantNode(b, 0.0f)});
              }, "Less", 0.9f), 0.1, 1e-6);
  // scale first, mask after: (x / 0.5) * Cast(r < 0.5) is not on the mask's path: left alone
  EXPECT_EQ(RatioAfterCanonicalize([](G& b, Value* x, Value* k) {
              return b.Op1("Mul", {b.Op1("Div", {x, ConstantNode(b, 0.5f)}), k});
            }, "Less", 0.5f), -1);
}

TEST(CanonicalizeDropout, LeavesAloneWhatIsNotDropout) {
  auto scaled = [](float s) {
    return [s](G& b, Value* x, Value* k) { return b.Op1("Mul", {x, b.Op1("Mul", {k, ConstantNode(b, s)})}); };
  };
  // The scale is not 1 / keep: x * mask * 2 with keep 0.8 is no dropout.
  EXPECT_EQ(RatioAfterCanonicalize(scaled(2.0f), "Less", 0.8f), -1);
  // Not uniform over [0, 1).
  EXPECT_EQ(RatioAfterCanonicalize(scaled(1.25f), "Less", 0.8f, {A::Float("high", 2.0f)}), -1);
  // Where(mask, x / 0.8, 1): the dropped elements are not 0.
  EXPECT_EQ(RatioAfterCanonicalize([](G& b, Value* x, Value* k) {
              Value* mask = k->producer->input(0);
              return b.Op1("Where", {mask, b.Op1("Div", {x, ConstantNode(b, 0.8f)}), ConstantNode(b, 1.0f)});
            }, "Less", 0.8f), -1);
  // The mask read twice.
  EXPECT_EQ(RatioAfterCanonicalize([](G& b, Value* x, Value* k) {
              b.graph().AddOutput(b.Op1("Neg", {k}));
              return b.Op1("Mul", {x, b.Op1("Div", {k, ConstantNode(b, 0.8f)})});
            }, "Less", 0.8f), -1);
  // The mask times x times another tensor: y = x * mask / q * w is no dropout of x alone.
  EXPECT_EQ(RatioAfterCanonicalize([](G& b, Value* x, Value* k) {
              Value* w = b.ConstF({4, 8}, std::vector<float>(32, 2.0f));
              return b.Op1("Mul", {b.Op1("Mul", {b.Op1("Mul", {x, k}), w}), ConstantNode(b, 1.25f)});
            }, "Less", 0.8f), -1);
}

}  // namespace
}  // namespace mixtrain
