// End-to-end training smoke runs (CI): models/fashion_cnn.onnx on a Fashion-MNIST subset for 100
// steps (batch 32, Adam lr 1e-3; as many as keep both runs near a minute on two cores) in bf16
// AMP and in fp16 AMP with dynamic loss scaling. The loss must come down clearly (mean of the last 20 steps < 0.7 x mean of the first
// 20), the test accuracy of the short run must be well above chance, and fp16's dynamic scaler
// may skip steps while it backs off from 2^16 but must settle (no skipped step in the second
// half).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "runtime/dataset.h"
#include "runtime/idx.h"
#include "runtime/trainer.h"

namespace mixtrain {
namespace {

constexpr int kSteps = 100;
constexpr int kBatch = 32;
constexpr int kTrainExamples = kSteps * kBatch / 2;  // two epochs
constexpr int kTestExamples = 500;

struct Splits {
  Dataset train, test;
};

const Splits& Data() {
  static const Splits* s = [] {
    auto fm = LoadFashionMnist();
    EXPECT_TRUE(fm.ok()) << fm.status() << " (install dataset-fashion-mnist)";
    auto* out = new Splits;
    if (!fm.ok()) return out;
    auto train = Dataset::Create({{"input", fm->train_images}, {"labels", fm->train_labels}}, "train");
    auto test = Dataset::Create({{"input", fm->test_images}, {"labels", fm->test_labels}}, "test");
    EXPECT_TRUE(train.ok() && test.ok());
    out->train = train->Head(kTrainExamples);
    out->test = test->Head(kTestExamples);
    return out;
  }();
  return *s;
}

double Mean(const std::vector<float>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + begin, v.begin() + end, 0.0) / static_cast<double>(end - begin);
}

void TrainAndCheck(pb::PrecisionPolicy::LowType low) {
  const Splits& d = Data();
  ASSERT_EQ(d.train.size(), kTrainExamples);
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  c.mutable_precision()->set_low_dtype(low);
  c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  c.mutable_optimizer()->set_lr(1e-3);
  auto t = Trainer::Create(std::string(MT_SOURCE_DIR) + "/models/fashion_cnn.onnx", c);
  ASSERT_TRUE(t.ok()) << t.status();
  Trainer& tr = **t;
  const bool fp16 = low == pb::PrecisionPolicy::FP16;
  EXPECT_EQ(tr.precision().scaling, fp16 ? "dynamic" : "off");
  std::vector<float> losses;
  std::vector<int> skipped_at;
  auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; losses.size() < kSteps; ++epoch) {
    std::vector<int64_t> order = d.train.Order(true, 42, epoch);
    for (int64_t b = 0; b + kBatch <= d.train.size() && losses.size() < kSteps; b += kBatch) {
      auto r = tr.Step(d.train.Gather(order, b, b + kBatch));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(std::isfinite(r->loss)) << "step " << losses.size();
      if (r->skipped) skipped_at.push_back(static_cast<int>(losses.size()));
      losses.push_back(r->loss);
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double first = Mean(losses, 0, 20), last = Mean(losses, kSteps - 20, kSteps);
  EvalResult e;
  std::vector<int64_t> order = d.test.Order(false, 0, 0);
  for (int64_t b = 0; b < d.test.size(); b += 250) {
    auto r = tr.Evaluate(d.test.Gather(order, b, std::min<int64_t>(d.test.size(), b + 250)));
    ASSERT_TRUE(r.ok()) << r.status();
    e.counts.correct += r->counts.correct;
    e.examples += r->examples;
  }
  double acc = static_cast<double>(e.counts.correct) / e.examples;
  auto state = tr.State();
  ASSERT_TRUE(state.ok());
  std::printf("%s AMP: %d steps in %.1f s, loss first-20 mean %.4f, last-20 mean %.4f (ratio %.3f), "
              "%zu skipped, test accuracy %.1f%% on %lld\n",
              fp16 ? "fp16" : "bf16", kSteps, secs, first, last, last / first, skipped_at.size(),
              100 * acc, static_cast<long long>(e.examples));
  EXPECT_LT(last, 0.7 * first);
  EXPECT_GT(acc, 0.6);
  if (fp16) {
    // Backing off from 2^16 may take a few skipped steps at the start; never in the second half.
    EXPECT_LE(skipped_at.size(), 16u);
    for (int s : skipped_at) EXPECT_LT(s, kSteps / 2) << "a skipped step late in training";
    float scale = static_cast<float>(state->at("loss_scale").GetDouble(0));
    EXPECT_TRUE(std::isfinite(scale) && scale >= 1.0f) << scale;
  } else {
    EXPECT_TRUE(skipped_at.empty());
  }
}

TEST(TrainSmoke, FashionCnnBf16Amp) { TrainAndCheck(pb::PrecisionPolicy::BF16); }
TEST(TrainSmoke, FashionCnnFp16AmpDynamicScaling) { TrainAndCheck(pb::PrecisionPolicy::FP16); }

}  // namespace
}  // namespace mixtrain
