// VerifyStepNames (passes/step_names.h) refuses a built step with each of its rules broken, and
// the error names the culprit and the rule.
#include "tests/passes/step_names_test_util.h"

namespace mixtrain {
namespace {

using ::testing::HasSubstr;
using namespace step_names_test;  // NOLINT: the helpers of both halves of this test

// --- each rule broken ------------------------------------------------------------------------

TEST(BrokenGradients, GradientOfNoParameter) {
  std::unique_ptr<Graph> g = GradientGraph(kMlp);
  ASSERT_TRUE(VerifyStepNames(*g).ok());
  Value* grad = Output(*g, GradientOutputs(*g).front());
  ASSERT_NE(grad, nullptr);
  Value* renamed = g->AddValue("grad/no_such_parameter", grad->dtype, grad->shape);
  g->AddNode("Identity", {grad}, {renamed}, "no_such_parameter/grad/Identity");
  g->AddOutput(renamed);
  ExpectBroken(*g, {"'grad/no_such_parameter'", "names no initializer or graph input 'no_such_parameter'"});
}

TEST(BrokenGradients, GradientOfTheWrongShapeOrType) {
  std::unique_ptr<Graph> g = GradientGraph(kMlp);
  const std::string name = GradientOutputs(*g).front();
  Value* grad = Output(*g, name);
  grad->shape = Shape::Of({3, 5, 7});
  ExpectBroken(*g, {"'" + name + "'", "has shape [3,5,7]", "grad/X has X's shape"});
  grad->shape = g->FindValue(name.substr(5))->shape;
  ASSERT_TRUE(VerifyStepNames(*g).ok());
  grad->dtype = DType::kI64;
  ExpectBroken(*g, {"'" + name + "' is i64", "a gradient and its parameter are float"});
}

TEST(BrokenGradients, GradientOfStepState) {
  std::unique_ptr<Graph> g = StepToBreak();
  Value* scale = g->FindValue(kLossScaleName);
  ASSERT_NE(scale, nullptr);
  Value* grad = g->AddValue("grad/loss_scale", DType::kF32, scale->shape);
  g->AddNode("Identity", {scale}, {grad}, "loss_scale/grad/Identity");
  g->AddOutput(grad);
  ExpectBroken(*g, {"'grad/loss_scale' is of step state 'loss_scale'", "grad/X names a parameter"});
}

TEST(BrokenState, StateOutputOfTheWrongDtype) {
  std::unique_ptr<Graph> g = StepToBreak();
  Value* m = nullptr;
  for (Value* v : g->outputs())
    if (absl::StartsWith(v->name, absl::StrCat(kStatePrefix, kAdamMPrefix))) m = v;
  ASSERT_NE(m, nullptr);
  m->dtype = DType::kF16;
  ExpectBroken(*g, {"'" + m->name + "' is f16", "state/X has X's dtype"});
}

TEST(BrokenState, StateOutputOfTheWrongShape) {
  std::unique_ptr<Graph> g = StepToBreak();
  Value* s = Output(*g, absl::StrCat(kStatePrefix, kStepName));
  ASSERT_NE(s, nullptr);
  s->shape = Shape::Of({2});
  ExpectBroken(*g, {"'state/step' has shape [2]", "state/X has X's shape"});
}

TEST(BrokenState, StateOutputOfNoInitializer) {
  std::unique_ptr<Graph> g = StepToBreak();
  Value* from = Output(*g, absl::StrCat(kStatePrefix, kStepName))->producer->input(0);
  Value* orphan = g->AddValue("state/no_such_state", from->dtype, from->shape);
  g->AddNode("Identity", {from}, {orphan}, "state/no_such_state");
  g->AddOutput(orphan);
  ExpectBroken(*g, {"'state/no_such_state' names no initializer 'no_such_state'"});
}

// Two BatchNorms whose running statistics the exporter made one initializer X: the second's
// update is "state/X_2" (tests/data/zoo/resnet_pad.onnx), accepted while it fits X.
TEST(BrokenState, SecondUpdateOfASharedStatistic) {
  std::unique_ptr<Graph> g = StepToBreak(kResnetMini, Config(Precision::kFp32), "resnet_mini_fp32_recompute_none");
  const Node* bn = nullptr;
  for (const auto& n : g->nodes())
    if (n->op_type() == "BatchNormalization" && n->output(1) != nullptr) bn = n.get();
  ASSERT_NE(bn, nullptr);
  const Value* stat = bn->input(3);
  ASSERT_TRUE(stat->is_initializer());
  ASSERT_NE(Output(*g, absl::StrCat(kStatePrefix, stat->name)), nullptr);
  Value* dup = g->AddValue(absl::StrCat(kStatePrefix, stat->name, "_2"), stat->dtype, stat->shape);
  g->AddNode("Identity", {bn->output(1)}, {dup}, bn->name() + "/state1_1");
  g->AddOutput(dup);
  absl::Status st = VerifyStepNames(*g);
  EXPECT_TRUE(st.ok()) << st;
  dup->shape = Shape::Of({1000});
  ExpectBroken(*g, {"'" + dup->name + "' has shape [1000], initializer '" + stat->name + "'"});
  dup->shape = stat->shape;
  // Without the first update beside it, the second is a state output of no initializer.
  auto& outs = g->mutable_outputs();
  outs.erase(std::find(outs.begin(), outs.end(), Output(*g, absl::StrCat(kStatePrefix, stat->name))));
  ExpectBroken(*g, {"'" + dup->name + "' names no initializer '" + stat->name + "_2'"});
}

TEST(BrokenState, OptimizerStateNotWrittenBackOrOfNoParameter) {
  std::unique_ptr<Graph> g = StepToBreak();
  std::string v_name;
  for (const Value* v : g->outputs())
    if (absl::StartsWith(v->name, absl::StrCat(kStatePrefix, kAdamVPrefix))) v_name = v->name;
  ASSERT_FALSE(v_name.empty());
  auto& outs = g->mutable_outputs();
  outs.erase(std::find(outs.begin(), outs.end(), g->FindValue(v_name)));
  const std::string moment = v_name.substr(std::string(kStatePrefix).size());
  ExpectBroken(*g, {"optimizer state '" + moment + "' has no '" + v_name + "' output"});

  std::unique_ptr<Graph> ghost = StepToBreak();
  ghost->AddInitializer("adam.m/ghost", Tensor(DType::kF32, {4}));
  ExpectBroken(*ghost, {"optimizer state 'adam.m/ghost' names no parameter 'ghost'"});
}

TEST(BrokenState, OptimizerStateOfAnotherShape) {
  std::unique_ptr<Graph> g = StepToBreak();
  Value* m = nullptr;
  for (Value* v : g->initializers())
    if (absl::StartsWith(v->name, kAdamMPrefix)) m = v;
  ASSERT_NE(m, nullptr);
  g->SetInitializer(m, Tensor(DType::kF32, {1, 2, 3}));
  ExpectBroken(*g, {"optimizer state '" + m->name + "' has shape [1,2,3]", "adam.m/X has X's shape"});
}

TEST(BrokenScalars, LossScaleInF16) {
  std::unique_ptr<Graph> g = StepToBreak();
  Value* scale = g->FindValue(kLossScaleName);
  g->SetInitializer(scale, ConvertFloat(*scale->initializer, DType::kF16));
  ExpectBroken(*g, {"'loss_scale' is a f16 [] initializer", "the loss scale is an f32 scalar initializer"});
}

TEST(BrokenScalars, StepCounterInF32) {
  std::unique_ptr<Graph> g = StepToBreak();
  g->SetInitializer(g->FindValue(kStepName), Tensor::Scalar(0.0f));
  ExpectBroken(*g, {"'step' is a f32 [] initializer", "a step counter is an integer scalar initializer"});
}

TEST(BrokenScalars, GoodStepsNotWrittenBack) {
  std::unique_ptr<Graph> g = StepToBreak();
  auto& outs = g->mutable_outputs();
  outs.erase(std::find(outs.begin(), outs.end(), Output(*g, absl::StrCat(kStatePrefix, kGoodStepsName))));
  ExpectBroken(*g, {"'loss_scale.good_steps' has no 'state/loss_scale.good_steps' output"});
}

TEST(BrokenScalars, FoundInfNotABoolOutput) {
  std::unique_ptr<Graph> g = StepToBreak();
  Value* f = Output(*g, kFoundInfName);
  f->dtype = DType::kF32;
  ExpectBroken(*g, {"'found_inf' is a f32 [] graph output of node 'amp/found_inf'",
                    "the overflow flag is a bool scalar output"});
  f->dtype = DType::kBool;
  auto& outs = g->mutable_outputs();
  outs.erase(std::find(outs.begin(), outs.end(), f));
  ExpectBroken(*g, {"'found_inf' is a bool [] value", "the overflow flag is a bool scalar output"});
}

TEST(BrokenScalars, LearningRateAndApplyInputs) {
  std::unique_ptr<Graph> g = StepToBreak();
  g->FindValue(kLrName)->dtype = DType::kF16;
  ExpectBroken(*g, {"'lr' is a f16 [] graph input", "the learning rate is an f32 scalar graph input"});
  std::unique_ptr<Graph> h = StepToBreak();
  h->SetInitializer(h->FindValue(kApplyName), Tensor::Scalar(1.0f));
  ExpectBroken(*h, {"'apply' is a f32 [] initializer", "the accumulation flag is a bool scalar graph input"});
}

TEST(BrokenScalars, LossAndScaledLoss) {
  // The built step has no scaled_loss left (cleanup drops it: the backward reads loss_scale); a
  // step in the making has, computed by the loss-scale pass.
  std::unique_ptr<Graph> g = StepToBreak();
  ASSERT_EQ(g->FindValue(kScaledLossName), nullptr);
  Value* scaled = g->AddValue(kScaledLossName, DType::kF32, Shape::Of({}));
  Node* mul = g->AddNode("Mul", {g->FindValue(kLossName), g->FindValue(kLossScaleName)}, {scaled}, "loss_scale/mul");
  ASSERT_TRUE(VerifyStepNames(*g).ok()) << VerifyStepNames(*g);
  scaled->dtype = DType::kF16;
  ExpectBroken(*g, {"'scaled_loss' is a f16", "the scaled loss is f32, computed by a loss_scale/ node"});
  scaled->dtype = DType::kF32;
  mul->set_name("scale_the_loss");
  ExpectBroken(*g, {"'scaled_loss' is a f32 [] value of node 'scale_the_loss' (forward)"});
  std::unique_ptr<Graph> h = StepToBreak();
  auto& outs = h->mutable_outputs();
  outs.erase(std::find(outs.begin(), outs.end(), Output(*h, kLossName)));
  ExpectBroken(*h, {"'loss' is a f32 [] value of node", "the loss is a float graph output the step computes"});
}

TEST(BrokenScalars, PrecisionStatsOfAnotherShape) {
  std::unique_ptr<Graph> g = StepToBreak();
  g->FindValue(kPrecisionStatsName)->shape = Shape::Of({4, 3});
  ExpectBroken(*g, {"'precision_stats' is a f32 [4,3] graph output", "the precision statistics are an f32 [K, "});
}

// --- the order of the phases -----------------------------------------------------------------

// Replaces input `i` of `reader` with the output of a new node `name` = Identity(reader's input).
void Interpose(Graph& g, Node* reader, size_t i, const std::string& name) {
  Value* in = reader->input(i);
  Value* out = g.AddValue(g.UniqueName(name + "_out"), in->dtype, in->shape);
  g.AddNode("Identity", {in}, {out}, name);
  g.SetInput(reader, i, out);
}

TEST(BrokenOrder, OptimizerNodeFeedsForward) {
  std::unique_ptr<Graph> g = StepToBreak();
  size_t i = 0;
  Node* reader = ForwardReader(*g, &i);
  ASSERT_NE(reader, nullptr);
  Interpose(*g, reader, i, "amp/rescale");
  ExpectBroken(*g, {"optimizer node 'amp/rescale' feeds forward node '" + reader->name() + "'",
                    "phases run forward and loss -> backward -> optimizer"});
}

TEST(BrokenOrder, BackwardNodeFeedsForward) {
  std::unique_ptr<Graph> g = StepToBreak(kGptMini, Config(Precision::kBf16), "gpt_mini_bf16_recompute_none");
  size_t i = 0;
  Node* reader = ForwardReader(*g, &i);
  ASSERT_NE(reader, nullptr);
  Interpose(*g, reader, i, "x/grad/Identity");
  ExpectBroken(*g, {"backward node 'x/grad/Identity' feeds forward node '" + reader->name() + "'"});
}

TEST(BrokenOrder, BackwardNodeFeedsTheLoss) {
  std::unique_ptr<Graph> g = StepToBreak(kResnetMini, Config(Precision::kFp32), "resnet_mini_fp32_recompute_none");
  Node* loss = FirstOfPhase(*g, StepPhase::kLoss);
  ASSERT_NE(loss, nullptr);
  Interpose(*g, loss, 0, "logits/grad/Identity");
  ExpectBroken(*g, {"backward node 'logits/grad/Identity' feeds loss node '" + loss->name() + "'"});
}

TEST(BrokenOrder, TheStepReadsTheDebugger) {
  std::unique_ptr<Graph> g = StepToBreak();
  Node* stats = FirstOfPhase(*g, StepPhase::kDebug, "PrecisionStats");
  ASSERT_NE(stats, nullptr);
  Value* out = g->AddValue("reads_stats", DType::kF32);
  g->AddNode("ReduceSum", {stats->output(0)}, {out}, "amp/reads_stats");
  ExpectBroken(*g, {"debug node '" + stats->name() + "' feeds optimizer node 'amp/reads_stats'",
                    "only the precision debugger reads its statistics"});
}

TEST(BrokenOrder, AllReducedGradientFeedsTheBackward) {
  std::unique_ptr<Graph> g = StepToBreak();
  Node* reduce = FirstOfPhase(*g, StepPhase::kCommunication, "AllReduce");
  Node* backward = FirstOfPhase(*g, StepPhase::kBackward);
  ASSERT_NE(reduce, nullptr);
  ASSERT_NE(backward, nullptr);
  g->AddNodeInput(backward, reduce->output(0));
  ExpectBroken(*g, {"communication node '" + reduce->name() + "' feeds backward node '" + backward->name() + "'",
                    "all-reduced values feed the update only"});
}

TEST(BrokenOrder, RecomputedValueReadOutsideTheBackward) {
  std::unique_ptr<Graph> g = GptStepToBreak();
  Node* clone = FirstOfPhase(*g, StepPhase::kRecompute);
  ASSERT_NE(clone, nullptr);
  size_t i = 0;
  Node* reader = ForwardReader(*g, &i);
  ASSERT_NE(reader, nullptr);
  g->SetInput(reader, i, clone->output(0));
  ExpectBroken(*g, {"recompute node '" + clone->name() + "' feeds forward node '" + reader->name() + "'",
                    "recomputed values are read by the backward only"});
}

TEST(BrokenOrder, RecomputeReadsTheBackward) {
  std::unique_ptr<Graph> g = GptStepToBreak();
  Node* clone = FirstOfPhase(*g, StepPhase::kRecompute);
  ASSERT_NE(clone, nullptr);
  ASSERT_GT(clone->num_inputs(), 0u);
  Interpose(*g, clone, 0, "early/grad/Identity");
  ExpectBroken(*g, {"backward node 'early/grad/Identity' feeds recompute node '" + clone->name() + "'",
                    "a recomputed forward node reads the forward only"});
}

TEST(BrokenOrder, TheStepReadsAStateWriteBack) {
  std::unique_ptr<Graph> g = StepToBreak();
  Value* next = Output(*g, absl::StrCat(kStatePrefix, kStepName));
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(IsStateWriteBack(*g, *next->producer));
  Value* out = g->AddValue("reads_next_step", next->dtype);
  g->AddNode("Identity", {next}, {out}, "step/reads_next");
  ExpectBroken(*g, {"state write-back node '" + next->producer->name() + "' feeds optimizer node 'step/reads_next'",
                    "a state write-back is the step's result"});
}

// Every problem is listed, not just the first.
TEST(BrokenOrder, ReportsEveryProblem) {
  std::unique_ptr<Graph> g = StepToBreak();
  g->SetInitializer(g->FindValue(kStepName), Tensor::Scalar(0.0f));
  g->FindValue(kLrName)->dtype = DType::kI64;
  ExpectBroken(*g, {"'step' is a f32", "'lr' is a i64"});
}

}  // namespace
}  // namespace mixtrain
