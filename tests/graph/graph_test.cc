// Graph IR: value/node links, topological sort, clone.
#include "graph/graph.h"

#include <cmath>
#include <limits>

#include "graph/tensor.h"

#include <gtest/gtest.h>

namespace mixtrain {
namespace {

TEST(GraphTest, LinksAndTopoSort) {
  Graph g;
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3}));
  g.AddInput(x);
  Value* y = g.AddValue("y");
  Value* z = g.AddValue("z");
  // Add in reverse order: z = Relu(y), y = Neg(x).
  Node* relu = g.AddNode("Relu", {y}, {z}, "relu");
  Node* neg = g.AddNode("Neg", {x}, {y}, "neg");
  g.AddOutput(z);
  EXPECT_EQ(y->producer, neg);
  ASSERT_EQ(x->consumers.size(), 1u);
  EXPECT_EQ(x->consumers[0], neg);
  ASSERT_TRUE(g.TopoSort().ok());
  EXPECT_EQ(g.nodes()[0].get(), neg);
  EXPECT_EQ(g.nodes()[1].get(), relu);
}

TEST(GraphTest, CycleIsReported) {
  Graph g;
  Value* a = g.AddValue("a");
  Value* b = g.AddValue("b");
  g.AddNode("Neg", {b}, {a}, "n1");
  g.AddNode("Neg", {a}, {b}, "n2");
  absl::Status s = g.TopoSort();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cycle"), std::string::npos);
}

TEST(GraphTest, ReplaceAllUsesAndRemove) {
  Graph g;
  Value* x = g.AddValue("x");
  g.AddInput(x);
  Node* id = g.AddNode("Identity", {x}, 1, "id");
  Node* neg = g.AddNode("Neg", {id->output(0)}, 1, "neg");
  g.AddOutput(neg->output(0));
  g.ReplaceAllUsesWith(id->output(0), x);
  EXPECT_EQ(neg->input(0), x);
  g.RemoveNode(id);
  EXPECT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.FindValue("id"), nullptr);
  EXPECT_EQ(x->consumers.size(), 1u);
}

TEST(GraphTest, CloneIsDeep) {
  Graph g;
  Value* w = g.AddInitializer("w", Tensor::Scalar(2.0f));
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({1}));
  g.AddInput(x);
  Node* mul = g.AddNode("Mul", {x, w}, 1, "mul");
  mul->SetAttr(Attribute::Int("k", 3));
  g.AddOutput(mul->output(0));
  auto c = g.Clone();
  ASSERT_EQ(c->num_nodes(), 1u);
  const Node* cm = c->nodes()[0].get();
  EXPECT_NE(cm, mul);
  EXPECT_EQ(cm->attr_int("k", 0), 3);
  EXPECT_EQ(cm->input(1), c->FindValue("w"));
  EXPECT_TRUE(c->FindValue("w")->initializer->Identical(*w->initializer));
  EXPECT_EQ(c->UniqueName("mul"), "mul_1");
}

}  // namespace
}  // namespace mixtrain

namespace mixtrain {
namespace {

// Float contents read as ints (a fuzzed Reshape whose shape is a float tensor with NaN: the
// conversion was undefined behavior): NaN is 0, values past int64 saturate, the rest truncate.
TEST(TensorTest, GetIntOfFloatsIsDefinedForEveryValue) {
  Tensor t = Tensor::FromVector<float>(DType::kF32, {6}, {std::nanf(""), INFINITY, -INFINITY, 1e30f, -2.75f, 7.5f});
  EXPECT_EQ(t.ToInt64Vector(), (std::vector<int64_t>{0, std::numeric_limits<int64_t>::max(),
                                                     std::numeric_limits<int64_t>::min(),
                                                     std::numeric_limits<int64_t>::max(), -2, 7}));
}

}  // namespace
}  // namespace mixtrain
