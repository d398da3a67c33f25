// Session under several threads (runtime/session.h, "Threads"): stateless runs overlap, each in an
// execution context of its own that later runs reuse; runs that write state take turns; changing
// an initializer waits for the runs in flight and is seen whole by every run after it; profiles
// add up over the contexts. tests/library/thread_contract_test.cc checks the same through the
// public API on real models; .ci/tsan runs both under ThreadSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "runtime/session.h"

namespace mixtrain {
namespace {

Tensor F32(std::vector<int64_t> dims, std::vector<float> v) {
  return Tensor::FromVector<float>(DType::kF32, std::move(dims), v);
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}

constexpr int64_t kWidth = 1 << 16;

// y = (x + b) * x, x: [N, kWidth], b: [kWidth] an initializer.
std::unique_ptr<Graph> AddMul() {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), kWidth}));
  g->AddInput(x);
  Value* b = g->AddInitializer("b", F32({kWidth}, std::vector<float>(kWidth, 1.0f)));
  Value* s = g->AddNode("Add", {x, b}, 1, "add")->output(0);
  g->AddOutput(g->AddNode("Mul", {s, x}, 1, "mul")->output(0));
  return g;
}

// Thread t's input: every element t + 1.
Tensor Input(int t) { return F32({2, kWidth}, std::vector<float>(2 * kWidth, static_cast<float>(t + 1))); }

TEST(SessionThreads, ConcurrentRunsGetTheirOwnContexts) {
  constexpr int kThreads = 8, kRounds = 20;
  auto s = Session::Create(*AddMul());
  ASSERT_TRUE(s.ok()) << s.status();
  Session& session = **s;
  std::vector<std::vector<std::vector<float>>> got(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < kRounds; ++r) {
        auto out = session.Run({{"x", Input(t)}});
        got[t].push_back(out.ok() ? Values((*out)[0]) : std::vector<float>());
      }
    });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    const float x = static_cast<float>(t + 1);
    for (int r = 0; r < kRounds; ++r)
      ASSERT_EQ(got[t][r], std::vector<float>(2 * kWidth, (x + 1) * x)) << "thread " << t << ", round " << r;
  }
  RecordProperty("execution_contexts", static_cast<int>(session.num_execution_contexts()));
  EXPECT_EQ(session.num_cached_plans(), 1u);
  // One context per run in flight at the worst moment: never more than the threads.
  EXPECT_GE(session.num_execution_contexts(), 1u);
  EXPECT_LE(session.num_execution_contexts(), static_cast<size_t>(kThreads));
  EXPECT_EQ(session.run_count(), static_cast<uint64_t>(kThreads * kRounds));
}

TEST(SessionThreads, RunsOneAfterAnotherShareOneContextWhateverTheThread) {
  auto s = Session::Create(*AddMul());
  ASSERT_TRUE(s.ok()) << s.status();
  for (int t = 0; t < 4; ++t) {
    std::thread([&, t] {
      auto out = (*s)->Run({{"x", Input(t)}});
      ASSERT_TRUE(out.ok()) << out.status();
    }).join();
  }
  EXPECT_EQ((*s)->num_execution_contexts(), 1u);
}

// count <- count + x after every run: runs that write state hold the session alone, so 8 threads
// of 25 runs each see every count from 1 to 200 exactly once.
TEST(SessionThreads, StateWritingRunsTakeTurns) {
  constexpr int kThreads = 8, kRounds = 25;
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({1}));
  g->AddInput(x);
  Value* count = g->AddInitializer("count", F32({1}, {0}));
  Value* next = g->AddNode("Add", {count, x}, 1, "increment")->output(0);
  g->AddOutput(next);
  SessionOptions o;
  o.state_updates[next->name] = "count";
  auto s = Session::Create(*g, o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<std::vector<float>> seen(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < kRounds; ++r) {
        auto out = (*s)->Run({{"x", F32({1}, {1})}});
        seen[t].push_back(out.ok() ? Values((*out)[0])[0] : -1.0f);
      }
    });
  for (std::thread& t : threads) t.join();
  std::vector<float> all;
  for (const auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<float> want(kThreads * kRounds);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(i + 1);
  EXPECT_EQ(all, want);
  EXPECT_EQ(Values(*(*s)->GetInitializer("count")), (std::vector<float>{kThreads * kRounds}));
}

// While 4 threads run, the main thread switches b between all-1 and all-2: every run sees one b
// whole (y = (x + b) * x with one b for every element), and runs after the switch see the new one.
TEST(SessionThreads, SetInitializerWaitsForRunsInFlight) {
  constexpr int kThreads = 4;
  auto s = Session::Create(*AddMul());
  ASSERT_TRUE(s.ok()) << s.status();
  std::atomic<bool> stop{false};
  std::atomic<int> mixed{0}, failed{0}, runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      while (!stop.load()) {
        auto out = (*s)->Run({{"x", Input(0)}});  // x = 1: y = 1 + b
        if (!out.ok()) {
          ++failed;
          continue;
        }
        const std::vector<float> y = Values((*out)[0]);
        const float b = y[0] - 1;
        if ((b != 1 && b != 2) || std::any_of(y.begin(), y.end(), [&](float v) { return v != y[0]; })) ++mixed;
        ++runs;
      }
    });
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE((*s)->SetInitializer("b", F32({kWidth}, std::vector<float>(kWidth, 1.0f + i % 2))).ok());
    auto out = (*s)->Run({{"x", Input(0)}});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0])[0], 2.0f + i % 2) << "a run after SetInitializer sees the new value";
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_GT(runs.load(), 0);
}

TEST(SessionThreads, ProfileAddsUpOverContexts) {
  constexpr int kThreads = 8, kRounds = 5;
  auto s = Session::Create(*AddMul());
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->set_profiling(true);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < kRounds; ++r) ASSERT_TRUE((*s)->Run({{"x", Input(t)}}).ok());
    });
  for (std::thread& t : threads) t.join();
  const std::vector<NodeProfile> nodes = (*s)->ProfileByNode();
  ASSERT_EQ(nodes.size(), 2u);
  for (const NodeProfile& n : nodes) EXPECT_EQ(n.calls, kThreads * kRounds) << n.node->name();
  (*s)->ResetProfile();
  EXPECT_TRUE((*s)->ProfileByNode().empty());
}

}  // namespace
}  // namespace mixtrain
