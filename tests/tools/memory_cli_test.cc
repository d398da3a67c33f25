// The memory report of the CLI (issue 35): `check --memory` plans, before anything runs, the
// memory `bench --train --profile` then reports for the step it ran; and a batch that cannot fit
// under `ulimit -v` is refused with the numbers, not a crash.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/tools/cli_test_util.h"

namespace mixtrain {
namespace {

using cli_test::kBinary;
using cli_test::RunShell;
using cli_test::ScratchDir;

const std::string kGpt = std::string(MT_SOURCE_DIR) + "/models/gpt_mini.onnx";

// The number on the report line starting with `label` ("" when there is none).
std::string ReportLine(const std::string& out, const std::string& label) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("\n +" + std::regex_replace(label, std::regex(R"([()])"), R"(\$&)") +
                                            R"( +([0-9.]+))")))
    return "";
  return m[1];
}

TEST(MemoryCli, CheckPlansWhatTheStepThenHolds) {
  const auto dir = ScratchDir("memory_cli");
  const cli_test::Result planned = RunShell(
      kBinary + " check " + kGpt + " --class-axis=-1 --memory --batch-size=8 --precision=fp32", dir);
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_NE(planned.out.find("memory, planned at batch 8 with fp32 precision, auto low type, recompute none, Adam"),
            std::string::npos)
      << planned.out;
  // The header names the step's own settings (it named recompute none and Adam whatever the flags).
  const cli_test::Result sgd = RunShell(
      kBinary + " check " + kGpt + " --class-axis=-1 --memory --batch-size=8 --recompute=auto --optimizer=sgd", dir);
  ASSERT_EQ(sgd.code, 0) << sgd.err;
  EXPECT_NE(sgd.out.find("with amp precision, auto low type, recompute auto, SGD (nothing ran)"), std::string::npos)
      << sgd.out;
  const cli_test::Result ran = RunShell("OMP_NUM_THREADS=1 " + kBinary + " bench " + kGpt +
                                            " --train --class-axis=-1 --batch-size=8 --warmup=0 --iters=1 --profile",
                                        dir);
  ASSERT_EQ(ran.code, 0) << ran.err;
  for (const char* line : {"weights (trained)", "optimizer state", "planner arena (step)", "gradients",
                           "activations for backward"}) {
    const std::string want = ReportLine(planned.out, line);
    ASSERT_FALSE(want.empty()) << line << " missing from check --memory:\n" << planned.out;
    EXPECT_EQ(ReportLine(ran.out, line), want) << line << ":\n" << ran.out;
  }
  EXPECT_NE(ran.out.find("measured peak RSS"), std::string::npos) << ran.out;
  // bench --train takes train's step flags too: the step it runs with --recompute=auto
  // --optimizer=sgd --precision=amp holds what check planned for those flags.
  const cli_test::Result ran_sgd =
      RunShell("OMP_NUM_THREADS=1 " + kBinary + " bench " + kGpt +
                   " --train --class-axis=-1 --batch-size=8 --warmup=0 --iters=1 --profile --recompute=auto "
                   "--optimizer=sgd --precision=amp",
               dir);
  ASSERT_EQ(ran_sgd.code, 0) << ran_sgd.err;
  for (const char* line : {"optimizer state", "planner arena (step)", "peak in recompute"}) {
    const std::string want = ReportLine(sgd.out, line);
    ASSERT_FALSE(want.empty()) << line << " missing from check --memory:\n" << sgd.out;
    EXPECT_EQ(ReportLine(ran_sgd.out, line), want) << line << ":\n" << ran_sgd.out;
  }
  EXPECT_NE(ReportLine(ran_sgd.out, "optimizer state"), ReportLine(ran.out, "optimizer state"));  // SGD: none
}

// Sanitizer builds (GCC defines __SANITIZE_*__; clang before 15 only answers __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MT_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MT_TEST_SANITIZED 1
#endif
#endif

TEST(MemoryCli, BatchThatCannotFitIsRefusedNotCrashed) {
#if defined(MT_TEST_SANITIZED)
  GTEST_SKIP() << "sanitizer builds reserve terabytes of address space";
#endif
  const auto dir = ScratchDir("memory_cli");
  // issue 35's reproducer: this used to end in SIGSEGV inside dnnl_primitive_create.
  const cli_test::Result r = RunShell("ulimit -v 100000; OMP_NUM_THREADS=1 " + kBinary + " bench " + kGpt +
                                          " --train --class-axis=-1 --batch-size=64 --warmup=0 --iters=1",
                                      dir);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("RLIMIT_AS"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing was allocated"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--recompute=auto"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mixtrain
