// The Trainer holds its weights once (issue 35): the step updates its state in the graphs' own
// tensors, which the evaluation graph and the export share, without touching a caller's copy;
// and the memory report adds up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "graph/onnx_import.h"
#include "runtime/memory_report.h"
#include "tests/runtime/train_test_util.h"

namespace mixtrain {
namespace {

using traintest::LoadConfig;
using traintest::LoadNpz;
using traintest::MakeTrainer;
using traintest::OptimDir;

constexpr int kSteps = 3;

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(TrainerMemory, StepUpdatesTheWeightsEvaluationReadsInPlace) {
  std::unique_ptr<Trainer> t = MakeTrainer("mlp.onnx", LoadConfig("adam.textproto"));
  ASSERT_NE(t, nullptr);
  auto batch = LoadNpz("batch.npz");
  for (int s = 0; s < kSteps; ++s) ASSERT_TRUE(t->Step(batch).ok());
  ASSERT_FALSE(t->ParameterNames().empty());
  for (const std::string& p : t->ParameterNames()) {
    const Value* step = t->TransformedGraph().FindValue(p);
    const Value* eval = t->EvalGraph().FindValue(p);
    ASSERT_TRUE(step != nullptr && step->is_initializer()) << p;
    ASSERT_TRUE(eval != nullptr && eval->is_initializer()) << p;
    // One buffer: the step's graph, the evaluation graph, and the trained value.
    EXPECT_EQ(step->initializer->data(), eval->initializer->data()) << p;
    auto trained = t->GetParameter(p);
    ASSERT_TRUE(trained.ok()) << trained.status();
    EXPECT_TRUE(SameBytes(*step->initializer, *trained)) << p << ": the graph's tensor is not the trained state";
  }
}

TEST(TrainerMemory, TrainingLeavesTheCallersGraphAlone) {
  auto model = ImportOnnxFile(OptimDir() + "mlp.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  const std::unique_ptr<Graph> before = (*model)->Clone();
  std::map<std::string, Tensor> initial;
  for (const Value* v : (*model)->initializers()) initial.emplace(v->name, v->initializer->Clone());
  // The trainer gets a clone: its tensors are shared with *model until someone writes them.
  auto t = Trainer::CreateFromGraph((*model)->Clone(), LoadConfig("adam.textproto"));
  ASSERT_TRUE(t.ok()) << t.status();
  auto batch = LoadNpz("batch.npz");
  for (int s = 0; s < kSteps; ++s) ASSERT_TRUE((*t)->Step(batch).ok());
  int changed = 0;
  for (const std::string& p : (*t)->ParameterNames()) {
    auto trained = (*t)->GetParameter(p);
    ASSERT_TRUE(trained.ok());
    if (initial.contains(p) && !SameBytes(*trained, initial.at(p))) ++changed;
  }
  EXPECT_GT(changed, 0) << "training changed no parameter";
  for (const Value* v : (*model)->initializers())
    EXPECT_TRUE(SameBytes(*v->initializer, initial.at(v->name))) << v->name << " changed in the caller's graph";
}

// Evaluation planned before training must see the trained weights afterwards (no folded or
// prepacked copy of the old ones): the same loss as a trainer given those weights directly.
TEST(TrainerMemory, EvaluationPlannedBeforeTrainingSeesTheTrainedWeights) {
  const pb::TrainConfig c = LoadConfig("adam.textproto");
  std::unique_ptr<Trainer> a = MakeTrainer("mlp.onnx", c);
  std::unique_ptr<Trainer> b = MakeTrainer("mlp.onnx", c);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  auto batch = LoadNpz("batch.npz");
  auto untrained = a->Evaluate(batch);
  ASSERT_TRUE(untrained.ok()) << untrained.status();
  for (int s = 0; s < kSteps; ++s) ASSERT_TRUE(a->Step(batch).ok());
  auto trained = a->Evaluate(batch);
  ASSERT_TRUE(trained.ok()) << trained.status();
  for (const std::string& p : a->ParameterNames()) {
    auto w = a->GetParameter(p);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(b->SetParameter(p, *w).ok());
  }
  auto given = b->Evaluate(batch);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_NE(trained->loss_sum, untrained->loss_sum);
  EXPECT_EQ(trained->loss_sum, given->loss_sum);
}

TEST(TrainerMemory, ReportAddsUp) {
  std::unique_ptr<Trainer> t = MakeTrainer("mlp.onnx", LoadConfig("adam.textproto"));
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->memory_report().has_value()) << "a report before any step";
  auto batch = LoadNpz("batch.npz");
  ASSERT_TRUE(t->Step(batch).ok());
  ASSERT_TRUE(t->Evaluate(batch).ok());
  const std::optional<MemoryReport> r = t->memory_report();
  ASSERT_TRUE(r.has_value());

  size_t params = 0, other_state = 0;
  auto state = t->State();
  ASSERT_TRUE(state.ok());
  const std::vector<std::string> names = t->ParameterNames();
  for (const auto& [name, tensor] : *state) {
    const bool is_param = std::find(names.begin(), names.end(), name) != names.end();
    (is_param ? params : other_state) += tensor.nbytes();
  }
  EXPECT_EQ(r->weights, params);
  EXPECT_EQ(r->optimizer_state, other_state);
  EXPECT_GE(r->optimizer_state, 2 * r->weights) << "Adam keeps two moments per weight";
  // fp32 without accumulation: one gradient per weight, from the backward to the optimizer.
  EXPECT_EQ(r->gradients, r->weights);
  EXPECT_GT(r->activations_kept, 0u);
  ASSERT_FALSE(r->largest_kept.empty());
  EXPECT_LE(r->largest_kept.size(), kLargestKept);
  size_t listed = 0;
  for (size_t i = 0; i < r->largest_kept.size(); ++i) {
    listed += r->largest_kept[i].second;
    if (i > 0) EXPECT_GE(r->largest_kept[i - 1].second, r->largest_kept[i].second) << "not largest first";
    const StepPhase made = PhaseOf(*r->largest_kept[i].first);
    EXPECT_TRUE(made == StepPhase::kForward || made == StepPhase::kLoss) << r->largest_kept[i].first->name();
  }
  EXPECT_LE(listed, r->activations_kept);
  EXPECT_LE(r->arena_peak_live, r->arena);
  EXPECT_LE(r->gradients + r->activations_kept, r->arena);
  ASSERT_FALSE(r->phase_peaks.empty());
  size_t most = 0;
  for (const auto& [phase, bytes] : r->phase_peaks) most = std::max(most, bytes);
  EXPECT_EQ(most, r->arena_peak_live);
  EXPECT_GT(r->eval_arena, 0u);
  EXPECT_EQ(r->planned, r->weights + r->optimizer_state + r->constants + r->arena + r->eval_arena);
  EXPECT_GT(r->measured_peak_rss, 0u);
}

// Live bytes by step from lifetimes: two buffers overlapping at step 1 of a three-step plan.
TEST(TrainerMemory, PhasePeaksFollowLifetimes) {
  Graph g;
  Value* x = g.AddValue("x", DType::kF32);
  g.AddInput(x);
  Value* a = g.AddValue("a", DType::kF32);
  Value* b = g.AddValue("b", DType::kF32);
  Value* c = g.AddValue("c", DType::kF32);
  Node* n0 = g.AddNode("Relu", {x}, {a});
  Node* n1 = g.AddNode("Relu", {a}, {b});
  Node* n2 = g.AddNode("Relu", {b}, {c});
  PlanStats st;
  st.step_nodes = {n0, n1, n2};
  st.buffers = {{100, 0, 1}, {10, 1, 2}, {1, 2, 2}};
  st.peak_planned_bytes = 128;
  const MemoryReport r = PlannedMemory(g, st, {}, {});
  EXPECT_EQ(r.arena_peak_live, 110u);
  ASSERT_EQ(r.phase_peaks.size(), 1u);  // every node is a forward node
  EXPECT_EQ(r.phase_peaks[0].second, 110u);
  EXPECT_EQ(r.activations_kept, 0u);
  EXPECT_EQ(r.arena, 128u);
}

}  // namespace
}  // namespace mixtrain
