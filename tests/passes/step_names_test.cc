// VerifyStepNames (passes/step_names.h) on the training steps the pipeline builds from the models
// under models/: fp32, bf16 AMP and fp16 AMP with dynamic loss scaling, each with and without
// recompute = all, and with gradient accumulation, clipping, data parallel, the precision debugger
// and every optimizer; then each rule broken on a built step, and the error names the culprit.
#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "graph/check.h"
#include "graph/onnx_import.h"
#include "kernels/backend.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "passes/step_names.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

using ::testing::HasSubstr;

const std::string kModels = std::string(MT_SOURCE_DIR) + "/models/";

struct Model {
  std::string name;  // models/<name>.onnx
  int class_axis;
};
void PrintTo(const Model& m, std::ostream* os) { *os << m.name; }
const Model kMlp{"mlp", 1}, kFashionCnn{"fashion_cnn", 1}, kGptMini{"gpt_mini", -1}, kResnetMini{"resnet_mini", 1};
const Model kAllModels[] = {kMlp, kFashionCnn, kGptMini, kResnetMini};

enum class Precision { kFp32, kBf16, kFp16 };

// --- the one place this test depends on how the pipeline is told its target ----------------
// The CPU backend's target, or (`gpu`) one without its passes, as a CUDA device's step is built
// (ONNX's conv layouts, the Casts of the weight gradients kept). Every configuration here names
// its dtype, so native_bf16 decides nothing.
Target TestTarget(bool gpu) {
  Target target = CpuBackend().target();
  target.caps.native_bf16 = true;
  if (gpu) {
    target.name = "cuda";
    target.training_passes.clear();
  }
  return target;
}
absl::StatusOr<TrainingRecipe> Recipe(const pb::TrainConfig& c, const Graph& model, bool gpu) {
  return ResolveTrainingRecipe(c, model, TestTarget(gpu));
}
// As ComputeGradients builds its gradient graph.
void SetTarget(GradientGraphOptions& o) { o.autodiff.evaluator = TestTarget(false).evaluator; }
// --- end of the target-dependent part ----------------------------------------------------------

// models/<m>.onnx imported, prepared and built into a training step as the trainer builds it.
absl::StatusOr<std::unique_ptr<Graph>> BuildStep(const Model& m, pb::TrainConfig c, bool gpu = false) {
  c.set_class_axis(m.class_axis);
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(kModels + m.name + ".onnx"));
  MT_ASSIGN_OR_RETURN(TrainingRecipe r, Recipe(c, *g, gpu));
  MT_RETURN_IF_ERROR(PrepareModel(*g, r));
  MT_RETURN_IF_ERROR(BuildTrainingStep(*g, r).status());
  return g;
}

pb::TrainConfig Config(Precision p, const std::string& recompute = "none") {
  pb::TrainConfig c;
  pb::PrecisionPolicy* pp = c.mutable_precision();
  switch (p) {
    case Precision::kFp32: pp->set_preset(pb::PrecisionPolicy::FP32); break;
    case Precision::kBf16:
      pp->set_preset(pb::PrecisionPolicy::AMP);
      pp->set_low_dtype(pb::PrecisionPolicy::BF16);
      break;
    case Precision::kFp16:
      pp->set_preset(pb::PrecisionPolicy::AMP);
      pp->set_low_dtype(pb::PrecisionPolicy::FP16);
      c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::DYNAMIC);
      break;
  }
  c.set_recompute(recompute);
  return c;
}

// Everything the step can hold at once: fp16 with dynamic scaling, accumulation, clipping, data
// parallel, the precision debugger, recompute.
pb::TrainConfig Everything() {
  pb::TrainConfig c = Config(Precision::kFp16, "all");
  c.set_accumulate(3);
  c.mutable_optimizer()->set_clip_grad_norm(1.0f);
  c.set_data_parallel(true);
  c.set_debug_precision(1);
  return c;
}

// Steps built once per test binary (by key: one key, one configuration); tests that break one
// take a copy. Null, with a failure, when the pipeline refuses the configuration.
const Graph* Cached(const std::string& key, const Model& m, const pb::TrainConfig& c, bool gpu = false) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Graph>>();
  auto it = cache->find(key);
  if (it == cache->end()) {
    absl::StatusOr<std::unique_ptr<Graph>> g = BuildStep(m, c, gpu);
    if (!g.ok()) {
      ADD_FAILURE() << key << ": " << g.status();
      return nullptr;
    }
    it = cache->emplace(key, std::move(*g)).first;
  }
  return it->second.get();
}

// A copy of a built step that VerifyStepNames accepts, to break (mlp with everything on, or gpt_mini
// with everything on where recompute must find segments).
std::unique_ptr<Graph> StepToBreak(const Model& m = kMlp, const pb::TrainConfig& c = Everything(),
                                   const std::string& key = "mlp/everything") {
  const Graph* built = Cached(key, m, c);
  if (built == nullptr) return std::make_unique<Graph>();
  std::unique_ptr<Graph> g = built->Clone();
  absl::Status st = VerifyStepNames(*g);
  EXPECT_TRUE(st.ok()) << "before breaking it: " << st;
  return g;
}
std::unique_ptr<Graph> GptStepToBreak() { return StepToBreak(kGptMini, Everything(), "gpt_mini/everything"); }

// The gradient graph of models/<m>.onnx (what `mixtrain grad` builds): it keeps its grad/ outputs.
std::unique_ptr<Graph> GradientGraph(const Model& m) {
  auto model = ImportOnnxFile(kModels + m.name + ".onnx");
  MT_CHECK(model.ok()) << model.status();
  GradientGraphOptions o;
  o.loss.class_axis = m.class_axis;
  SetTarget(o);
  auto g = BuildGradientGraph(**model, o);
  MT_CHECK(g.ok()) << g.status();
  return std::move(*g);
}

int CountPhase(const Graph& g, StepPhase p) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(),
                                        [&](const auto& n) { return PhaseOf(*n) == p; }));
}

Node* FirstOfPhase(const Graph& g, StepPhase p, const std::string& op = "") {
  for (const auto& n : g.nodes())
    if (PhaseOf(*n) == p && (op.empty() || n->op_type() == op)) return n.get();
  return nullptr;
}

// A forward node reading a float activation (an output of another forward node): input `*index`.
Node* ForwardReader(const Graph& g, size_t* index) {
  for (const auto& n : g.nodes()) {
    if (PhaseOf(*n) != StepPhase::kForward || IsStateWriteBack(g, *n)) continue;
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      const Value* in = n->input(i);
      if (in != nullptr && in->producer != nullptr && PhaseOf(*in->producer) == StepPhase::kForward &&
          IsFloat(in->dtype)) {
        *index = i;
        return n.get();
      }
    }
  }
  return nullptr;
}

Value* Output(const Graph& g, const std::string& name) {
  for (Value* v : g.outputs())
    if (v->name == name) return v;
  return nullptr;
}

void ExpectBroken(const Graph& g, const std::vector<std::string>& fragments) {
  absl::Status st = VerifyStepNames(g);
  ASSERT_FALSE(st.ok()) << "VerifyStepNames accepted the broken step";
  for (const std::string& f : fragments) EXPECT_THAT(std::string(st.message()), HasSubstr(f));
}

// --- the names PhaseOf reads -----------------------------------------------------------------

TEST(PhaseOf, ReadsEachPassPrefix) {
  Graph g;
  Value* x = g.AddValue("x", DType::kF32);
  g.AddInput(x);
  const std::vector<std::pair<std::string, StepPhase>> cases = {
      {"/layer1/MatMul", StepPhase::kForward},         {"state/adam.m/w", StepPhase::kForward},
      {"loss/SoftmaxCrossEntropyLoss", StepPhase::kLoss}, {"loss_scale/mul", StepPhase::kLoss},
      {"/layer1/MatMul/grad/Gemm", StepPhase::kBackward}, {"w/grad/Identity", StepPhase::kBackward},
      {"adam/update", StepPhase::kOptimizer},           {"adamw/update", StepPhase::kOptimizer},
      {"sgd/update", StepPhase::kOptimizer},            {"adagrad/update", StepPhase::kOptimizer},
      {"amp/found_inf", StepPhase::kOptimizer},         {"step/next", StepPhase::kOptimizer},
      {"clip/norm", StepPhase::kOptimizer},             {"accum/add/w", StepPhase::kOptimizer},
      {"precision_stats/x", StepPhase::kDebug},         {"dp/allreduce/0", StepPhase::kCommunication},
      {"recompute/fc/grad_like", StepPhase::kRecompute},  // the prefix wins over "/grad"
  };
  for (const auto& [name, phase] : cases) {
    const Node* n = g.AddNode("Identity", {x}, 1, name);
    EXPECT_EQ(PhaseOf(*n), phase) << name << " is " << StepPhaseName(PhaseOf(*n));
  }
  EXPECT_STREQ(StepPhaseName(StepPhase::kCommunication), "allreduce");
  EXPECT_STREQ(StepPhaseName(StepPhase::kRecompute), "recompute");
}

TEST(StepNames, PrefixesThatMustAgree) {
  // The accumulators' state and nodes share "accum/"; the write-back nodes are named as the
  // outputs they write.
  EXPECT_STREQ(kAccumPrefix, kAccumNodePrefix);
  EXPECT_STREQ(kStateNodePrefix, kStatePrefix);
  // Every optimizer-state prefix is reserved in the model.
  for (const char* prefix : kOptimizerStatePrefixes) {
    Graph model;
    Value* v = model.AddValue(absl::StrCat(prefix, "w"), DType::kF32);
    model.AddInput(v);
    EXPECT_FALSE(CheckReservedNames(model, "labels").ok()) << prefix;
  }
}

// --- real steps obey the conventions ---------------------------------------------------------

struct StepCase {
  Model model;
  Precision precision;
  std::string recompute;
};

void PrintTo(const StepCase& s, std::ostream* os) {
  const char* p[] = {"fp32", "bf16", "fp16"};
  *os << s.model.name << " " << p[static_cast<int>(s.precision)] << " recompute=" << s.recompute;
}

std::string CaseName(const ::testing::TestParamInfo<StepCase>& info) {
  const char* p[] = {"fp32", "bf16", "fp16"};
  return absl::StrCat(info.param.model.name, "_", p[static_cast<int>(info.param.precision)], "_recompute_",
                      info.param.recompute);
}

class RealStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(RealStep, ObeysTheConventions) {
  const StepCase& s = GetParam();
  const Graph* step = Cached(CaseName({s, 0}), s.model, Config(s.precision, s.recompute));
  ASSERT_NE(step, nullptr);
  const Graph& g = *step;
  absl::Status st = VerifyStepNames(g);
  EXPECT_TRUE(st.ok()) << st;
  // What the rules looked at is there.
  EXPECT_NE(Output(g, kFoundInfName), nullptr);
  EXPECT_NE(Output(g, absl::StrCat(kStatePrefix, kStepName)), nullptr);
  EXPECT_GT(CountPhase(g, StepPhase::kBackward), 0);
  EXPECT_GT(CountPhase(g, StepPhase::kOptimizer), 0);
  EXPECT_EQ(g.FindValue(kLossScaleName) != nullptr, s.precision == Precision::kFp16);
  EXPECT_EQ(g.FindValue(kGoodStepsName) != nullptr, s.precision == Precision::kFp16);
  int moments = 0;
  for (const Value* v : g.initializers()) moments += absl::StartsWith(v->name, kAdamMPrefix);
  EXPECT_GT(moments, 0);
  // mlp and fashion_cnn have no segment worth recomputing (tests/passes/recompute_test.cc).
  if (s.recompute == "all" && (s.model.name == kGptMini.name || s.model.name == kResnetMini.name)) {
    EXPECT_GT(CountPhase(g, StepPhase::kRecompute), 0);
  } else if (s.recompute == "none") {
    EXPECT_EQ(CountPhase(g, StepPhase::kRecompute), 0);
  }
}

std::vector<StepCase> AllCases() {
  std::vector<StepCase> cases;
  for (const Model& m : kAllModels)
    for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16})
      for (const char* r : {"none", "all"}) cases.push_back({m, p, r});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Models, RealStep, ::testing::ValuesIn(AllCases()), CaseName);

class RealStepFeatures : public ::testing::TestWithParam<Model> {};

// Accumulation, clipping, data parallel, the precision debugger and recompute together.
TEST_P(RealStepFeatures, EverythingAtOnce) {
  const Model& m = GetParam();
  const Graph* step = Cached(m.name + "/everything", m, Everything());
  ASSERT_NE(step, nullptr);
  const Graph& g = *step;
  absl::Status st = VerifyStepNames(g);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_GT(CountPhase(g, StepPhase::kCommunication), 0);
  EXPECT_GT(CountPhase(g, StepPhase::kDebug), 0);
  EXPECT_NE(Output(g, kPrecisionStatsName), nullptr);
  EXPECT_NE(g.FindValue(kApplyName), nullptr);
  EXPECT_NE(g.FindValue(absl::StrCat(kClipNodePrefix, "max_norm")), nullptr);
  int accumulators = 0;
  for (const Value* v : g.outputs())
    accumulators += absl::StartsWith(v->name, absl::StrCat(kStatePrefix, kAccumPrefix));
  EXPECT_GT(accumulators, 0);
}

// The other optimizers, static scaling, and a GPU's recipe.
TEST_P(RealStepFeatures, OtherOptimizersAndDevices) {
  const Model& m = GetParam();
  pb::TrainConfig sgd = Config(Precision::kFp16, "all");
  sgd.mutable_optimizer()->set_kind(pb::OptimizerConfig::SGD);
  sgd.mutable_optimizer()->set_momentum(0.9f);
  sgd.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::STATIC);
  pb::TrainConfig adagrad = Config(Precision::kBf16, "all");
  adagrad.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAGRAD);
  adagrad.set_accumulate(2);
  pb::TrainConfig adamw = Config(Precision::kFp32);
  adamw.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAMW);
  adamw.mutable_optimizer()->set_clip_grad_norm(0.5f);
  adamw.set_data_parallel(true);
  adamw.set_debug_precision(1);
  const struct {
    std::string key;
    pb::TrainConfig config;
    bool gpu;
    const char* state_prefix;
  } cases[] = {
      {"sgd_fp16_static_cpu", sgd, false, kSgdMomentumPrefix},
      {"sgd_fp16_static_gpu", sgd, true, kSgdMomentumPrefix},
      {"adagrad_bf16_accumulate_gpu", adagrad, true, kAdagradSumPrefix},
      {"adamw_fp32_dp_debug", adamw, false, kAdamVPrefix},
      {"everything_gpu", Everything(), true, kAdamMPrefix},
  };
  for (const auto& c : cases) {
    const Graph* step = Cached(m.name + "/" + c.key, m, c.config, c.gpu);
    if (step == nullptr) continue;
    const Graph& g = *step;
    absl::Status st = VerifyStepNames(g);
    EXPECT_TRUE(st.ok()) << c.key << ": " << st;
    int state = 0;
    for (const Value* v : g.initializers()) state += absl::StartsWith(v->name, c.state_prefix);
    EXPECT_GT(state, 0) << c.key;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RealStepFeatures, ::testing::ValuesIn(kAllModels),
                         [](const ::testing::TestParamInfo<Model>& info) { return info.param.name; });

// LoRA: the adapters train, with everything else on.
TEST(RealStepLora, GptMini) {
  pb::TrainConfig c = Everything();
  c.set_lora_rank(4);
  c.set_lora_dropout(0.1f);
  const Graph* lora = Cached("gpt_mini/everything_lora", kGptMini, c);
  const Graph* full = Cached("gpt_mini/everything", kGptMini, Everything());
  ASSERT_NE(lora, nullptr);
  ASSERT_NE(full, nullptr);
  absl::Status st = VerifyStepNames(*lora);
  EXPECT_TRUE(st.ok()) << st;
  auto moments = [](const Graph& g) {
    return std::count_if(g.initializers().begin(), g.initializers().end(),
                         [](const Value* v) { return absl::StartsWith(v->name, kAdamMPrefix); });
  };
  EXPECT_GT(moments(*lora), 0);
  EXPECT_NE(moments(*lora), moments(*full));  // the adapters, not the model's weights
}

// Gradient graphs keep their grad/ outputs (the step's optimizer consumes them): the grad/ rules.
TEST(RealGradientGraph, ObeysTheConventions) {
  for (const Model& m : kAllModels) {
    std::unique_ptr<Graph> g = GradientGraph(m);
    absl::Status st = VerifyStepNames(*g);
    EXPECT_TRUE(st.ok()) << m.name << ": " << st;
    EXPECT_FALSE(GradientOutputs(*g).empty()) << m.name;
  }
}

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
