// LoRA against HF PEFT (tests/data/lora/, made by tools/lora/make_lora_fixture.py) on a
// transformers GPT-2 (dynamo export; the default targets, found from the graph, must be the ones
// PEFT was told to adapt) and on a torch.nn CNN (TorchScript export; adapters on four Conv kernels
// and the Linear head, named by --lora-targets): the same initial adapters (the fixture's adapter
// file, read with lora_init), one batch: the loss and every adapter gradient; 10 Adam steps in
// fp32 and in bf16 AMP; the merged export's logits against PEFT's merge_and_unload() run in
// onnxruntime.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/host_evaluator.h"
#include "kernels/backend.h"
#include "api/convert.h"
#include "graph/onnx_import.h"
#include "mixtrain/inference_session.h"
#include "passes/lora.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/npy.h"
#include "runtime/session.h"
#include "runtime/trainer.h"

namespace mixtrain {
namespace {

// This CPU's target (the step is fp32: the low type's nativeness does not matter).
Target CpuTargetFp32() { return CpuBackend().target(); }

const std::string kDir = std::string(MT_SOURCE_DIR) + "/tests/data/lora/";

struct Fixture {
  const char* name;     // tests/data/lora/<name>.{onnx,npz,adapter.onnx}
  const char* input;    // the model's input in the npz
  int class_axis;
  const char* targets;  // --lora-targets ("": the defaults)
  size_t adapters;      // A and B of each target
};
const Fixture kFixtures[] = {
    {"gpt2_lora", "input_ids", -1, "", 16},
    {"cnn_lora", "input", 1, "(conv[1-4]|fc)\\.weight", 10},
};

std::string ModelOf(const Fixture& f) { return kDir + f.name + ".onnx"; }

pb::TrainConfig Config(const Fixture& f, pb::PrecisionPolicy::Preset preset) {
  pb::TrainConfig c;
  c.set_loss("cross_entropy");
  c.set_class_axis(f.class_axis);
  if (*f.targets != 0) c.set_lora_targets(f.targets);
  c.mutable_precision()->set_preset(preset);
  c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::BF16);
  c.mutable_optimizer()->set_lr(1e-3f);
  c.set_device("cpu");
  c.set_lora_rank(4);
  c.set_lora_alpha(8);
  c.set_lora_init(kDir + f.name + ".adapter.onnx");
  return c;
}

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dims(), b.dims());
  if (a.dims() != b.dims()) return INFINITY;
  const Tensor fa = ConvertFloat(a, DType::kF32), fb = ConvertFloat(b, DType::kF32);
  double m = 0;
  for (int64_t i = 0; i < fa.numel(); ++i)
    m = std::max(m, static_cast<double>(std::fabs(fa.data_as<float>()[i] - fb.data_as<float>()[i])));
  return m;
}

class LoraParity : public ::testing::TestWithParam<Fixture> {
 protected:
  void SetUp() override {
    const Fixture& f = GetParam();
    auto ref = ReadNpz(kDir + f.name + ".npz");
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref_ = *std::move(ref);
    batch_ = {{f.input, ref_.at(f.input)}, {"labels", ref_.at("labels")}};
    for (const auto& [name, t] : ref_)
      if (name.rfind("grad/", 0) == 0) adapters_.insert(name.substr(5));
    ASSERT_EQ(adapters_.size(), f.adapters);
  }
  std::map<std::string, Tensor> ref_, batch_;
  std::set<std::string> adapters_;
};

// GPT-2's by default, the CNN's by --lora-targets: what PEFT adapted, and nothing else trains.
TEST_P(LoraParity, TargetsAreWhatPeftAdapted) {
  auto t = Trainer::Create(ModelOf(GetParam()), Config(GetParam(), pb::PrecisionPolicy::FP32));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<std::string> params = (*t)->ParameterNames();
  EXPECT_EQ(std::set<std::string>(params.begin(), params.end()), adapters_);
}

TEST_P(LoraParity, LossAndAdapterGradients) {
  auto model = ImportOnnxFile(ModelOf(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  auto recipe = ResolveTrainingRecipe(Config(GetParam(), pb::PrecisionPolicy::FP32), **model, CpuTargetFp32());
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  ASSERT_TRUE(PrepareModel(**model, *recipe).ok());
  PassManager pm;
  pm.Add(MakeLoraPass(recipe->lora));
  ASSERT_TRUE(pm.Run(**model).ok());
  GradientGraphOptions opt;
  opt.autodiff.evaluator = &EvaluateOnHost;
  opt.loss = recipe->loss;
  auto g = BuildGradientGraph(**model, opt);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<std::string> fetch{kLossName};
  for (const std::string& grad : GradientOutputs(**g)) fetch.push_back(grad);
  ASSERT_EQ(fetch.size(), adapters_.size() + 1) << "only the adapters get a gradient";
  auto session = Session::Create(**g);
  ASSERT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run(batch_, fetch);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR((*out)[0].GetDouble(0), ref_.at("loss").GetDouble(0), 1e-4);
  double worst = 0;
  for (size_t i = 1; i < fetch.size(); ++i) {
    const std::string& name = fetch[i];
    ASSERT_TRUE(ref_.contains(name)) << name;
    const double d = MaxAbsDiff((*out)[i], ref_.at(name));
    EXPECT_LE(d, 1e-4) << name;
    worst = std::max(worst, d);
  }
  std::printf("%s vs PEFT: |loss diff| %.3g, max |adapter gradient diff| %.3g\n", GetParam().name,
              std::fabs((*out)[0].GetDouble(0) - ref_.at("loss").GetDouble(0)), worst);
}

// ||a - b|| / ||b||.
double RelativeDiff(const Tensor& a, const Tensor& b) {
  const Tensor fa = ConvertFloat(a, DType::kF32), fb = ConvertFloat(b, DType::kF32);
  double num = 0, den = 0;
  for (int64_t i = 0; i < fb.numel(); ++i) {
    const double d = fa.data_as<float>()[i] - fb.data_as<float>()[i];
    num += d * d;
    den += static_cast<double>(fb.data_as<float>()[i]) * fb.data_as<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The losses within `tol`; the adapters within `tol` elementwise (fp32) or in relative norm
// (bf16: Adam moves each element by about lr per step whatever the gradient's size, so where a
// gradient is near zero its bf16 rounding flips the step's sign).
void AdamSteps(const Fixture& f, const std::map<std::string, Tensor>& ref, const std::map<std::string, Tensor>& batch,
               pb::PrecisionPolicy::Preset preset, double tol) {
  auto t = Trainer::Create(ModelOf(f), Config(f, preset));
  ASSERT_TRUE(t.ok()) << t.status();
  const Tensor& losses = ref.at("adam_losses");
  double worst_loss = 0, worst_param = 0;
  for (int64_t i = 0; i < losses.numel(); ++i) {
    auto r = (*t)->Step(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(r->loss, losses.GetDouble(i), tol) << "step " << i;
    worst_loss = std::max(worst_loss, std::fabs(r->loss - losses.GetDouble(i)));
  }
  for (const std::string& name : (*t)->ParameterNames()) {
    auto p = (*t)->GetParameter(name);
    ASSERT_TRUE(p.ok());
    const Tensor& want = ref.at("adam_final/" + name);
    const double d = preset == pb::PrecisionPolicy::FP32 ? MaxAbsDiff(*p, want) : RelativeDiff(*p, want);
    EXPECT_LE(d, tol) << name;
    worst_param = std::max(worst_param, d);
  }
  std::printf("%s, 10 Adam steps vs PEFT: max |loss diff| %.3g, adapters %.3g (%s; tolerance %.0e)\n", f.name, worst_loss,
              worst_param, preset == pb::PrecisionPolicy::FP32 ? "max abs diff" : "max relative norm diff", tol);
}

TEST_P(LoraParity, AdamFp32) { AdamSteps(GetParam(), ref_, batch_, pb::PrecisionPolicy::FP32, 1e-3); }
TEST_P(LoraParity, AdamBf16Amp) { AdamSteps(GetParam(), ref_, batch_, pb::PrecisionPolicy::AMP, 5e-2); }

TEST_P(LoraParity, MergedExportEqualsPeftMergeAndUnload) {
  const Fixture& f = GetParam();
  auto t = Trainer::Create(ModelOf(f), Config(f, pb::PrecisionPolicy::FP32));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string path = testing::TempDir() + "/lora_merged." + std::to_string(getpid()) + ".onnx";
  ASSERT_TRUE((*t)->ExportInferenceModel(path).ok());
  // The merged file is the model: its own inputs, outputs and weights (names, shapes), no adapter.
  auto merged = ImportOnnxFile(path);
  auto original = ImportOnnxFile(ModelOf(f));
  ASSERT_TRUE(merged.ok() && original.ok());
  for (const Value* v : (*original)->initializers()) {
    const Value* m = (*merged)->FindValue(v->name);
    ASSERT_TRUE(m != nullptr && m->is_initializer()) << v->name;
    EXPECT_EQ(m->initializer->dims(), v->initializer->dims()) << v->name;
  }
  for (const Value* v : (*merged)->initializers()) EXPECT_EQ(v->name.find(".lora_"), std::string::npos) << v->name;
  ASSERT_EQ((*merged)->outputs().size(), (*original)->outputs().size());
  EXPECT_EQ((*merged)->outputs()[0]->name, (*original)->outputs()[0]->name);
  auto session = InferenceSession::Create(path);
  ASSERT_TRUE(session.ok()) << session.status();
  auto input = api::ToHostTensor(batch_.at(f.input));
  ASSERT_TRUE(input.ok());
  auto out = (*session)->Run({{f.input, *input}});
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor logits = api::ToTensor(out->at("logits"));
  const double d = MaxAbsDiff(logits, ref_.at("merged_logits"));
  EXPECT_LE(d, 1e-4);
  std::printf("%s: merged export vs PEFT merge_and_unload in onnxruntime: max |logit diff| %.3g\n", f.name, d);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Peft, LoraParity, ::testing::ValuesIn(kFixtures),
                         [](const ::testing::TestParamInfo<Fixture>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace mixtrain
