// The public API (include/mixtrain/) end to end on models/mlp.onnx: training, deferred loss reads,
// checkpoints, export + InferenceSession, parameter access, graph dumps, and the error model —
// every caller mistake comes back as a Status naming what was wrong, never a crash.
#include <cstdio>
#include <fstream>
#include <future>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::ElementType;
using mixtrain::HostTensor;
using mixtrain::TensorMap;
using mixtrain::Trainer;

const std::string kMlp = std::string(MT_SOURCE_DIR) + "/models/mlp.onnx";

std::string TempPath(const std::string& name) {
  return std::string(MT_BINARY_DIR) + "/public_api_test." + name;
}

TensorMap MlpBatch(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n * 784);
  for (float& v : x) v = normal(rng);
  std::vector<int64_t> y(n);
  for (int64_t& v : y) v = rng() % 10;
  TensorMap b;
  b.emplace("input", *HostTensor::FromVector<float>({n, 784}, x));
  b.emplace("labels", *HostTensor::FromVector<int64_t>({n}, y));
  return b;
}

std::unique_ptr<Trainer> MakeMlpTrainer(mixtrain::TrainConfig config = {}) {
  auto t = Trainer::Create(kMlp, config);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

bool Mentions(const absl::Status& s, const std::string& what) {
  return s.message().find(what) != absl::string_view::npos;
}

TEST(PublicApiTest, TrainsAndReadsTheLossOnlyWhenAsked) {
  auto t = MakeMlpTrainer();
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->ParameterNames().empty());
  // The default dtype (auto) is bf16 AMP where the CPU has native bf16, fp32 with a note elsewhere.
  if (mixtrain::GetCpuInfo().native_bf16) {
    EXPECT_EQ(t->precision().preset, "amp");
    EXPECT_EQ(t->precision().low_type, ElementType::kBFloat16);
    EXPECT_EQ(t->precision().note, "");
  } else {
    EXPECT_EQ(t->precision().preset, "fp32");
    EXPECT_EQ(t->precision().low_type, ElementType::kFloat32);
    EXPECT_NE(t->precision().note.find("--dtype=bf16"), std::string::npos) << t->precision().note;
  }
  std::vector<mixtrain::TensorInfo> ins = t->BatchInputs();
  ASSERT_EQ(ins.size(), 2u);
  TensorMap batch = MlpBatch(16, 1);
  auto first = t->Step(batch);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->loss.has_value());
  EXPECT_EQ(first->step, 1);
  auto quiet = t->Step(batch, {.read_loss = false});
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_FALSE(quiet->loss.has_value());
  float last = 0;
  for (int i = 0; i < 8; ++i) {
    auto r = t->Step(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    last = *r->loss;
  }
  EXPECT_LT(last, *first->loss);  // one batch, learned by heart
  EXPECT_EQ(t->steps_taken(), 10);
  auto e = t->Evaluate(batch);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->examples, 16);
}

TEST(PublicApiTest, AsyncStepsRunInOrderAndMatchSyncSteps) {
  mixtrain::TrainConfig c;
  c.precision.preset = mixtrain::TrainConfig::Precision::Preset::kFp32;
  std::vector<TensorMap> batches;
  for (uint32_t i = 0; i < 4; ++i) batches.push_back(MlpBatch(8, 10 + i));
  auto sync = MakeMlpTrainer(c);
  ASSERT_NE(sync, nullptr);
  std::vector<float> expected;
  for (const TensorMap& b : batches) expected.push_back(*sync->Step(b)->loss);

  auto async = MakeMlpTrainer(c);
  ASSERT_NE(async, nullptr);
  std::vector<std::future<absl::StatusOr<mixtrain::StepResult>>> pending;
  for (const TensorMap& b : batches) pending.push_back(async->StepAsync(b));
  EXPECT_EQ(async->steps_taken(), 4);  // waits for the queued steps
  for (size_t i = 0; i < pending.size(); ++i) {
    absl::StatusOr<mixtrain::StepResult> r = pending[i].get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(*r->loss, expected[i]);
  }
  // Errors come back through the future; destroying the trainer runs what is still queued.
  auto bad = async->StepAsync({});
  auto last = async->StepAsync(batches[0]);
  async.reset();
  EXPECT_FALSE(bad.get().ok());
  EXPECT_TRUE(last.get().ok());
}

TEST(PublicApiTest, TotalStepsSetTheCosineHorizon) {
  mixtrain::TrainConfig c;
  c.optimizer.lr = 0.1f;
  c.schedule.kind = mixtrain::TrainConfig::Schedule::Kind::kCosine;
  auto t = MakeMlpTrainer(c);
  ASSERT_NE(t, nullptr);
  t->SetTotalSteps(4);
  TensorMap batch = MlpBatch(4, 5);
  std::vector<float> lrs;
  for (int i = 0; i < 3; ++i) lrs.push_back(t->Step(batch, {.read_loss = false})->learning_rate);
  EXPECT_FLOAT_EQ(lrs[0], 0.1f);
  EXPECT_FLOAT_EQ(lrs[2], 0.05f);  // half way: 0.1 * (1 + cos(pi / 2)) / 2
}

TEST(PublicApiTest, CheckpointResumesTheSameTrajectory) {
  mixtrain::TrainConfig c;
  c.precision.preset = mixtrain::TrainConfig::Precision::Preset::kFp32;
  auto a = MakeMlpTrainer(c);
  ASSERT_NE(a, nullptr);
  TensorMap batch = MlpBatch(8, 2);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->Step(batch).ok());
  const std::string ck = TempPath("ckpt");
  ASSERT_TRUE(a->SaveCheckpoint(ck, {.epoch = 2, .batch = 5}).ok());
  std::vector<float> expected;
  for (int i = 0; i < 2; ++i) expected.push_back(*a->Step(batch)->loss);

  auto b = MakeMlpTrainer(c);
  ASSERT_NE(b, nullptr);
  auto pos = b->LoadCheckpoint(ck);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(pos->epoch, 2);
  EXPECT_EQ(pos->batch, 5);
  EXPECT_EQ(b->steps_taken(), 3);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(*b->Step(batch)->loss, expected[i]);

  // The checkpoint's run, read without a Trainer (what `train --resume=CKPT` starts from).
  auto info = mixtrain::ReadCheckpointInfo(ck);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->steps, 3);
  EXPECT_EQ(info->position.epoch, 2);
  EXPECT_EQ(info->position.batch, 5);
  EXPECT_EQ(info->config.precision.preset, mixtrain::TrainConfig::Precision::Preset::kFp32);
  EXPECT_FALSE(info->precision.empty());
  std::remove(ck.c_str());
  auto missing = mixtrain::ReadCheckpointInfo(ck);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(ck), std::string::npos) << missing.status();
}

TEST(PublicApiTest, ExportedModelServesTheTrainedWeights) {
  mixtrain::TrainConfig c;
  c.precision.preset = mixtrain::TrainConfig::Precision::Preset::kFp32;
  auto t = MakeMlpTrainer(c);
  ASSERT_NE(t, nullptr);
  TensorMap batch = MlpBatch(4, 3);
  ASSERT_TRUE(t->Step(batch).ok());
  const std::string path = TempPath("export.onnx");
  ASSERT_TRUE(t->ExportInferenceModel(path).ok());
  auto s = mixtrain::InferenceSession::Create(path);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ((*s)->Inputs().size(), 1u);
  EXPECT_EQ((*s)->Inputs()[0].name, "input");
  EXPECT_EQ((*s)->Inputs()[0].shape, (std::vector<int64_t>{-1, 784}));
  auto out = (*s)->Run({{"input", batch.at("input")}});
  ASSERT_TRUE(out.ok()) << out.status();
  const HostTensor& logits = out->at((*s)->OutputNames()[0]);
  EXPECT_EQ(logits.shape(), (std::vector<int64_t>{4, 10}));
  ASSERT_NE(logits.data<float>(), nullptr);

  auto missing = (*s)->Run({});
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(Mentions(missing.status(), "input")) << missing.status();
  auto bad_fetch = (*s)->Run({{"input", batch.at("input")}}, {"no_such_output"});
  EXPECT_FALSE(bad_fetch.ok());
  std::remove(path.c_str());
}

// InferenceOptions::device: "auto" runs where it can and says why when not the GPU; "cuda" without
// a usable GPU is one error naming the reason; anything else names the option. (The GPU path runs
// in tests/cuda where a GPU is.)
TEST(PublicApiTest, InferenceDeviceChoice) {
  mixtrain::InferenceOptions o;
  auto cpu = mixtrain::InferenceSession::Create(kMlp, o);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->DeviceName(), "cpu");
  EXPECT_EQ((*cpu)->DeviceNote(), "");
  o.device = "auto";
  auto a = mixtrain::InferenceSession::Create(kMlp, o);
  ASSERT_TRUE(a.ok()) << a.status();
  o.device = "cuda";
  auto c = mixtrain::InferenceSession::Create(kMlp, o);
  if ((*a)->DeviceName() == "cpu") {
    EXPECT_FALSE((*a)->DeviceNote().empty()) << "auto fell back to the CPU without saying why";
    ASSERT_FALSE(c.ok());
    EXPECT_TRUE(Mentions(c.status(), "--device=cuda")) << c.status();
  } else {
    EXPECT_TRUE(c.ok()) << c.status();
  }
  o.device = "tpu";
  auto bad = mixtrain::InferenceSession::Create(kMlp, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Mentions(bad.status(), "InferenceOptions::device")) << bad.status();
}

TEST(PublicApiTest, ParametersByName) {
  auto t = MakeMlpTrainer();
  ASSERT_NE(t, nullptr);
  const std::string name = t->ParameterNames()[0];
  auto p = t->GetParameter(name);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->type(), ElementType::kFloat32);  // fp32 master weights
  std::vector<float> ones(p->num_elements(), 1.0f);
  HostTensor q = *HostTensor::FromVector<float>(p->shape(), ones);
  ASSERT_TRUE(t->SetParameter(name, q).ok());
  EXPECT_EQ(*t->GetParameter(name), q);

  absl::Status unknown = t->GetParameter("no_such_weight").status();
  EXPECT_FALSE(unknown.ok());
  EXPECT_TRUE(Mentions(unknown, "no_such_weight")) << unknown;
  absl::Status wrong_shape = t->SetParameter(name, HostTensor::Scalar(1.0f));
  EXPECT_FALSE(wrong_shape.ok());
  absl::Status wrong_type = t->SetParameter(name, *HostTensor::Zeros(ElementType::kInt64, p->shape()));
  EXPECT_FALSE(wrong_type.ok());
}

TEST(PublicApiTest, TransformedGraphInThreeFormats) {
  auto t = MakeMlpTrainer();
  ASSERT_NE(t, nullptr);
  auto text = t->TransformedGraph();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("Gemm"), std::string::npos);
  auto dot = t->TransformedGraph(mixtrain::GraphFormat::kDot);
  ASSERT_TRUE(dot.ok());
  EXPECT_EQ(dot->rfind("digraph", 0), 0u);
  auto onnx = t->TransformedGraph(mixtrain::GraphFormat::kOnnx);
  ASSERT_TRUE(onnx.ok());
  EXPECT_GT(onnx->size(), 100000u);  // the weights are inline
}

TEST(PublicApiTest, CallerMistakesAreStatuses) {
  auto missing = Trainer::Create("/no/such/model.onnx");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Mentions(missing.status(), "/no/such/model.onnx")) << missing.status();
  EXPECT_FALSE(Trainer::CreateFromBytes("not an onnx model").ok());
  EXPECT_FALSE(mixtrain::InferenceSession::CreateFromBytes(std::string(100, '\xff')).ok());

  mixtrain::TrainConfig bad;
  bad.accumulate = 0;
  EXPECT_FALSE(Trainer::Create(kMlp, bad).ok());
  bad = {};
  bad.output = "no_such_output";
  auto no_output = Trainer::Create(kMlp, bad);
  ASSERT_FALSE(no_output.ok());
  EXPECT_TRUE(Mentions(no_output.status(), "no_such_output")) << no_output.status();
  bad = {};
  bad.device = "tpu";
  EXPECT_FALSE(Trainer::Create(kMlp, bad).ok());

  auto t = MakeMlpTrainer();
  ASSERT_NE(t, nullptr);
  TensorMap batch = MlpBatch(4, 4);
  TensorMap no_labels = batch;
  no_labels.erase("labels");
  auto r = t->Step(no_labels);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Mentions(r.status(), "labels")) << r.status();
  TensorMap wrong_type = batch;
  wrong_type["input"] = *HostTensor::Zeros(ElementType::kInt32, {4, 784});
  EXPECT_FALSE(t->Step(wrong_type).ok());
  TensorMap wrong_shape = batch;
  wrong_shape["input"] = *HostTensor::Zeros(ElementType::kFloat32, {4, 783});
  EXPECT_FALSE(t->Step(wrong_shape).ok());
  TensorMap wrong_rank = batch;
  wrong_rank["labels"] = *HostTensor::Zeros(ElementType::kInt64, {4, 2});
  EXPECT_FALSE(t->Step(wrong_rank).ok());
  EXPECT_FALSE(t->Evaluate(no_labels).ok());
  EXPECT_EQ(t->steps_taken(), 0);  // failed steps change nothing

  EXPECT_FALSE(t->LoadCheckpoint("/no/such/checkpoint").ok());
  const std::string junk = TempPath("junk");
  std::ofstream(junk) << "this is not a checkpoint";
  auto loaded = t->LoadCheckpoint(junk);
  EXPECT_FALSE(loaded.ok());
  std::remove(junk.c_str());
  EXPECT_FALSE(t->SaveCheckpoint("/no/such/dir/ckpt").ok());
  EXPECT_FALSE(t->ExportInferenceModel("/no/such/dir/model.onnx").ok());
  EXPECT_FALSE(t->ExportInferenceModel(TempPath("int.onnx"), ElementType::kInt32).ok());
  EXPECT_TRUE(t->Step(batch).ok());  // and the trainer still works
}

TEST(PublicApiTest, HostTensorChecksItsInputs) {
  EXPECT_FALSE(HostTensor::FromVector<float>({2, 3}, {1, 2, 3}).ok());
  EXPECT_FALSE(HostTensor::Zeros(ElementType::kFloat32, {2, -1}).ok());
  absl::Status huge = HostTensor::Zeros(ElementType::kFloat32, {1 << 20, 1 << 20, 1 << 9}).status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;  // 8 PiB: no exception escapes
  HostTensor t = *HostTensor::FromVector<int64_t>({3}, {1, 2, 3});
  EXPECT_EQ(t.data<float>(), nullptr);
  ASSERT_NE(t.data<int64_t>(), nullptr);
  EXPECT_EQ(t.ToFloats(), (std::vector<float>{1, 2, 3}));
  uint16_t bf16_one = 0x3f80;
  HostTensor h = *HostTensor::FromBytes(ElementType::kBFloat16, {1}, &bf16_one, 2);
  EXPECT_EQ(h.ToFloats(), std::vector<float>{1.0f});
  EXPECT_STREQ(mixtrain::ElementTypeName(ElementType::kBFloat16), "bf16");
  EXPECT_EQ(mixtrain::ElementSize(ElementType::kInt64), 8u);
}

}  // namespace
