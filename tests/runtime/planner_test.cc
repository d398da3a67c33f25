// The planner and arena packing on small graphs built in C++ with the real CPU kernels: lifetimes
// packed without overlap, in-place reuse, plan-time folding of shape chains, zero-copy views, and
// plan-time errors that name the node.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "runtime/arena.h"
#include "runtime/planner.h"
#include "runtime/session.h"

namespace mixtrain {
namespace {

TEST(PackBuffers, DisjointLifetimesShareMemory) {
  ArenaLayout l = PackBuffers({{100, 0, 1}, {100, 2, 3}, {100, 1, 2}});
  EXPECT_EQ(l.offsets[0], l.offsets[1]);  // never alive together
  EXPECT_NE(l.offsets[2], l.offsets[0]);  // overlaps both
  EXPECT_EQ(l.total_bytes, 256u);
}

TEST(PackBuffers, AlignsAndNeverOverlapsLiveBuffers) {
  std::vector<BufferLifetime> b = {{1, 0, 5}, {1, 0, 5}, {300, 2, 3}, {64, 4, 6}, {0, 1, 1}};
  ArenaLayout l = PackBuffers(b);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(l.offsets[i] % 64, 0u);
    for (size_t j = i + 1; j < b.size(); ++j) {
      bool live_together = b[i].first <= b[j].last && b[j].first <= b[i].last;
      bool disjoint = l.offsets[i] + b[i].bytes <= l.offsets[j] || l.offsets[j] + b[j].bytes <= l.offsets[i];
      if (live_together) EXPECT_TRUE(disjoint) << i << " and " << j;
    }
  }
  EXPECT_EQ(l.total_bytes, 64u + 64 + 320);
}

PlanRequest Request(const Graph& g, std::vector<int64_t> x_dims) {
  PlanRequest r;
  r.feeds.resize(g.inputs().size());
  r.feeds[0] = {true, DType::kF32, std::move(x_dims), nullptr};
  for (const Value* v : g.outputs()) r.fetches.push_back(v->name);
  return r;
}

TEST(Planner, ElementwiseChainRunsInPlace) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), 3, 4}));
  g.AddInput(x);
  Value* a = g.AddNode("Relu", {x}, 1, "r1")->output(0);
  Value* b = g.AddNode("Sigmoid", {a}, 1, "r2")->output(0);
  Value* c = g.AddNode("Tanh", {b}, 1, "r3")->output(0);
  g.AddOutput(c);
  std::vector<int> wants;
  auto plan = BuildPlan(g, Request(g, {2, 3, 4}), &wants);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const PlanStats& s = (*plan)->stats;
  EXPECT_EQ(s.steps, 3);
  // r1 cannot overwrite the caller's x; r2 and r3 overwrite their dying inputs.
  EXPECT_EQ(s.inplace_outputs, 2);
  EXPECT_EQ(s.peak_planned_bytes, 128u);  // 96 bytes, aligned
  EXPECT_EQ(s.naive_bytes, 3 * 128u);
}

TEST(Planner, NoInPlaceWhileInputIsStillRead) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape({4}));
  g.AddInput(x);
  Value* a = g.AddNode("Relu", {x}, 1, "a")->output(0);
  Value* b = g.AddNode("Exp", {a}, 1, "b")->output(0);  // `a` is read again below
  Value* c = g.AddNode("Add", {a, b}, 1, "c")->output(0);
  g.AddOutput(c);
  std::vector<int> wants;
  auto plan = BuildPlan(g, Request(g, {4}), &wants);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ExecutionPlan& p = **plan;
  EXPECT_EQ(p.stats.inplace_outputs, 1);  // only c over a (a dies at c)
  int sa = p.steps[0].outputs[0], sb = p.steps[1].outputs[0], sc = p.steps[2].outputs[0];
  EXPECT_NE(p.slots[sa].offset, p.slots[sb].offset);
  EXPECT_EQ(p.slots[sc].offset, p.slots[sa].offset);
}

// x [6, 37] -> Cast to `dt` (the logits) -> SoftmaxCrossEntropyLossGrad(1, logits, t); the logits
// also a graph output when `keep_logits`, so the gradient cannot take their buffer.
void BuildLossGradient(Graph& g, DType dt, bool keep_logits) {
  g.opset_imports[""] = 17;
  g.opset_imports["ai.mixtrain"] = 1;
  Value* x = g.AddValue("x", DType::kF32, Shape({6, 37}));
  Value* t = g.AddValue("t", DType::kI64, Shape({6}));
  g.AddInput(x);
  g.AddInput(t);
  Value* dl = g.AddInitializer("dl", Tensor::Scalar(1.0f));
  Node* cast = g.AddNode("Cast", {x}, 1, "logits");
  cast->SetAttr(Attribute::Int("to", dt == DType::kF32 ? 1 : 16));
  Value* logits = cast->output(0);
  logits->dtype = dt;
  logits->shape = Shape({6, 37});
  Value* d = g.AddNode("SoftmaxCrossEntropyLossGrad", {dl, logits, t}, 1, "grad", "ai.mixtrain")->output(0);
  d->dtype = dt;
  d->shape = Shape({6, 37});
  g.AddOutput(d);
  if (keep_logits) g.AddOutput(logits);
}

// The cross-entropy gradient writes over its dying logits (kOpOverwritesInput1: a language
// model's logits and their gradient are the step's two largest buffers), in fp32 and in bf16,
// with the values of a step where the logits stay alive.
TEST(Planner, LossGradientOverwritesItsLogits) {
  std::vector<float> xs(6 * 37);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 101) / 17.0f - 3.0f;
  const std::map<std::string, Tensor> feeds{{"x", Tensor::FromVector<float>(DType::kF32, {6, 37}, xs)},
                                            {"t", Tensor::FromVector<int64_t>(DType::kI64, {6}, {0, 5, 36, 1, 2, 3})}};
  for (DType dt : {DType::kF32, DType::kBF16}) {
    std::vector<Tensor> grads;
    for (bool keep_logits : {false, true}) {
      Graph g;
      BuildLossGradient(g, dt, keep_logits);
      PlanRequest r;
      r.feeds = {{true, DType::kF32, {6, 37}, nullptr}, {true, DType::kI64, {6}, nullptr}};
      for (const Value* v : g.outputs()) r.fetches.push_back(v->name);
      std::vector<int> wants;
      auto plan = BuildPlan(g, r, &wants);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ((*plan)->stats.inplace_outputs, keep_logits ? 0 : 1) << DTypeName(dt);
      auto session = Session::Create(g);
      ASSERT_TRUE(session.ok()) << session.status();
      auto out = (*session)->Run(feeds, {g.outputs()[0]->name});
      ASSERT_TRUE(out.ok()) << out.status();
      grads.push_back((*out)[0]);
    }
    // The same gradient either way.
    ASSERT_EQ(grads[0].nbytes(), grads[1].nbytes());
    EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].nbytes()), 0) << DTypeName(dt);
  }
}

// x [rows, n] -> Cast to `dt` -> Exp (the incoming gradient dY, in the arena) and Softmax (Y);
// `op`(dY, Y) -> dX, with dY also a graph output when `keep_dy`, so dX cannot take its buffer.
void BuildRowGradient(Graph& g, const std::string& op, DType dt, int64_t rows, int64_t n, bool keep_dy) {
  g.opset_imports[""] = 17;
  g.opset_imports["ai.mixtrain"] = 1;
  Value* x = g.AddValue("x", DType::kF32, Shape({rows, n}));
  g.AddInput(x);
  Node* cast = g.AddNode("Cast", {x}, 1, "low");
  cast->SetAttr(Attribute::Int("to", dt == DType::kF32 ? 1 : 16));
  Value* xl = cast->output(0);
  xl->dtype = dt;
  xl->shape = Shape({rows, n});
  Value* dy = g.AddNode("Exp", {xl}, 1, "dy")->output(0);
  Value* y = g.AddNode("Softmax", {xl}, 1, "y")->output(0);
  for (Value* v : {dy, y}) v->dtype = dt, v->shape = Shape({rows, n});
  Value* dx = g.AddNode(op, {dy, y}, 1, "grad", "ai.mixtrain")->output(0);
  dx->dtype = dt;
  dx->shape = Shape({rows, n});
  g.AddOutput(dx);
  if (keep_dy) g.AddOutput(dy);
}

// GeluGrad and SoftmaxGrad write dX over their dying dY (kOpOverwritesInput0: in a transformer's
// backward the MLP's and the attention's largest buffers), in fp32 and bf16, for rows the AVX-512
// kernel holds in registers (37) and longer ones (300), with the values of a step where dY stays.
TEST(Planner, RowGradientsOverwriteTheirIncomingGradient) {
  for (const std::string op : {"GeluGrad", "SoftmaxGrad"})
    for (DType dt : {DType::kF32, DType::kBF16})
      for (int64_t n : {37, 300}) {
        const int64_t rows = 6;
        std::vector<float> xs(static_cast<size_t>(rows * n));
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 101) / 17.0f - 3.0f;
        const std::map<std::string, Tensor> feeds{{"x", Tensor::FromVector<float>(DType::kF32, {rows, n}, xs)}};
        std::vector<Tensor> grads;
        for (bool keep_dy : {false, true}) {
          Graph g;
          BuildRowGradient(g, op, dt, rows, n, keep_dy);
          PlanRequest r;
          r.feeds = {{true, DType::kF32, {rows, n}, nullptr}};
          for (const Value* v : g.outputs()) r.fetches.push_back(v->name);
          std::vector<int> wants;
          auto plan = BuildPlan(g, r, &wants);
          ASSERT_TRUE(plan.ok()) << plan.status();
          const ExecutionPlan& p = **plan;
          const int sdy = p.steps[1].outputs[0], sdx = p.steps[3].outputs[0];
          EXPECT_EQ(p.slots[sdx].offset == p.slots[sdy].offset, !keep_dy) << op << " " << DTypeName(dt) << " " << n;
          auto session = Session::Create(g);
          ASSERT_TRUE(session.ok()) << session.status();
          auto out = (*session)->Run(feeds, {"grad"});
          ASSERT_TRUE(out.ok()) << out.status();
          grads.push_back((*out)[0]);
        }
        ASSERT_EQ(grads[0].nbytes(), grads[1].nbytes());
        EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].nbytes()), 0)
            << op << " " << DTypeName(dt) << " " << n;
      }
}

TEST(Planner, FoldsShapeChainAndMakesReshapeAView) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), 3, 4}));
  g.AddInput(x);
  Value* shape = g.AddNode("Shape", {x}, 1, "shape")->output(0);
  Value* starts = g.AddInitializer("starts", Tensor::FromVector<int64_t>(DType::kI64, {1}, {0}));
  Value* ends = g.AddInitializer("ends", Tensor::FromVector<int64_t>(DType::kI64, {1}, {1}));
  Value* n = g.AddNode("Slice", {shape, starts, ends}, 1, "slice")->output(0);
  Value* minus1 = g.AddInitializer("minus1", Tensor::FromVector<int64_t>(DType::kI64, {1}, {-1}));
  Node* concat = g.AddNode("Concat", {n, minus1}, 1, "concat");
  concat->SetAttr(Attribute::Int("axis", 0));
  Value* flat = g.AddNode("Reshape", {x, concat->output(0)}, 1, "reshape")->output(0);
  Value* y = g.AddNode("Relu", {flat}, 1, "relu")->output(0);
  g.AddOutput(y);
  std::vector<int> wants;
  auto plan = BuildPlan(g, Request(g, {5, 3, 4}), &wants);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ExecutionPlan& p = **plan;
  EXPECT_EQ(p.stats.folded_nodes, 3);  // Shape, Slice, Concat
  EXPECT_EQ(p.stats.view_nodes, 1);    // Reshape
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].node->name(), "relu");
  EXPECT_EQ(p.slots[p.fetch_slots[0]].dims, (std::vector<int64_t>{5, 12}));
  EXPECT_EQ(p.slots[p.steps[0].inputs[0]].kind, SlotKind::kFeed);  // a view of x itself
}

TEST(Planner, MissingKernelFailsAtPlanTimeNamingNodeOpAndDtypes) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kI64, Shape({4}));
  g.AddInput(x);
  g.AddOutput(g.AddNode("Sqrt", {x}, 1, "root")->output(0));
  std::vector<int> wants;
  PlanRequest r = Request(g, {4});
  r.feeds[0].dtype = DType::kI64;
  auto plan = BuildPlan(g, r, &wants);
  ASSERT_FALSE(plan.ok());
  std::string msg(plan.status().message());
  EXPECT_NE(msg.find("'root'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Sqrt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("i64"), std::string::npos) << msg;
}

TEST(Planner, UnknownOpFailsNamingNode) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape({4}));
  g.AddInput(x);
  g.AddOutput(g.AddNode("NoSuchOp", {x}, 1, "mystery")->output(0));
  std::vector<int> wants;
  auto plan = BuildPlan(g, Request(g, {4}), &wants);
  ASSERT_FALSE(plan.ok());
  std::string msg(plan.status().message());
  EXPECT_NE(msg.find("'mystery'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NoSuchOp"), std::string::npos) << msg;
}

TEST(Planner, ShapeFromFedValuesAsksForThem) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape({6}));
  Value* shape = g.AddValue("shape", DType::kI64, Shape({2}));
  g.AddInput(x);
  g.AddInput(shape);
  g.AddOutput(g.AddNode("Reshape", {x, shape}, 1, "reshape")->output(0));
  PlanRequest r = Request(g, {6});
  r.feeds[1] = {true, DType::kI64, {2}, nullptr};
  std::vector<int> wants;
  auto plan = BuildPlan(g, r, &wants);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(wants, std::vector<int>{1});
  Tensor value = Tensor::FromVector<int64_t>(DType::kI64, {2}, {2, 3});
  r.feeds[1].value = &value;
  plan = BuildPlan(g, r, &wants);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->slots[(*plan)->fetch_slots[0]].dims, (std::vector<int64_t>{2, 3}));
}

TEST(Planner, UnneededNodesAreNotPlanned) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape({4}));
  g.AddInput(x);
  Value* used = g.AddNode("Relu", {x}, 1, "used")->output(0);
  g.AddNode("Exp", {x}, 1, "unused");
  g.AddOutput(used);
  std::vector<int> wants;
  auto plan = BuildPlan(g, Request(g, {4}), &wants);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ((*plan)->steps.size(), 1u);
  EXPECT_EQ((*plan)->steps[0].node->name(), "used");
}

}  // namespace
}  // namespace mixtrain
