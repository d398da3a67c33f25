// The runtime on a device with memory of its own (a GPU's, as CUDA has), tested without a GPU.
// SeparateMemoryDevice hands out fresh host blocks filled with NaN bytes and does not share host
// memory, so the Session must copy every initializer, feed and plan constant in and every fetch
// and state read out; its type is the CPU's, so the CPU kernels run on its buffers. A Session or
// Trainer on it matches the CPU device bit for bit only if none of those copies is missing.
// Also: the planner and the Trainer name every op a device has no kernel for before anything runs,
// and --device=cuda without a usable GPU is a one-line error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "graph/onnx_import.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/planner.h"
#include "runtime/session.h"
#include "runtime/trainer.h"

namespace mixtrain {
namespace {

class SeparateMemoryDevice final : public Device {
 public:
  DeviceType type() const override { return DeviceType::kCPU; }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    const size_t n = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, n == 0 ? 64 : n);
    std::memset(p, 0xFF, n == 0 ? 64 : n);  // NaN in every float type: a missed upload shows
    live_.insert(p);
    return p;
  }
  void Free(void* p) override {
    EXPECT_EQ(live_.erase(p), 1u) << "freed a block this device did not allocate";
    std::free(p);
  }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    ++uploads;
    std::memcpy(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    ++downloads;
    std::memcpy(dst, src, bytes);
  }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void Synchronize() override {}
  void* stream() override { return nullptr; }
  bool shares_host_memory() const override { return false; }

  int uploads = 0, downloads = 0;

 private:
  std::set<void*> live_;
};

Tensor F32(std::vector<int64_t> dims, std::vector<float> v) {
  return Tensor::FromVector<float>(DType::kF32, std::move(dims), v);
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}

// w <- w + x * (a * b), y = x * w (old w): a feed, a state update, and a product of two
// read-only initializers that planning folds into a constant.
std::unique_ptr<Graph> Accumulator() {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({3}));
  g->AddInput(x);
  Value* w = g->AddInitializer("w", F32({3}, {1, 2, 3}));
  Value* a = g->AddInitializer("a", F32({3}, {2, 2, 2}));
  Value* b = g->AddInitializer("b", F32({3}, {0.5f, 1, 4}));
  Value* ab = g->AddNode("Mul", {a, b}, 1, "fold_me")->output(0);
  Value* y = g->AddNode("Mul", {x, w}, 1, "use_w")->output(0);
  Value* step = g->AddNode("Mul", {x, ab}, 1, "step")->output(0);
  Value* w_new = g->AddNode("Add", {w, step}, 1, "update")->output(0);
  g->AddOutput(y);
  g->AddOutput(w_new);
  return g;
}

TEST(DeviceSession, InitializersFeedsConstantsAndStateGoThroughCopies) {
  auto device = std::make_shared<SeparateMemoryDevice>();
  auto g = Accumulator();
  SessionOptions o;
  o.run_on = device;
  o.state_updates[g->outputs()[1]->name] = "w";
  auto s = Session::Create(*g, o);
  ASSERT_TRUE(s.ok()) << s.status();
  // Run 1: y = x * [1,2,3]; w = [1,2,3] + x * [1,2,8].
  auto out = (*s)->Run({{"x", F32({3}, {1, 1, 1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Values((*out)[1]), (std::vector<float>{2, 4, 11}));
  EXPECT_GE((*s)->last_plan_stats()->folded_nodes, 1) << "the test needs a folded constant";
  // Run 2 reads the updated w from the device.
  out = (*s)->Run({{"x", F32({3}, {2, 0, 1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{4, 0, 11}));
  auto w = (*s)->GetInitializer("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(Values(*w), (std::vector<float>{4, 4, 19}));
  // A read-only initializer reads back as it was; the graph's tensor is untouched.
  EXPECT_EQ(Values(*(*s)->GetInitializer("a")), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(Values(*g->FindValue("w")->initializer), (std::vector<float>{1, 2, 3}));
  // Setting state writes the device copy: the next run reads it.
  ASSERT_TRUE((*s)->SetInitializer("w", F32({3}, {0, 0, 1})).ok());
  out = (*s)->Run({{"x", F32({3}, {5, 5, 5})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{0, 0, 5}));
  EXPECT_EQ(Values((*out)[1]), (std::vector<float>{5, 10, 41}));
  // Setting a folded initializer replans with the new contents (a*b = [4,4,4] now).
  ASSERT_TRUE((*s)->SetInitializer("b", F32({3}, {2, 2, 2})).ok());
  out = (*s)->Run({{"x", F32({3}, {1, 1, 1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[1]), (std::vector<float>{9, 14, 45}));
  EXPECT_GT(device->uploads, 0);
  EXPECT_GT(device->downloads, 0);
}

// Batches drawn from a fixed generator for models/fashion_cnn.onnx.
std::map<std::string, Tensor> CnnBatch(int step) {
  std::mt19937 rng(77 + step);
  std::normal_distribution<float> n(0, 1);
  Tensor x(DType::kF32, {8, 1, 28, 28});
  Tensor y(DType::kI64, {8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = n(rng);
  for (int64_t i = 0; i < 8; ++i) y.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
  return {{"input", x}, {"labels", y}};
}

std::unique_ptr<Trainer> CnnTrainer(const pb::TrainConfig& c, std::shared_ptr<Device> device) {
  auto g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/fashion_cnn.onnx");
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  auto t = Trainer::CreateFromGraph(std::move(*g), c, nullptr, std::move(device));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// The whole training step (fp16 AMP: casts, dynamic loss scaling, Adam)
// and evaluation on the separate-memory device equal the CPU device's, state included.
TEST(DeviceSession, TrainerMatchesTheCpuDeviceBitForBit) {
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::FP16);
  c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::DYNAMIC);
  c.mutable_loss_scaler()->set_growth_interval(2);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  c.mutable_optimizer()->set_lr(1e-3);
  auto device = std::make_shared<SeparateMemoryDevice>();
  std::unique_ptr<Trainer> on_cpu = CnnTrainer(c, CpuBackend().MakeDevice().value());
  std::unique_ptr<Trainer> off_host = CnnTrainer(c, device);
  ASSERT_NE(on_cpu, nullptr);
  ASSERT_NE(off_host, nullptr);
  EXPECT_STREQ(off_host->device_name(), "cpu");
  for (int s = 0; s < 4; ++s) {
    auto a = on_cpu->Step(CnnBatch(s));
    auto b = off_host->Step(CnnBatch(s), /*read_loss=*/s % 2 == 0);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    if (s % 2 == 0) {
      EXPECT_EQ(a->loss, b->loss) << "step " << s;
      EXPECT_EQ(a->loss_scale, b->loss_scale) << "step " << s;
      EXPECT_TRUE(std::isfinite(b->loss));
    }
    EXPECT_EQ(a->skipped, b->skipped) << "step " << s;
  }
  auto sa = on_cpu->State();
  auto sb = off_host->State();
  ASSERT_TRUE(sa.ok() && sb.ok());
  ASSERT_EQ(sa->size(), sb->size());
  for (const auto& [name, t] : *sa) EXPECT_TRUE(t.Identical(sb->at(name))) << "state '" << name << "' differs";
  auto ea = on_cpu->Evaluate(CnnBatch(100));
  auto eb = off_host->Evaluate(CnnBatch(100));
  ASSERT_TRUE(ea.ok() && eb.ok());
  EXPECT_EQ(ea->loss_sum, eb->loss_sum);
  EXPECT_EQ(ea->counts.correct, eb->counts.correct);
  // A parameter set through the API reaches the device.
  const std::string p = on_cpu->ParameterNames()[0];
  Tensor zero = *on_cpu->GetParameter(p);
  std::memset(zero.data(), 0, zero.nbytes());
  ASSERT_TRUE(on_cpu->SetParameter(p, zero).ok());
  ASSERT_TRUE(off_host->SetParameter(p, zero).ok());
  EXPECT_TRUE(off_host->GetParameter(p)->Identical(zero));
  auto a = on_cpu->Step(CnnBatch(9));
  auto b = off_host->Step(CnnBatch(9));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->loss, b->loss);
}

// A step that does not read its loss copies nothing back from a device with its own memory (on a
// GPU: no host sync per step); the device counts the skipped updates, which agree with the CPU
// device's per-step flags. The huge initial scale makes the first fp16 steps overflow.
TEST(DeviceSession, StepsWithoutTheLossCopyNothingBack) {
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::FP16);
  c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::DYNAMIC);
  c.mutable_loss_scaler()->set_init_scale(1e30f);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  auto device = std::make_shared<SeparateMemoryDevice>();
  std::unique_ptr<Trainer> on_cpu = CnnTrainer(c, CpuBackend().MakeDevice().value());
  std::unique_ptr<Trainer> off_host = CnnTrainer(c, device);
  ASSERT_NE(on_cpu, nullptr);
  ASSERT_NE(off_host, nullptr);
  int64_t skipped = 0;
  for (int s = 0; s < 5; ++s) {
    auto a = on_cpu->Step(CnnBatch(s));
    ASSERT_TRUE(a.ok()) << a.status();
    skipped += a->skipped;
    const int downloads = device->downloads;
    auto b = off_host->Step(CnnBatch(s), /*read_loss=*/false);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(device->downloads, downloads) << "step " << s << " copied something back";
    EXPECT_FALSE(b->skipped);  // not read
  }
  EXPECT_GE(skipped, 2) << "the scale of 1e30 should overflow fp16 for a few steps";
  EXPECT_EQ(on_cpu->SkippedSteps().value(), skipped);
  EXPECT_EQ(off_host->SkippedSteps().value(), skipped);
  auto sa = on_cpu->State();
  auto sb = off_host->State();
  ASSERT_TRUE(sa.ok() && sb.ok());
  for (const auto& [name, t] : *sa) EXPECT_TRUE(t.Identical(sb->at(name))) << "state '" << name << "' differs";
}

// A torch nn.TransformerEncoder export (tests/data/zoo/tfm_encoder.onnx, written by torch's
// exporter, not ours): bf16 AMP steps with Adam and evaluation off host equal the CPU device's.
TEST(DeviceSession, TorchTransformerExportMatchesTheCpuDevice) {
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::BF16);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  const std::string path = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/tfm_encoder.onnx";
  std::unique_ptr<Trainer> t[2];
  for (int i = 0; i < 2; ++i) {
    auto g = ImportOnnxFile(path);
    ASSERT_TRUE(g.ok()) << g.status();
    auto made = Trainer::CreateFromGraph(std::move(*g), c, nullptr,
                                         i == 0 ? std::shared_ptr<Device>(CpuBackend().MakeDevice().value())
                                                : std::make_shared<SeparateMemoryDevice>());
    ASSERT_TRUE(made.ok()) << made.status();
    t[i] = std::move(*made);
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 1);
  for (int s = 0; s < 3; ++s) {
    Tensor x(DType::kF32, {4, 6, 32});
    Tensor y(DType::kI64, {4});
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = n(rng);
    for (int64_t i = 0; i < 4; ++i) y.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 5);
    auto a = t[0]->Step({{"x", x}, {"labels", y}});
    auto b = t[1]->Step({{"x", x}, {"labels", y}});
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    EXPECT_TRUE(std::isfinite(a->loss));
    EXPECT_EQ(a->loss, b->loss) << "step " << s;
  }
  auto sa = t[0]->State();
  auto sb = t[1]->State();
  ASSERT_TRUE(sa.ok() && sb.ok());
  for (const auto& [name, v] : *sa) EXPECT_TRUE(v.Identical(sb->at(name))) << "state '" << name << "' differs";
}

// A conv net planned for a device that has none of its kernels (the CUDA backend is not loaded in
// this process): one error lists every op with its dtypes and first node, and nothing is planned.
TEST(DeviceKernels, PlannerNamesEveryOpTheDeviceLacks) {
  if (KernelRegistry::Global().Has("", "Relu", DeviceType::kCUDA)) GTEST_SKIP() << "CUDA kernels are loaded";
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({2, 1, 8, 8}));
  g->AddInput(x);
  Value* w = g->AddInitializer("w", Tensor(DType::kF32, {4, 1, 3, 3}));
  Value* c1 = g->AddNode("Conv", {x, w}, 1, "conv1")->output(0);
  Value* r1 = g->AddNode("Relu", {c1}, 1, "relu1")->output(0);
  Value* c2 = g->AddNode("Conv", {r1, g->AddInitializer("w2", Tensor(DType::kF32, {4, 4, 3, 3}))}, 1, "conv2")->output(0);
  Value* shape = g->AddNode("Shape", {c2}, 1, "shape")->output(0);  // planning computes this
  Value* flat = g->AddNode("Reshape", {c2, g->AddInitializer("s", Tensor::FromVector<int64_t>(DType::kI64, {2}, {2, -1}))},
                           1, "flatten")->output(0);  // a view: no kernel
  g->AddOutput(flat);
  g->AddOutput(shape);
  PlanRequest req;
  req.device = DeviceType::kCUDA;
  req.fetches = {flat->name, shape->name};
  req.feeds = {{true, DType::kF32, {2, 1, 8, 8}, nullptr}};
  std::vector<int> wants;
  auto plan = BuildPlan(*g, req, &wants);
  ASSERT_FALSE(plan.ok());
  const std::string m(plan.status().message());
  EXPECT_NE(m.find("no cuda kernel for 2 ops"), std::string::npos) << m;
  EXPECT_NE(m.find("Conv (f32, f32): 2 nodes, first 'conv1'"), std::string::npos) << m;
  EXPECT_NE(m.find("Relu (f32): 1 node 'relu1'"), std::string::npos) << m;
  EXPECT_EQ(m.find("Shape"), std::string::npos) << m;
  EXPECT_EQ(m.find("Reshape"), std::string::npos) << m;
  EXPECT_EQ(OpsWithoutKernels(*g, DeviceType::kCUDA), (std::vector<std::string>{"Conv", "Relu"}));
  EXPECT_TRUE(OpsWithoutKernels(*g, DeviceType::kCPU).empty());
}

// --device=cuda where no GPU is usable is one line naming the flag and the reason; auto runs on
// the CPU and says why; a device that is not one of the three is refused by the config check.
TEST(DeviceKernels, CudaWithoutAGpuIsOneLineError) {
  if (CudaAvailable().ok()) GTEST_SKIP() << "a GPU is usable here";
  pb::TrainConfig c;
  c.set_device("cuda");
  auto g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/mlp.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  auto t = Trainer::CreateFromGraph(std::move(*g), c);
  ASSERT_FALSE(t.ok());
  const std::string m(t.status().message());
  EXPECT_NE(m.find("--device=cuda"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  c.set_device("auto");
  g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/mlp.onnx");
  ASSERT_TRUE(g.ok());
  t = Trainer::CreateFromGraph(std::move(*g), c);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_STREQ((*t)->device_name(), "cpu");
  EXPECT_NE((*t)->device_note().find("--device=auto"), std::string::npos) << (*t)->device_note();
  c.set_device("tpu");
  g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/mlp.onnx");
  ASSERT_TRUE(g.ok());
  t = Trainer::CreateFromGraph(std::move(*g), c);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tpu"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace mixtrain
