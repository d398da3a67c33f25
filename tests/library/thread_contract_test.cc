// The public API's thread contract (docs/embedding.md, "Threads"): an InferenceSession runs from
// any thread and from several at once, with the outputs a single thread gets, bit for bit; a
// Trainer's calls may move between threads. The .ci/tsan job runs this file under
// ThreadSanitizer with the library instrumented.
#include <functional>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::ElementType;
using mixtrain::HostTensor;
using mixtrain::InferenceOptions;
using mixtrain::InferenceSession;
using mixtrain::TensorMap;
using mixtrain::TrainConfig;
using mixtrain::Trainer;

std::string Source(const std::string& rel) { return std::string(MT_SOURCE_DIR) + "/" + rel; }

// Runs `f` on a thread of its own and waits for it.
void OnNewThread(const std::function<void()>& f) { std::thread(f).join(); }

// Feeds for every input the session lists, symbolic dims set to `batch`: floats from a normal
// distribution, integers (token ids, class indices) in [0, 10), which every vocabulary here holds.
TensorMap RandomFeeds(const InferenceSession& s, int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  TensorMap feeds;
  for (const mixtrain::TensorInfo& in : s.Inputs()) {
    std::vector<int64_t> shape = in.shape;
    int64_t n = 1;
    for (int64_t& d : shape) {
      if (d < 0) d = batch;
      n *= d;
    }
    if (in.type == ElementType::kInt64) {
      std::vector<int64_t> v(n);
      for (int64_t& x : v) x = rng() % 10;
      feeds[in.name] = *HostTensor::FromVector(shape, v);
    } else {
      std::vector<float> v(n);
      for (float& x : v) x = normal(rng);
      feeds[in.name] = *HostTensor::FromVector(shape, v);  // Run converts fp32 to a low compute type
    }
  }
  return feeds;
}

std::unique_ptr<InferenceSession> Open(const std::string& model, const InferenceOptions& options = {}) {
  auto s = InferenceSession::Create(Source(model), options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// The issue-33 reproducer: oneDNN's convolutions kept their scratchpad in a thread_local of the
// thread that built them, so the same Run on a second thread, after the first finished, faulted
// inside oneDNN's JIT code (fashion_cnn at batch 4; at batch 1 its primitives need no scratchpad).
TEST(InferenceThreadsTest, RunOnASecondThreadAfterTheFirst) {
  std::unique_ptr<InferenceSession> s = Open("models/fashion_cnn.onnx");
  ASSERT_NE(s, nullptr);
  const TensorMap feeds = RandomFeeds(*s, 4, 1);
  absl::StatusOr<TensorMap> first = s->Run(feeds);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<TensorMap> second = absl::InternalError("not run");
  OnNewThread([&] { second = s->Run(feeds); });
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, *first);
}

// Created (and first run) on a thread that has ended since: nothing the session keeps belongs to
// that thread's storage.
TEST(InferenceThreadsTest, SessionOutlivesTheThreadThatMadeIt) {
  std::unique_ptr<InferenceSession> s;
  TensorMap feeds;
  absl::StatusOr<TensorMap> there = absl::InternalError("not run");
  OnNewThread([&] {
    s = Open("models/fashion_cnn.onnx");
    if (s == nullptr) return;
    feeds = RandomFeeds(*s, 4, 2);
    there = s->Run(feeds);
  });
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(there.ok()) << there.status();
  absl::StatusOr<TensorMap> here = s->Run(feeds);
  ASSERT_TRUE(here.ok()) << here.status();
  EXPECT_EQ(*here, *there);
  OnNewThread([&] { s.reset(); });  // and destroyed on yet another thread
}

struct ConcurrentCase {
  std::string model;
  ElementType compute = ElementType::kFloat32;
  int64_t batch = 1;
};

std::string CaseName(const testing::TestParamInfo<ConcurrentCase>& info) {
  std::string m = info.param.model.substr(info.param.model.rfind('/') + 1);
  m = m.substr(0, m.find('.'));
  return m + (info.param.compute == ElementType::kBFloat16 ? "_bf16" : "_f32") + "_batch" +
         std::to_string(info.param.batch);
}

class ConcurrentRunTest : public testing::TestWithParam<ConcurrentCase> {};

// 8 threads released at once run one session, each its own feeds 3 times; every result equals
// what one thread got for those feeds, bit for bit (each run keeps the OpenMP thread count, so
// the kernels split their work the same way).
TEST_P(ConcurrentRunTest, EightThreadsMatchOneThread) {
  constexpr int kThreads = 8, kRounds = 3;
  const ConcurrentCase& c = GetParam();
  InferenceOptions options;
  options.compute_type = c.compute;
  std::unique_ptr<InferenceSession> s = Open(c.model, options);
  ASSERT_NE(s, nullptr);
  std::vector<TensorMap> feeds, expected;
  for (int t = 0; t < kThreads; ++t) {
    feeds.push_back(RandomFeeds(*s, c.batch, 100 + t));
    absl::StatusOr<TensorMap> r = s->Run(feeds.back());
    ASSERT_TRUE(r.ok()) << r.status();
    expected.push_back(*std::move(r));
  }
  ASSERT_NE(expected[0], expected[1]) << "the threads' feeds must give different outputs";

  std::vector<std::vector<absl::StatusOr<TensorMap>>> got(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < kRounds; ++r) got[t].push_back(s->Run(feeds[t]));
    });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t)
    for (int r = 0; r < kRounds; ++r) {
      SCOPED_TRACE("thread " + std::to_string(t) + ", round " + std::to_string(r));
      ASSERT_TRUE(got[t][r].ok()) << got[t][r].status();
      EXPECT_EQ(*got[t][r], expected[t]);
    }
}

// fashion_cnn: oneDNN convolutions, pooling and matmuls; gpt_mini and torch's
// nn.TransformerEncoder (TorchScript export, symbolic batch): matmuls, softmax, layer norms.
INSTANTIATE_TEST_SUITE_P(
    Models, ConcurrentRunTest,
    testing::Values(ConcurrentCase{"models/fashion_cnn.onnx", ElementType::kFloat32, 1},
                    ConcurrentCase{"models/fashion_cnn.onnx", ElementType::kFloat32, 4},
                    ConcurrentCase{"models/fashion_cnn.onnx", ElementType::kBFloat16, 4},
                    ConcurrentCase{"models/gpt_mini.onnx", ElementType::kFloat32, 1},
                    ConcurrentCase{"models/gpt_mini.onnx", ElementType::kFloat32, 4},
                    ConcurrentCase{"models/gpt_mini.onnx", ElementType::kBFloat16, 4},
                    ConcurrentCase{"tests/data/zoo/tfm_encoder_dyn.onnx", ElementType::kFloat32, 1},
                    ConcurrentCase{"tests/data/zoo/tfm_encoder_dyn.onnx", ElementType::kFloat32, 4},
                    ConcurrentCase{"tests/data/zoo/tfm_encoder_dyn.onnx", ElementType::kBFloat16, 4}),
    CaseName);

// A Trainer used from one thread at a time, a different one for each call (Step, StepAsync's
// worker, Evaluate, the parameters, the export), ends where the same calls on one thread end.
struct TrainerTrace {
  std::vector<float> losses;
  double eval_loss = 0;
  std::vector<HostTensor> params;
  TensorMap exported_outputs;
};

TensorMap TrainBatch(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(8 * 28 * 28);
  for (float& v : x) v = normal(rng);
  std::vector<int64_t> y(8);
  for (int64_t& v : y) v = rng() % 10;
  return {{"input", *HostTensor::FromVector<float>({8, 1, 28, 28}, x)},
          {"labels", *HostTensor::FromVector<int64_t>({8}, y)}};
}

// `call` runs each call: in place, or on a thread of its own.
TrainerTrace TrainAndExport(const TrainConfig& config, const std::string& export_path,
                            const std::function<void(const std::function<void()>&)>& call) {
  TrainerTrace trace;
  std::unique_ptr<Trainer> t;
  call([&] {
    auto made = Trainer::Create(Source("models/fashion_cnn.onnx"), config);
    ASSERT_TRUE(made.ok()) << made.status();
    t = std::move(*made);
  });
  if (t == nullptr) return trace;
  auto step = [&](uint32_t seed) {
    call([&] {
      absl::StatusOr<mixtrain::StepResult> r = t->Step(TrainBatch(seed));
      ASSERT_TRUE(r.ok()) << r.status();
      trace.losses.push_back(r->loss.value_or(-1));
    });
  };
  step(0);
  step(1);
  call([&] {
    absl::StatusOr<mixtrain::StepResult> r = t->StepAsync(TrainBatch(2)).get();
    ASSERT_TRUE(r.ok()) << r.status();
    trace.losses.push_back(r->loss.value_or(-1));
  });
  step(3);
  call([&] {
    absl::StatusOr<mixtrain::EvalResult> r = t->Evaluate(TrainBatch(4));
    ASSERT_TRUE(r.ok()) << r.status();
    trace.eval_loss = r->loss_sum;
  });
  step(5);
  call([&] {
    for (const std::string& name : t->ParameterNames()) trace.params.push_back(*t->GetParameter(name));
  });
  call([&] { ASSERT_TRUE(t->ExportInferenceModel(export_path).ok()); });
  call([&] { t.reset(); });
  std::unique_ptr<InferenceSession> s;
  call([&] {
    auto made = InferenceSession::Create(export_path);
    ASSERT_TRUE(made.ok()) << made.status();
    s = std::move(*made);
  });
  if (s == nullptr) return trace;
  call([&] {
    absl::StatusOr<TensorMap> r = s->Run({{"input", TrainBatch(6).at("input")}});
    ASSERT_TRUE(r.ok()) << r.status();
    trace.exported_outputs = *std::move(r);
  });
  return trace;
}

TEST(TrainerThreadsTest, CallsMoveBetweenThreads) {
  TrainConfig amp;  // bf16 AMP where the CPU has bf16, else fp32
  TrainConfig fp32;
  fp32.precision.preset = TrainConfig::Precision::Preset::kFp32;
  fp32.optimizer.kind = TrainConfig::Optimizer::Kind::kSgd;
  fp32.optimizer.momentum = 0.9f;
  for (const TrainConfig& config : {amp, fp32}) {
    SCOPED_TRACE(&config == &amp ? "amp" : "fp32");
    const std::string dir = testing::TempDir();
    TrainerTrace here = TrainAndExport(config, dir + "/threads_here.onnx", [](const auto& f) { f(); });
    TrainerTrace moving = TrainAndExport(config, dir + "/threads_moving.onnx", OnNewThread);
    ASSERT_EQ(here.losses.size(), 5u);
    EXPECT_EQ(moving.losses, here.losses);
    EXPECT_EQ(moving.eval_loss, here.eval_loss);
    ASSERT_EQ(moving.params.size(), here.params.size());
    for (size_t i = 0; i < here.params.size(); ++i) EXPECT_TRUE(moving.params[i] == here.params[i]) << "parameter " << i;
    ASSERT_FALSE(here.exported_outputs.empty());
    EXPECT_EQ(moving.exported_outputs, here.exported_outputs);
  }
}

}  // namespace
