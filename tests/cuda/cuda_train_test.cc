// The whole training step on the GPU against the CPU backend (issue 14's parity goals): the MLP
// fixture (tests/data/optim/mlp.onnx) and the committed models (fashion_cnn, resnet_mini,
// gpt_mini: convolutions, batch norm, pooling, attention) trained on the same batches on both
// devices. fp32 with Adam: every step's loss and the final weights within 1e-3 relative; AMP: the
// loss trajectory within 1e-2. CUDA graphs (MIXTRAIN_CUDA_GRAPHS=1) must give the same bits as
// kernel-by-kernel steps. Skips, saying why, where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "graph/onnx_import.h"
#include "mixtrain/inference_session.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/trainer.h"

namespace mixtrain {
namespace {

std::map<std::string, Tensor> RandomBatch(int step) {
  std::mt19937 rng(500 + step);
  std::normal_distribution<float> n(0, 1);
  Tensor x(DType::kF32, {16, 8});
  Tensor y(DType::kI64, {16});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = n(rng);
  for (int64_t i = 0; i < 16; ++i) y.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 4);
  return {{"x", x}, {"labels", y}};
}

std::unique_ptr<Trainer> MlpTrainer(pb::TrainConfig c, const char* device) {
  c.set_device(device);
  auto t = Trainer::Create(std::string(MT_SOURCE_DIR) + "/tests/data/optim/mlp.onnx", c);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

void TrainBoth(const pb::TrainConfig& c, double loss_rtol, double weight_rtol) {
  absl::Status gpu = CudaAvailable();
  if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, not run: " << gpu.message();
  std::unique_ptr<Trainer> cpu = MlpTrainer(c, "cpu");
  std::unique_ptr<Trainer> cuda = MlpTrainer(c, "cuda");
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(cuda, nullptr);
  ASSERT_STREQ(cuda->device_name(), "cuda");
  for (int s = 0; s < 10; ++s) {
    auto a = cpu->Step(RandomBatch(s));
    auto b = cuda->Step(RandomBatch(s));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->skipped, b->skipped) << "step " << s;
    EXPECT_NEAR(b->loss, a->loss, loss_rtol * std::fabs(a->loss)) << "step " << s;
  }
  if (weight_rtol <= 0) return;
  for (const std::string& p : cpu->ParameterNames()) {
    auto wa = cpu->GetParameter(p);
    auto wb = cuda->GetParameter(p);
    ASSERT_TRUE(wa.ok() && wb.ok());
    double worst = 0;
    for (int64_t i = 0; i < wa->numel(); ++i)
      worst = std::max(worst, std::fabs(wa->GetDouble(i) - wb->GetDouble(i)) / (1e-6 + std::fabs(wa->GetDouble(i))));
    EXPECT_LE(worst, weight_rtol) << p;
  }
}

TEST(CudaTrain, Fp32AdamMatchesTheCpu) {
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::FP32);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  c.mutable_optimizer()->set_lr(1e-2);
  TrainBoth(c, 1e-3, 1e-3);
}

TEST(CudaTrain, Bf16AmpTrajectoryFollowsTheCpu) {
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::BF16);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  c.mutable_optimizer()->set_lr(1e-2);
  TrainBoth(c, 1e-2, 0);
}

TEST(CudaTrain, Fp16DynamicScalingMatchesTheCpu) {
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::FP16);
  c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::DYNAMIC);
  c.mutable_loss_scaler()->set_growth_interval(2);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::SGD);
  c.mutable_optimizer()->set_lr(1e-2);
  TrainBoth(c, 1e-2, 0);
}

// A batch for one of the committed models, drawn from a fixed generator.
std::map<std::string, Tensor> ModelBatch(const std::string& model, int step) {
  std::mt19937 rng(900 + step);
  std::normal_distribution<float> n(0, 1);
  const int64_t b = 8;
  if (model == "gpt_mini") {  // tokens N x 32 (vocabulary 256), next-token labels N x 32
    Tensor x(DType::kI64, {b, 32}), y(DType::kI64, {b, 32});
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<int64_t>()[i] = rng() % 256, y.data_as<int64_t>()[i] = rng() % 256;
    return {{"tokens", x}, {"labels", y}};
  }
  Tensor x(DType::kF32, model == "fashion_cnn" ? std::vector<int64_t>{b, 1, 28, 28} : std::vector<int64_t>{b, 3, 32, 32});
  Tensor y(DType::kI64, {b});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = n(rng);
  for (int64_t i = 0; i < b; ++i) y.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
  return {{"input", x}, {"labels", y}};
}

std::unique_ptr<Trainer> ModelTrainer(const std::string& model, pb::TrainConfig c, const char* device) {
  c.set_device(device);
  if (model == "gpt_mini") c.set_class_axis(-1);
  auto t = Trainer::Create(std::string(MT_SOURCE_DIR) + "/models/" + model + ".onnx", c);
  EXPECT_TRUE(t.ok()) << model << ": " << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

pb::TrainConfig AmpAdam(pb::PrecisionPolicy::LowType low) {
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(low);
  if (low == pb::PrecisionPolicy::FP16) c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::DYNAMIC);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  c.mutable_optimizer()->set_lr(1e-3);
  return c;
}

// Each committed model: fp32 within 1e-3 of the CPU per step, bf16 and fp16 AMP within 1e-2.
TEST(CudaTrain, CommittedModelsFollowTheCpu) {
  absl::Status gpu = CudaAvailable();
  if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, not run: " << gpu.message();
  pb::TrainConfig fp32;
  fp32.mutable_precision()->set_preset(pb::PrecisionPolicy::FP32);
  fp32.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  fp32.mutable_optimizer()->set_lr(1e-3);
  const std::vector<std::pair<pb::TrainConfig, double>> configs = {
      {fp32, 1e-3}, {AmpAdam(pb::PrecisionPolicy::BF16), 1e-2}, {AmpAdam(pb::PrecisionPolicy::FP16), 1e-2}};
  for (const char* model : {"fashion_cnn", "resnet_mini", "gpt_mini"})
    for (const auto& [c, rtol] : configs) {
      SCOPED_TRACE(std::string(model) + " " + c.precision().ShortDebugString());
      std::unique_ptr<Trainer> cpu = ModelTrainer(model, c, "cpu");
      std::unique_ptr<Trainer> cuda = ModelTrainer(model, c, "cuda");
      ASSERT_NE(cpu, nullptr);
      ASSERT_NE(cuda, nullptr);
      for (int s = 0; s < 6; ++s) {
        auto a = cpu->Step(ModelBatch(model, s));
        auto b = cuda->Step(ModelBatch(model, s));
        ASSERT_TRUE(a.ok()) << a.status();
        ASSERT_TRUE(b.ok()) << b.status();
        EXPECT_EQ(a->skipped, b->skipped) << "step " << s;
        EXPECT_NEAR(b->loss, a->loss, rtol * std::fabs(a->loss)) << "step " << s;
      }
    }
}

// The step recorded as a CUDA graph and replayed gives the same bits as launching it kernel by
// kernel: losses read every third step, and every state tensor at the end.
TEST(CudaTrain, CudaGraphStepsEqualKernelByKernelSteps) {
  absl::Status gpu = CudaAvailable();
  if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, not run: " << gpu.message();
  for (const char* model : {"fashion_cnn", "gpt_mini"}) {
    SCOPED_TRACE(model);
    const pb::TrainConfig c = AmpAdam(pb::PrecisionPolicy::FP16);
    unsetenv("MIXTRAIN_CUDA_GRAPHS");
    std::unique_ptr<Trainer> plain = ModelTrainer(model, c, "cuda");
    setenv("MIXTRAIN_CUDA_GRAPHS", "1", 1);
    std::unique_ptr<Trainer> graphs = ModelTrainer(model, c, "cuda");
    unsetenv("MIXTRAIN_CUDA_GRAPHS");
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(graphs, nullptr);
    for (int s = 0; s < 9; ++s) {
      const bool read = s % 3 == 2;
      auto a = plain->Step(ModelBatch(model, s), read);
      auto b = graphs->Step(ModelBatch(model, s), read);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      if (read) EXPECT_EQ(a->loss, b->loss) << "step " << s;
    }
    EXPECT_EQ(plain->SkippedSteps().value(), graphs->SkippedSteps().value());
    auto sa = plain->State();
    auto sb = graphs->State();
    ASSERT_TRUE(sa.ok() && sb.ok());
    for (const auto& [name, t] : *sa) EXPECT_TRUE(t.Identical(sb->at(name))) << "state '" << name << "' differs";
  }
}

// InferenceSession on the GPU (no inference passes there) against the CPU session: the committed
// models' outputs within 1e-3 relative in fp32.
TEST(CudaInference, CommittedModelsMatchTheCpu) {
  absl::Status gpu = CudaAvailable();
  if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, not run: " << gpu.message();
  for (const char* model : {"mlp", "fashion_cnn", "resnet_mini", "gpt_mini"}) {
    SCOPED_TRACE(model);
    const std::string path = std::string(MT_SOURCE_DIR) + "/models/" + model + ".onnx";
    InferenceOptions o;
    auto cpu = InferenceSession::Create(path, o);
    o.device = "cuda";
    auto cuda = InferenceSession::Create(path, o);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_EQ((*cuda)->DeviceName(), "cuda");
    std::map<std::string, Tensor> batch =
        std::string(model) == "mlp" ? std::map<std::string, Tensor>{} : ModelBatch(model, 0);
    TensorMap feeds;
    if (std::string(model) == "mlp") {
      std::mt19937 rng(3);
      std::normal_distribution<float> n(0, 1);
      std::vector<float> v(4 * 784);
      for (float& e : v) e = n(rng);
      feeds.emplace("input", HostTensor::FromVector<float>({4, 784}, v).value());
    } else {
      const std::string in = std::string(model) == "gpt_mini" ? "tokens" : "input";
      const Tensor& t = batch.at(in);
      feeds.emplace(in, std::string(model) == "gpt_mini"
                            ? HostTensor::FromVector<int64_t>(t.dims(), std::vector<int64_t>(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel())).value()
                            : HostTensor::FromVector<float>(t.dims(), std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel())).value());
    }
    auto a = (*cpu)->Run(feeds);
    auto b = (*cuda)->Run(feeds);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    for (const auto& [name, ta] : *a) {
      const HostTensor& tb = b->at(name);
      ASSERT_EQ(ta.shape(), tb.shape());
      const float* pa = ta.data<float>();
      const float* pb = tb.data<float>();
      ASSERT_TRUE(pa != nullptr && pb != nullptr);
      double worst = 0;
      for (int64_t i = 0; i < ta.num_elements(); ++i)
        worst = std::max(worst, std::fabs(double(pa[i]) - pb[i]) / (1e-3 + std::fabs(double(pa[i]))));
      EXPECT_LE(worst, 1e-3) << name;
    }
  }
}

}  // namespace
}  // namespace mixtrain
