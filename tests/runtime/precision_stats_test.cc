// The precision debugger's graph side: the statistics pass (passes/precision_stats.cc) and the
// PrecisionStats kernel count exactly what a Cast to fp16/bf16 turns into inf, 0 and subnormals,
// each statistics node runs right after the value it measures, and a run that does not fetch
// "precision_stats" runs none of them.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "graph/graph.h"
#include "kernels/common/precision_stats.h"
#include "passes/training.h"
#include "runtime/session.h"

namespace mixtrain {
namespace {

// x (f32 input) -> Neg -> Cast(to) -> Cast(f32) -> y, with the statistics pass run on it.
std::unique_ptr<Graph> CastGraph(DType to) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({8}));
  g->AddInput(x);
  Node* id = g->AddNode("Neg", {x}, 1, "neg");  // the value the Cast reads
  id->output(0)->dtype = DType::kF32;
  Node* down = g->AddNode("Cast", {id->output(0)}, 1, "down");
  down->SetAttr(Attribute::Int("to", ToOnnxType(to)));
  down->output(0)->dtype = to;
  Node* up = g->AddNode("Cast", {down->output(0)}, 1, "up");
  up->SetAttr(Attribute::Int("to", ToOnnxType(DType::kF32)));
  up->output(0)->dtype = DType::kF32;
  g->AddOutput(up->output(0));
  auto r = MakePrecisionStatsPass()->Run(*g);
  EXPECT_TRUE(r.ok() && *r) << r.status();
  return g;
}

const float kInf = std::numeric_limits<float>::infinity();

TEST(PrecisionStats, CountsWhatAnFp16CastOverflowsAndFlushes) {
  auto g = CastGraph(DType::kF16);
  // Each statistics node follows its value's producer (no tensor lives longer than before).
  std::vector<std::string> order;
  for (const auto& n : g->nodes()) order.push_back(n->name());
  ASSERT_EQ(order.size(), 8u);
  EXPECT_EQ(order[0], "precision_stats/x");
  EXPECT_EQ(order[1], "neg");
  EXPECT_EQ(order[2], "precision_stats/" + g->nodes()[1]->output(0)->name);
  EXPECT_EQ(order[3], "down");
  EXPECT_EQ(order[4], "precision_stats/" + g->nodes()[3]->output(0)->name);  // the Cast, on its input
  EXPECT_EQ(order[5], "up");
  EXPECT_EQ(order[7], "precision_stats/concat");

  auto s = Session::Create(*g);
  ASSERT_TRUE(s.ok()) << s.status();
  // 70000 overflows fp16 (max 65504), 1e-9 flushes to 0 (< 2^-25), 1e-6 is subnormal (< 2^-14).
  Tensor x = Tensor::FromVector<float>(DType::kF32, {8}, {70000.0f, 1e-9f, 1e-6f, 0.0f, -3.0f, NAN, kInf, 65519.0f});
  auto out = (*s)->Run({{"x", x}}, {kPrecisionStatsName});
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& rows = (*out)[0];
  ASSERT_EQ(rows.dims(), (std::vector<int64_t>{4, kNumStatFields}));  // x, neg, the Cast, up
  // Row 2: the Cast's f32 input measured against fp16's range.
  const StatsAccumulator c = StatsAccumulator::FromRow(rows.data_as<float>() + 2 * kNumStatFields);
  EXPECT_EQ(c.elements, 8);
  EXPECT_EQ(c.overflow, 1);   // 70000; 65519 still rounds to 65504
  EXPECT_EQ(c.underflow, 1);  // 1e-9
  EXPECT_EQ(c.subnormal, 1);  // 1e-6
  EXPECT_EQ(c.zero, 1);
  EXPECT_EQ(c.nan, 1);
  EXPECT_EQ(c.inf, 1);
  EXPECT_EQ(c.max_abs, 70000.0f);
  EXPECT_FALSE(c.finite());
  // Row 3: after the round trip the overflow is an inf, the flushed value a zero.
  const StatsAccumulator u = StatsAccumulator::FromRow(rows.data_as<float>() + 3 * kNumStatFields);
  EXPECT_EQ(u.inf, 2);
  EXPECT_EQ(u.zero, 2);
  EXPECT_EQ(u.overflow, 0);  // f32's own range
  EXPECT_EQ(u.max_abs, 65504.0f);
  // Row 0: the input in its own f32 range: nothing overflows or flushes.
  const StatsAccumulator in = StatsAccumulator::FromRow(rows.data_as<float>());
  EXPECT_EQ(in.overflow + in.underflow, 0);
}

TEST(PrecisionStats, Bf16RangeAndLargeTensorsSplitAcrossThreads) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  const int64_t n = 100000;  // several ParallelFor blocks
  Value* x = g->AddValue("x", DType::kF32, Shape({n}));
  g->AddInput(x);
  Node* down = g->AddNode("Cast", {x}, 1, "down");
  down->SetAttr(Attribute::Int("to", ToOnnxType(DType::kBF16)));
  down->output(0)->dtype = DType::kBF16;
  g->AddOutput(down->output(0));
  ASSERT_TRUE(MakePrecisionStatsPass()->Run(*g).ok());
  std::vector<float> v(n, 1.0f);
  v[7] = 3.4e38f;    // beyond bf16's largest (3.3895e38 rounds up from 3.3962e38)
  v[n - 1] = 1e-40f;  // an f32 subnormal: bf16 subnormal too (>= 2^-134)
  v[n / 2] = 1e-45f;  // below 2^-134: flushed
  v[n / 3] = -2.0f;
  auto s = Session::Create(*g);
  ASSERT_TRUE(s.ok());
  auto out = (*s)->Run({{"x", Tensor::FromVector<float>(DType::kF32, {n}, v)}}, {kPrecisionStatsName});
  ASSERT_TRUE(out.ok()) << out.status();
  const StatsAccumulator c = StatsAccumulator::FromRow((*out)[0].data_as<float>() + kNumStatFields);
  EXPECT_EQ(c.elements, n);
  EXPECT_EQ(c.overflow, 1);
  EXPECT_EQ(c.underflow, 1);
  EXPECT_EQ(c.subnormal, 1);
  EXPECT_EQ(c.max_abs, 3.4e38f);
}

TEST(PrecisionStats, ARunThatDoesNotFetchThemRunsNoneOfThem) {
  auto g = CastGraph(DType::kF16);
  auto s = Session::Create(*g);
  ASSERT_TRUE(s.ok());
  (*s)->set_profiling(true);
  Tensor x = Tensor::FromVector<float>(DType::kF32, {8}, std::vector<float>(8, 1.0f));
  ASSERT_TRUE((*s)->Run({{"x", x}}, {g->outputs()[0]->name}).ok());
  for (const NodeProfile& p : (*s)->ProfileByNode()) EXPECT_NE(p.node->op_type(), "PrecisionStats") << p.node->name();
  (*s)->ResetProfile();
  ASSERT_TRUE((*s)->Run({{"x", x}}, {kPrecisionStatsName}).ok());
  int stats = 0;
  for (const NodeProfile& p : (*s)->ProfileByNode()) stats += p.node->op_type() == "PrecisionStats";
  EXPECT_EQ(stats, 4);
}

}  // namespace
}  // namespace mixtrain
