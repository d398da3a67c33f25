// Throughput of one InferenceSession called from several threads at once against the same runs
// made one after another (docs/embedding.md, "Threads"; results in tools/bench/RESULTS.md).
//
//   build/concurrent_run_bench MODEL [--batch=4] [--threads=8] [--runs=200] [--compute=f32|bf16]
//
// Every run gets the same random feeds (symbolic dims set to --batch). Sequential: --runs runs
// on one thread. Concurrent: --threads threads released at once, --runs / --threads runs each.
// Besides runs per second (what the caller sees, which needs free cores to grow) it prints the
// process's CPU time per run (what concurrency costs: locks, cache misses, idle OpenMP teams),
// which a machine busy with other work does not hide.
// Each mode is timed after one warm-up pass of its own (plans, primitives and, for the
// concurrent one, one execution context per thread made). Each run's kernels use
// OMP_NUM_THREADS threads (default: every core), whatever the mode.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::ElementType;
using mixtrain::HostTensor;
using mixtrain::InferenceSession;
using mixtrain::TensorMap;

TensorMap Feeds(const InferenceSession& s, int64_t batch) {
  std::mt19937 rng(1);
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
      feeds[in.name] = *HostTensor::FromVector(shape, v);
    }
  }
  return feeds;
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  double wall = 0, cpu = 0;  // seconds
};

// `threads` threads making `per_thread` runs each, released together.
Timing Timed(InferenceSession& s, const TensorMap& feeds, int threads, int per_thread) {
  std::latch start(threads + 1);
  std::vector<std::thread> pool;
  bool failed = false;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      start.arrive_and_wait();
      for (int r = 0; r < per_thread; ++r)
        if (absl::StatusOr<TensorMap> out = s.Run(feeds); !out.ok()) {
          std::fprintf(stderr, "run failed: %s\n", std::string(out.status().message()).c_str());
          failed = true;
          return;
        }
    });
  start.arrive_and_wait();
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = ProcessCpuSeconds();
  for (std::thread& t : pool) t.join();
  Timing timing;
  timing.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  timing.cpu = ProcessCpuSeconds() - c0;
  if (failed) std::exit(1);
  return timing;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, compute = "f32";
  int64_t batch = 4;
  int threads = 8, runs = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::string f = std::string(flag) + "=";
      return a.rfind(f, 0) == 0 ? argv[i] + f.size() : nullptr;
    };
    if (const char* v = value("--batch")) batch = std::atoll(v);
    else if (const char* v = value("--threads")) threads = std::atoi(v);
    else if (const char* v = value("--runs")) runs = std::atoi(v);
    else if (const char* v = value("--compute")) compute = v;
    else if (a.rfind("--", 0) != 0 && model.empty()) model = a;
    else {
      std::fprintf(stderr, "usage: %s MODEL [--batch=4] [--threads=8] [--runs=200] [--compute=f32|bf16]\n", argv[0]);
      return 2;
    }
  }
  if (model.empty() || batch < 1 || threads < 1 || runs < threads) {
    std::fprintf(stderr, "need a MODEL, --batch >= 1, --threads >= 1 and --runs >= --threads\n");
    return 2;
  }
  mixtrain::InferenceOptions options;
  absl::StatusOr<ElementType> type = mixtrain::ParseElementType(compute);
  if (!type.ok()) {
    std::fprintf(stderr, "--compute: %s\n", std::string(type.status().message()).c_str());
    return 2;
  }
  options.compute_type = *type;
  absl::StatusOr<std::unique_ptr<InferenceSession>> s = InferenceSession::Create(model, options);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.status().message()).c_str());
    return 1;
  }
  const TensorMap feeds = Feeds(**s, batch);
  const int per_thread = runs / threads;
  const int total = per_thread * threads;
  Timed(**s, feeds, 1, threads);  // warm-up: the plan and its primitives
  const Timing sequential = Timed(**s, feeds, 1, total);
  Timed(**s, feeds, threads, 1);  // warm-up: one context per thread
  const Timing concurrent = Timed(**s, feeds, threads, per_thread);
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::printf("%s batch %lld %s, %d runs, OMP_NUM_THREADS=%s, %u cores\n", model.c_str(),
              static_cast<long long>(batch), compute.c_str(), total, omp ? omp : "(unset)",
              std::thread::hardware_concurrency());
  std::printf("sequential (1 thread):  %8.1f runs/s  %7.3f ms/run  %7.3f CPU ms/run\n", total / sequential.wall,
              1e3 * sequential.wall / total, 1e3 * sequential.cpu / total);
  std::printf("concurrent (%d threads): %8.1f runs/s  %7.3f ms/run  %7.3f CPU ms/run  x%.2f runs/s\n", threads,
              total / concurrent.wall, 1e3 * concurrent.wall / total, 1e3 * concurrent.cpu / total,
              sequential.wall / concurrent.wall);
  return 0;
}
