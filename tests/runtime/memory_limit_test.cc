// Out of memory is predicted, not suffered (issue 35): a training step whose arena does not fit
// the address-space limit is refused before anything is allocated, naming the plan and the
// limit; one that fits runs under the same kind of limit. Each case runs in a child process
// (a death test) because the limit cannot be lifted again once lowered.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "runtime/memory_limit.h"
#include "runtime/npy.h"
#include "runtime/trainer.h"

namespace mixtrain {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // their shadow memory makes address-space limits meaningless
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

size_t AddressSpaceInUse() {
  unsigned long pages = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
  std::fclose(f);
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// gpt_mini's first step at batch 64 (fp32, Adam) under RLIMIT_AS = what is in use + `room`.
// Exits 0 when the step ran, 3 when it was refused for memory (its message on stderr), 1 else.
void StepUnderLimit(size_t room) {
  pb::TrainConfig c;
  c.set_loss("cross_entropy");
  c.set_class_axis(-1);
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::FP32);
  auto t = Trainer::Create(std::string(MT_SOURCE_DIR) + "/models/gpt_mini.onnx", c);
  if (!t.ok()) std::_Exit(1);
  Tensor tokens(DType::kI64, {64, 32}), labels(DType::kI64, {64, 32});
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data_as<int64_t>()[i] = labels.data_as<int64_t>()[i] = i % 256;
  const std::map<std::string, Tensor> batch = {{"tokens", tokens}, {"labels", labels}};
  const size_t cap = AddressSpaceInUse() + room;
  struct rlimit limit = {cap, cap};
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(1);
  absl::StatusOr<StepResult> r = (*t)->Step(batch);
  if (r.ok()) std::_Exit(0);
  std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
  std::_Exit(absl::IsResourceExhausted(r.status()) ? 3 : 1);
}

class MemoryLimit : public testing::Test {
 protected:
  void SetUp() override {
    if (kSanitized) GTEST_SKIP() << "sanitizer builds reserve terabytes of address space";
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: OpenMP threads and all
  }
};

TEST_F(MemoryLimit, StepThatDoesNotFitIsRefusedWithTheNumbers) {
  // 40 MiB: less than the step's arena (about 23 MiB at batch 64) plus the 32 MiB kept for kernels.
  EXPECT_EXIT(StepUnderLimit(size_t{40} << 20), testing::ExitedWithCode(3),
              "arena .* needs [0-9.]+ MiB more memory.*ulimit -v, RLIMIT_AS.*nothing was allocated.*--recompute=auto");
}

TEST_F(MemoryLimit, StepThatFitsRuns) {
  EXPECT_EXIT(StepUnderLimit(size_t{400} << 20), testing::ExitedWithCode(0), "");
}

TEST(MemoryHeadroom, TellsTheBindingLimit) {
  // Whatever applies here (cgroup, RAM, a ulimit), the smallest is named with its numbers.
  const std::optional<MemoryHeadroom> room = CurrentMemoryHeadroom();
  ASSERT_TRUE(room.has_value()) << "Linux always has /proc/meminfo";
  EXPECT_NE(room->limit.find("MiB"), std::string::npos) << room->limit;
  EXPECT_TRUE(CheckFitsInMemory(0, 0, "nothing", "").ok());
  const absl::Status too_much = CheckFitsInMemory(room->bytes + 1, 0, "the test's plan", "Ask for less.");
  EXPECT_TRUE(absl::IsResourceExhausted(too_much)) << too_much;
  EXPECT_NE(too_much.message().find("the test's plan needs"), std::string::npos) << too_much;
  EXPECT_NE(too_much.message().find("Ask for less."), std::string::npos) << too_much;
}

}  // namespace
}  // namespace mixtrain
