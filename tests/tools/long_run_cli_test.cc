// `mixtrain train` over a long run (issue 36): SIGTERM finishes the step, saves and exits 143,
// and `--resume=CKPT` alone continues to the same losses as a run never interrupted;
// --save-every keeps the last --keep checkpoints; --eval-every writes eval_ rows to --log-json and
// an event file to --log-dir; --early-stop stops when the test loss stops improving and
// --save-best keeps the best; --ignore-index leaves labels out. Runs the built binary on the MLP
// fixture (tests/data/optim/).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "nlohmann/json.hpp"
#include "runtime/npy.h"
#include "tests/tools/cli_test_util.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kMlp = std::string(MT_SOURCE_DIR) + "/tests/data/optim/mlp.onnx";

class LongRunCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_long_run_cli");
    // 64 examples of the MLP's input (8 features, 4 classes) with learnable labels, and a test set.
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0, 1);
    Tensor x(DType::kF32, {64, 8}), y(DType::kI64, {64});
    for (int64_t i = 0; i < 64; ++i) {
      float* row = x.data_as<float>() + i * 8;
      for (int j = 0; j < 8; ++j) row[j] = n(rng);
      y.data_as<int64_t>()[i] = (row[0] > 0) + 2 * (row[1] > 0);
    }
    ASSERT_TRUE(WriteNpz(Path("data.npz"), {{"x", x}, {"labels", y}, {"test/x", x}, {"test/labels", y}}).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  Result Run(const std::string& args) {
    return cli_test::RunShell("cd " + dir_.string() + " && timeout 120 " + kBinary + " " + args, dir_);
  }

  // Step -> loss, and the evaluation rows, of a --log-json file.
  struct Log {
    std::map<int64_t, double> loss;
    std::vector<nlohmann::json> evals;
  };
  Log ReadLog(const std::string& name) {
    Log log;
    std::ifstream in(Path(name));
    EXPECT_TRUE(in.good()) << name;
    for (std::string line; std::getline(in, line);) {
      nlohmann::json row = nlohmann::json::parse(line);
      if (row.contains("eval_loss")) log.evals.push_back(row);
      else log.loss[row.at("step").get<int64_t>()] = row.at("loss").get<double>();
    }
    return log;
  }

  fs::path dir_;
};

const std::string kRun = kMlp + " --data=data.npz --batch-size=16 --steps=400 --log-every=1";

TEST_F(LongRunCli, SigtermSavesAndResumeAloneFinishesWithTheSameLosses) {
  ASSERT_EQ(Run("train " + kRun + " --log-json=full.json").code, 0);
  // The same run, stopped by SIGTERM once it has stepped, then resumed from the checkpoint alone.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "cd " + dir_.string() + " && exec " + kBinary + " train " + kRun +
                            " --save=run.ckpt --log-json=a.json 2>a.err >a.out";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::ifstream err(Path("a.err"));
    std::string text((std::istreambuf_iterator<char>(err)), {});
    if (text.find("step 20/") != std::string::npos) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << text;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  std::ifstream err(Path("a.err"));
  const std::string text((std::istreambuf_iterator<char>(err)), {});
  ASSERT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << "the run ended before the signal: " << text;
  EXPECT_NE(text.find("SIGTERM: stopped after step"), std::string::npos) << text;
  EXPECT_NE(text.find("checkpoint saved to run.ckpt"), std::string::npos) << text;
  const Log first = ReadLog("a.json");
  ASSERT_FALSE(first.loss.empty());
  const int64_t stopped_at = first.loss.rbegin()->first;
  ASSERT_LT(stopped_at, 400);

  Result resumed = Run("train --resume=run.ckpt --log-json=b.json");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from run.ckpt at step " + std::to_string(stopped_at)), std::string::npos)
      << resumed.err;
  EXPECT_NE(resumed.out.find("trained " + std::to_string(400 - stopped_at) + " steps (400 in all)"),
            std::string::npos)
      << resumed.out;
  const Log full = ReadLog("full.json"), second = ReadLog("b.json");
  ASSERT_EQ(full.loss.size(), 400u);
  ASSERT_EQ(first.loss.size() + second.loss.size(), 400u);
  for (const auto& [step, loss] : full.loss) {
    const Log& part = step <= stopped_at ? first : second;
    ASSERT_TRUE(part.loss.contains(step)) << step;
    EXPECT_EQ(part.loss.at(step), loss) << "step " << step;
  }
}

TEST_F(LongRunCli, SaveEveryKeepsTheLastCheckpoints) {
  Result r = Run("train " + kMlp + " --data=data.npz --batch-size=16 --steps=14 --save=ck.pb --save-every=3 --keep=3");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind("ck", 0) == 0) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  // Saves at steps 3, 6, 9, 12 (and 4, 8, 12 as epoch ends; 14 at the end): the last three stay
  // numbered, and ck.pb is step 14's.
  EXPECT_EQ(files, (std::vector<std::string>{"ck-step12.pb", "ck-step14.pb", "ck-step9.pb", "ck.pb"}));
  Result resumed = Run("train --resume=ck-step12.pb --steps=14");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("trained 2 steps (14 in all)"), std::string::npos) << resumed.out;
  EXPECT_NE(Run("train " + kMlp + " --data=data.npz --steps=4 --save-every=2").err.find("--save-every needs --save"),
            std::string::npos);
}

TEST_F(LongRunCli, EvalEveryWritesEvalRowsAndTensorBoardEvents) {
  Result r = Run("train " + kMlp + " --data=data.npz --batch-size=16 --steps=10 --eval-every=3 "
                 "--log-json=log.json --log-dir=tb");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step 3: test loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1: test loss"), std::string::npos) << r.out;
  const Log log = ReadLog("log.json");
  EXPECT_EQ(log.loss.size(), 10u);
  // Steps 3, 6, 9 by --eval-every, 4 and 8 as epoch ends, 10 at the end.
  std::vector<int64_t> steps;
  for (const nlohmann::json& e : log.evals) {
    steps.push_back(e.at("step").get<int64_t>());
    for (const char* key : {"epoch", "eval_loss", "eval_perplexity", "eval_top1", "eval_examples"})
      EXPECT_TRUE(e.contains(key)) << key << " missing in " << e.dump();
    EXPECT_FALSE(e.contains("eval_top5")) << "top-5 of 4 classes: " << e.dump();
    EXPECT_EQ(e.at("eval_examples").get<int64_t>(), 64);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 4, 6, 8, 9, 10}));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "tb")) {
    EXPECT_EQ(e.path().filename().string().rfind("events.out.tfevents.", 0), 0u) << e.path();
    EXPECT_GT(fs::file_size(e.path()), 200u);
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(LongRunCli, EarlyStopWhenTheTestLossStopsImprovingKeepingTheBest) {
  // A learning rate so small that the loss never goes down after the first evaluation.
  Result r = Run("train " + kMlp + " --data=data.npz --batch-size=16 --steps=100 --lr=1e-30 --eval-every=1 "
                 "--early-stop=2 --save-best=best.ckpt --save=last.ckpt");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("early stop at step 3"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("trained 3 steps"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(Path("best.ckpt")));
  EXPECT_TRUE(fs::exists(Path("last.ckpt")));
  // The resumed run has the record: one more evaluation without improvement stops it again.
  Result resumed = Run("train --resume=last.ckpt --steps=100");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("early stop at step 4"), std::string::npos) << resumed.err;
}

TEST_F(LongRunCli, IgnoreIndexLeavesLabelsOut) {
  Tensor x(DType::kF32, {8, 8}), y(DType::kI64, {8});
  for (int64_t i = 0; i < 64; ++i) x.data_as<float>()[i] = static_cast<float>(i % 7) - 3;
  for (int64_t i = 0; i < 8; ++i) y.data_as<int64_t>()[i] = i % 2 ? -100 : i % 4;
  ASSERT_TRUE(WriteNpz(Path("pad.npz"), {{"x", x}, {"labels", y}, {"test/x", x}, {"test/labels", y}}).ok());
  Result refused = Run("train " + kMlp + " --data=pad.npz --steps=2");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.err.find("label -100"), std::string::npos) << refused.err;
  Result r = Run("train " + kMlp + " --data=pad.npz --steps=2 --ignore-index=-100");
  ASSERT_EQ(r.code, 0) << r.err;
  // 4 of the 8 labels count.
  EXPECT_NE(r.out.find("(8 examples, 4 positions)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mixtrain
