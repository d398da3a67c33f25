// Several Trainers in one process, each on its own thread, give exactly the results they give
// one after another: the library keeps no mutable global state that trainers share.
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::HostTensor;
using mixtrain::TensorMap;
using mixtrain::TrainConfig;

struct Job {
  std::string model;
  TrainConfig config;
  std::vector<int64_t> input_shape;  // one example
};

struct Outcome {
  std::string error;
  std::vector<float> losses;
  std::vector<HostTensor> params;
};

TensorMap Batch(const Job& job, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), job.input_shape.begin(), job.input_shape.end());
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<float> x(numel);
  for (float& v : x) v = normal(rng);
  std::vector<int64_t> y(n);
  for (int64_t& v : y) v = rng() % 10;
  return {{"input", *HostTensor::FromVector<float>(shape, x)},
          {"labels", *HostTensor::FromVector<int64_t>({n}, y)}};
}

Outcome Train(const Job& job) {
  Outcome out;
  auto t = mixtrain::Trainer::Create(job.model, job.config);
  if (!t.ok()) return {std::string(t.status().message())};
  for (uint32_t step = 0; step < 4; ++step) {
    auto r = (*t)->Step(Batch(job, 8, step));
    if (!r.ok()) return {std::string(r.status().message())};
    out.losses.push_back(*r->loss);
  }
  for (const std::string& name : (*t)->ParameterNames()) out.params.push_back(*(*t)->GetParameter(name));
  return out;
}

TEST(MultiTrainerTest, ParallelTrainersMatchSequentialRuns) {
  const std::string models = std::string(MT_SOURCE_DIR) + "/models/";
  std::vector<Job> jobs(3);
  // Field by field: a braced {model, {}, shape} makes GCC 12 warn that the temporary config's
  // strings may be used uninitialized (a false positive of -Wmaybe-uninitialized).
  jobs[0].model = jobs[1].model = models + "mlp.onnx";  // jobs[0]: AMP bf16, Adam
  jobs[0].input_shape = jobs[1].input_shape = {784};
  jobs[1].config.precision.preset = TrainConfig::Precision::Preset::kFp32;
  jobs[1].config.optimizer.kind = TrainConfig::Optimizer::Kind::kSgd;
  jobs[1].config.optimizer.momentum = 0.9f;
  jobs[1].config.optimizer.lr = 0.05f;
  jobs[2].model = models + "fashion_cnn.onnx";
  jobs[2].input_shape = {1, 28, 28};
  jobs[2].config.precision.preset = TrainConfig::Precision::Preset::kHalf;

  std::vector<Outcome> sequential;
  for (const Job& j : jobs) sequential.push_back(Train(j));
  std::vector<Outcome> parallel(jobs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < jobs.size(); ++i) threads.emplace_back([&, i] { parallel[i] = Train(jobs[i]); });
  for (std::thread& t : threads) t.join();

  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE("trainer " + std::to_string(i));
    ASSERT_EQ(sequential[i].error, "");
    ASSERT_EQ(parallel[i].error, "");
    EXPECT_EQ(parallel[i].losses, sequential[i].losses);
    ASSERT_EQ(parallel[i].params.size(), sequential[i].params.size());
    for (size_t p = 0; p < parallel[i].params.size(); ++p)
      EXPECT_TRUE(parallel[i].params[p] == sequential[i].params[p]) << "parameter " << p;
  }
  // The two mlp trainers differ in config, so they really computed different things.
  EXPECT_NE(sequential[0].losses, sequential[1].losses);
}

}  // namespace
