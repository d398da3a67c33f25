// `mpirun -n 2 mixtrain train --data-parallel` (issue 17) on the command line: with
// --deterministic the exported model is byte for byte the one a single process exports after
// accumulating the two shards as micro-batches; checkpoints resume only with the same rank count;
// bad flags fail on every rank with a message and a non-zero exit, not a hang.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/tools/cli_test_util.h"

namespace mixtrain::cli_test {
namespace {

const std::string kMlp = std::string(MT_SOURCE_DIR) + "/models/mlp.onnx";
const std::string kFlags = " --precision=fp32 --limit-train=2048 --limit-test=256 --log-every=1000";
// Root may run mpirun in CI containers; one thread per rank keeps the two ranks on two cores.
// In the sanitizer build, LeakSanitizer unwinds slowly so that Open MPI's never-freed memory
// (its libraries have no frame pointers) is matched by fuzz/sanitizer/lsan.supp.
const std::string kEnv =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
    "LSAN_OPTIONS=\"$LSAN_OPTIONS:fast_unwind_on_malloc=0\" ";
const std::string kMpirun = kEnv + "mpirun -n 2 --oversubscribe ";

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(DataParallelCli, DeterministicRunExportsWhatOneProcessAccumulatingExports) {
  const auto dir = ScratchDir("dp_cli");
  const auto dp = dir / "dp.onnx", one = dir / "one.onnx", ckpt = dir / "dp.ckpt", log = dir / "dp.jsonl";
  // --log-json makes rank 0 read the loss every step and rank 1 (which writes no log) not: the
  // ranks must still make the same collectives (the loss average once hung here).
  Result r = RunShell(kMpirun + kBinary + " train " + kMlp + kFlags + " --data-parallel --deterministic --steps=20 " +
                          "--batch-size=64 --save=" + ckpt.string() + " --export=" + dp.string() +
                          " --log-json=" + log.string(), dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // One row per step, and rank 0's evaluations (rows with "eval_loss").
  const std::string lines = Slurp(log);
  size_t evals = 0;
  for (size_t at = lines.find("\"eval_loss\""); at != std::string::npos; at = lines.find("\"eval_loss\"", at + 1)) ++evals;
  EXPECT_GE(evals, 1u) << lines;
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n') - static_cast<std::ptrdiff_t>(evals), 20) << lines;
  EXPECT_NE(r.err.find("data parallel over 2 ranks"), std::string::npos) << r.err;
  // Rank 0 alone prints the summary.
  const std::string done = "trained 20 steps";
  ASSERT_NE(r.out.find(done), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(done, r.out.find(done) + 1), std::string::npos) << "printed twice:\n" << r.out;

  Result s = RunShell(kEnv + kBinary + " train " + kMlp + kFlags + " --steps=40 --accumulate=2 --batch-size=32 --export=" +
                          one.string(), dir);
  ASSERT_EQ(s.code, 0) << s.err;
  const std::string a = Slurp(dp), b = Slurp(one);
  ASSERT_GT(a.size(), 100000u);
  EXPECT_TRUE(a == b) << "the data-parallel export differs from the one-process export";

  // The checkpoint resumes with 2 ranks, and is refused by one process.
  Result resumed = RunShell(kMpirun + kBinary + " train " + kMlp + kFlags + " --data-parallel --deterministic --steps=24 " +
                                "--batch-size=64 --resume=" + ckpt.string(), dir);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.out.find("trained 4 steps (24 in all)"), std::string::npos) << resumed.out;
  Result refused = RunShell(kEnv + kBinary + " train " + kMlp + kFlags + " --steps=24 --batch-size=64 --resume=" +
                                ckpt.string(), dir);
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.err.find("2 data-parallel rank(s), this run has 1"), std::string::npos) << refused.err;
  std::filesystem::remove_all(dir);
}

// `dump --passes=train --data-parallel` shows the step a rank runs, without MPI: one bucket of
// gradients averaged before the overflow check, the flag ANDed, the optimizer reading the averages.
TEST(DataParallelCli, DumpShowsTheAllReduces) {
  const auto dir = ScratchDir("dp_cli");
  Result r = RunShell(kBinary + " dump " + kMlp + " --passes=train --precision=fp32 --data-parallel", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("dp/allreduce/0: ai.mixtrain.AllReduce(grad/fc3.bias"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("amp/all_finite: ai.mixtrain.AllFinite(dp/allreduce/0_out5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dp/all_finite: ai.mixtrain.AllReduce(amp/all_finite"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ai.mixtrain.AllReduce: 2"), std::string::npos) << r.out;
  Result plain = RunShell(kBinary + " dump " + kMlp + " --passes=train --precision=fp32", dir);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("AllReduce"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(DataParallelCli, BadSetupsFailOnEveryRankWithAMessage) {
  const auto dir = ScratchDir("dp_cli");
  // A global batch that does not split over the ranks.
  Result odd = RunShell(kMpirun + kBinary + " train " + kMlp + kFlags + " --data-parallel --steps=2 --batch-size=63", dir);
  EXPECT_NE(odd.code, 0);
  EXPECT_NE(odd.err.find("must be a multiple of the 2 ranks"), std::string::npos) << odd.err;
  // --deterministic alone means nothing.
  Result det = RunShell(kEnv + kBinary + " train " + kMlp + kFlags + " --deterministic --steps=2", dir);
  EXPECT_NE(det.code, 0);
  EXPECT_NE(det.err.find("--deterministic needs --data-parallel"), std::string::npos) << det.err;
  // Ranks launched with different configs (an MPMD job: lr differs on rank 1) fail on both.
  Result mismatch = RunShell(kEnv + "mpirun --oversubscribe -n 1 " + kBinary + " train " + kMlp + kFlags +
                                 " --data-parallel --steps=2 --lr=0.001 : -n 1 " + kBinary + " train " + kMlp + kFlags +
                                 " --data-parallel --steps=2 --lr=0.002",
                             dir);
  EXPECT_NE(mismatch.code, 0);
  EXPECT_NE(mismatch.err.find("optimizer.lr is 0.001 on rank 0, 0.002 on rank 1"), std::string::npos) << mismatch.err;
  // One rank failing alone (its data file is missing) ends the job instead of leaving the other
  // waiting in a collective.
  Result alone = RunShell(kEnv + "timeout 120 mpirun --oversubscribe -n 1 " + kBinary + " train " + kMlp + kFlags +
                              " --data-parallel --steps=2 : -n 1 " + kBinary + " train " + kMlp + kFlags +
                              " --data-parallel --steps=2 --data=" + (dir / "missing.npz").string(),
                          dir);
  EXPECT_NE(alone.code, 0);
  EXPECT_NE(alone.code, 124) << "the job hung";
  EXPECT_NE(alone.err.find("missing.npz"), std::string::npos) << alone.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mixtrain::cli_test
