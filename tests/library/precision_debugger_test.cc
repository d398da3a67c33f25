// The precision debugger through the public API (issue 16): it names the node behind a skipped
// step, measures only every N-th step, replays a skipped step without changing any state, and
// shows fp16 gradients flushing to zero without loss scaling and not with it.
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::HostTensor;
using mixtrain::PrecisionStatistics;
using mixtrain::TensorMap;
using mixtrain::TrainConfig;
using mixtrain::Trainer;
using mixtrain::ValueStats;

const std::string kOverflow = std::string(MT_SOURCE_DIR) + "/models/precision/logit_scale_overflow.onnx";
const std::string kAutoEncoder = std::string(MT_SOURCE_DIR) + "/models/precision/autoencoder.onnx";
const std::string kMlp = std::string(MT_SOURCE_DIR) + "/models/mlp.onnx";

// Images in [0, 1] (what the Fashion-MNIST loader gives) and random labels.
TensorMap ImageBatch(const std::string& input, std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  std::vector<int64_t> y(dims[0]);
  for (int64_t& v : y) v = rng() % 10;
  TensorMap b;
  b.emplace(input, *HostTensor::FromVector<float>(dims, x));
  b.emplace("labels", *HostTensor::FromVector<int64_t>({dims[0]}, y));
  return b;
}

TrainConfig Fp16(int32_t every) {
  TrainConfig c;
  c.precision.low_dtype = TrainConfig::Precision::LowType::kFp16;
  c.debug_precision = every;
  return c;
}

std::unique_ptr<Trainer> Make(const std::string& model, const TrainConfig& c) {
  auto t = Trainer::Create(model, c);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// The forward node a value belongs to (autodiff names gradient nodes "<node>/grad/...").
std::string Forward(const std::string& node) { return node.substr(0, node.find("/grad")); }

TEST(PrecisionDebuggerTest, NamesTheNodeWhoseGradientOverflowsFp16) {
  auto t = Make(kOverflow, Fp16(1));
  ASSERT_NE(t, nullptr);
  auto r = t->Step(ImageBatch("x", {64, 1, 28, 28}, 1));
  ASSERT_TRUE(r.ok()) << r.status();
  // The logits are x64 in fp32; their gradient (x64 x the 65536 loss scale) cast back to fp16
  // for fc2's backward is where the step first overflows.
  ASSERT_TRUE(r->skipped);
  ASSERT_TRUE(r->nonfinite.has_value());
  const ValueStats& v = r->nonfinite->value;
  EXPECT_EQ(v.dtype, "fp16");
  EXPECT_EQ(v.phase, "backward");
  EXPECT_TRUE(v.cast_input) << v.value;
  EXPECT_GT(v.overflow, 0);
  ASSERT_FALSE(v.consumers.empty());
  for (const std::string& c : v.consumers) EXPECT_EQ(Forward(c), "/fc2/Gemm") << c;
  // Its input: the fp32 gradient of the logit-scale Mul, measured in the same step.
  ASSERT_EQ(r->nonfinite->inputs.size(), 1u);
  EXPECT_EQ(r->nonfinite->inputs[0].dtype, "fp32");
  EXPECT_GE(r->nonfinite->inputs[0].max_abs, 65520.0f);
}

TEST(PrecisionDebuggerTest, MeasuresEveryNthStepAndEverySkippedOne) {
  TrainConfig c;
  c.precision.low_dtype = TrainConfig::Precision::LowType::kBf16;
  c.debug_precision = 3;
  auto t = Make(kMlp, c);
  ASSERT_NE(t, nullptr);
  std::vector<bool> measured;
  for (uint32_t s = 0; s < 7; ++s) {
    auto r = t->Step(ImageBatch("input", {32, 784}, s));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_FALSE(r->skipped);
    measured.push_back(r->precision_measured);
  }
  EXPECT_EQ(measured, (std::vector<bool>{true, false, false, true, false, false, true}));
  auto sum = t->PrecisionStats();
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->steps, 3);
  EXPECT_EQ(sum->skipped_steps, 0);
  // Every low-precision value of the step is watched, forward and backward, and counted whole.
  int low = 0, backward = 0;
  for (const ValueStats& v : sum->values) {
    if (v.dtype != "bf16") continue;
    ++low;
    backward += v.phase == "backward";
    EXPECT_GT(v.elements, 0) << v.value;
    EXPECT_EQ(v.elements % 3, 0) << v.value << ": three steps of equal shapes";
    EXPECT_EQ(v.nan + v.inf, 0) << v.value;
  }
  EXPECT_GT(low, 4);
  EXPECT_GT(backward, 2);
  auto last = t->PrecisionStats(Trainer::StatisticsOf::kLast);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->steps, 1);
  ASSERT_EQ(last->values.size(), sum->values.size());
  for (size_t i = 0; i < last->values.size(); ++i) EXPECT_EQ(3 * last->values[i].elements, sum->values[i].elements);

  auto off = Make(kMlp, TrainConfig{});
  ASSERT_NE(off, nullptr);
  EXPECT_EQ(off->PrecisionStats().status().code(), absl::StatusCode::kFailedPrecondition);
}

// A skipped step that was not measured is rerun dry: the run must end exactly where a run
// without the debugger ends (weights, loss scale, step count).
TEST(PrecisionDebuggerTest, DiagnosingASkippedStepChangesNoState) {
  auto plain = Make(kOverflow, Fp16(0));
  auto debugged = Make(kOverflow, Fp16(1000));  // measures step 1 only; the rest are reruns
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(debugged, nullptr);
  int skipped = 0, diagnosed = 0;
  for (uint32_t s = 0; s < 6; ++s) {
    TensorMap b = ImageBatch("x", {64, 1, 28, 28}, 10 + s);
    auto a = plain->Step(b);
    auto d = debugged->Step(b);
    ASSERT_TRUE(a.ok() && d.ok());
    EXPECT_EQ(a->skipped, d->skipped) << "step " << s + 1;
    EXPECT_EQ(a->loss_scale, d->loss_scale) << "step " << s + 1;
    EXPECT_EQ(*a->loss, *d->loss) << "step " << s + 1;
    skipped += d->skipped;
    diagnosed += d->nonfinite.has_value();
    if (s > 0) EXPECT_EQ(d->precision_measured, d->skipped) << "only skipped steps are rerun";
  }
  EXPECT_GT(skipped, 1);
  EXPECT_EQ(diagnosed, skipped);
  for (const std::string& p : plain->ParameterNames()) {
    auto x = plain->GetParameter(p), y = debugged->GetParameter(p);
    ASSERT_TRUE(x.ok() && y.ok());
    ASSERT_EQ(x->num_bytes(), y->num_bytes());
    EXPECT_EQ(0, std::memcmp(x->raw_data(), y->raw_data(), x->num_bytes())) << p;
  }
  auto sum = debugged->PrecisionStats();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->skipped_steps, skipped);
  EXPECT_EQ(static_cast<int>(sum->skipped.size()), skipped);
}

// Fractions of the backward's fp16 values that are lost: flushed to zero by a cast, or stored
// as subnormals (precision lost) or zero.
struct Lost {
  double flushed = 0, subnormal = 0;
};
Lost BackwardLoss(const PrecisionStatistics& s) {
  int64_t n = 0, flushed = 0, subnormal = 0;
  for (const ValueStats& v : s.values) {
    if (v.dtype != "fp16" || v.phase != "backward") continue;
    n += v.elements - v.zero + v.underflow;  // the non-zero values before any flush
    flushed += v.underflow;
    subnormal += v.subnormal;
  }
  return {n > 0 ? static_cast<double>(flushed) / n : 0, n > 0 ? static_cast<double>(subnormal) / n : 0};
}

TEST(PrecisionDebuggerTest, Fp16GradientsUnderflowWithoutLossScalingAndNotWithIt) {
  // An autoencoder trained with MSE on its input: d(loss)/d(output) = 2 (y - x) / (N * 784), ~1e-5.
  auto run = [](TrainConfig::LossScaler::Mode mode) {
    TrainConfig c = Fp16(1);
    c.loss = "mse";
    c.loss_scaler.mode = mode;
    auto t = Make(kAutoEncoder, c);
    EXPECT_NE(t, nullptr);
    for (uint32_t s = 0; s < 3; ++s) {
      TensorMap b = ImageBatch("x", {256, 784}, 20 + s);
      b.erase("labels");
      b.emplace("labels", b.at("x"));
      auto r = t->Step(b);
      EXPECT_TRUE(r.ok()) << r.status();
      EXPECT_FALSE(r.ok() && r->skipped);
    }
    return BackwardLoss(*t->PrecisionStats());
  };
  const Lost off = run(TrainConfig::LossScaler::Mode::kOff);
  const Lost dynamic = run(TrainConfig::LossScaler::Mode::kDynamic);
  std::printf("fp16 backward values lost: loss scaling off %.2f%% flushed, %.2f%% subnormal; dynamic %.4f%% flushed, "
              "%.4f%% subnormal\n", 100 * off.flushed, 100 * off.subnormal, 100 * dynamic.flushed,
              100 * dynamic.subnormal);
  EXPECT_GT(off.flushed + off.subnormal, 0.05);  // the problem is real without scaling...
  EXPECT_LT(dynamic.flushed + dynamic.subnormal, 0.1 * (off.flushed + off.subnormal));  // ...and scaling fixes it
  EXPECT_GT(off.flushed, 0.0);
  EXPECT_LT(dynamic.flushed, off.flushed);
}

}  // namespace
