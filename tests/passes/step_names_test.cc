// VerifyStepNames (passes/step_names.h) on the training steps the pipeline builds from the models
// under models/: fp32, bf16 AMP and fp16 AMP with dynamic loss scaling, each with and without
// recompute = all, and with gradient accumulation, clipping, data parallel, the precision debugger
// and every optimizer. Each rule broken: step_names_broken_test.cc.
#include "tests/passes/step_names_test_util.h"

namespace mixtrain {
namespace {

using namespace step_names_test;  // NOLINT: the helpers of both halves of this test

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

}  // namespace
}  // namespace mixtrain
