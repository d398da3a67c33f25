// `mixtrain dump --passes=train` shows what `mixtrain train` runs: for every model of models/ and
// sets of step flags (precision, loss scaling, accumulation, clipping, recompute, LoRA, the
// device, the training layout), the dump from the CLI equals, byte for byte, the step a training
// run with the same flags writes with --show-step. ctest runs the suite natively and capped at
// AVX2 (`make test`), so both ISA paths of the CPU backend (channel block 16 and 8) are compared.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/tools/cli_test_util.h"
#include "tests/tools/random_batch.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kSource = MT_SOURCE_DIR;

struct Case {
  std::string model;  // models/<model>.onnx
  int class_axis = 1;
  std::string flags;  // step flags, the same for both commands
  std::string env;    // environment for both, e.g. "MIXTRAIN_TRAIN_LAYOUT=plain"
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // models/README.md: the classifiers' logits are N x 10, gpt_mini's N x 32 x 256.
  for (const auto& [model, axis] : std::vector<std::pair<std::string, int>>{
           {"fashion_cnn", 1}, {"mlp", 1}, {"resnet_mini", 1}, {"gpt_mini", -1}}) {
    for (const std::string flags : {"", "--precision=fp32", "--dtype=bf16", "--dtype=fp16",
                                    "--dtype=bf16 --recompute=auto --accumulate=2 --clip-grad-norm=1",
                                    "--dtype=fp16 --loss-scale=1024 --optimizer=sgd --momentum=0.9",
                                    "--device=cpu --dtype=bf16 --fp32-nodes=.*"})
      cases.push_back({model, axis, flags, ""});
    cases.push_back({model, axis, "--dtype=bf16", "MIXTRAIN_TRAIN_LAYOUT=plain"});
    cases.push_back({model, axis, "--precision=fp32", "MIXTRAIN_TRAIN_LAYOUT=plain"});
  }
  cases.push_back({"gpt_mini", -1, "--dtype=bf16 --lora-rank=2", ""});
  return cases;
}

using cli_test::Slurp;

class DumpTrainAgree : public cli_test::ScratchCliTest<::testing::TestWithParam<Case>> {
 protected:
  DumpTrainAgree() : ScratchCliTest("mt_dump_agree") {}
};

TEST_P(DumpTrainAgree, DumpIsTheStepTrainRuns) {
  const Case& c = GetParam();
  const std::string model = kSource + "/models/" + c.model + ".onnx";
  const std::string data = (dir_ / "batch.npz").string();
  absl::Status st = cli_test::WriteRandomBatch(model, c.class_axis, data);
  ASSERT_TRUE(st.ok()) << st;
  const std::string flags = " --class-axis=" + std::to_string(c.class_axis) + " " + c.flags;
  const std::string env = c.env.empty() ? "" : c.env + " ";
  const fs::path ran = dir_ / "ran.txt", dumped = dir_ / "dumped.txt";
  Result train = cli_test::RunShell(env + kBinary + " train " + model + " --data=" + data + " --steps=2 --batch-size=2" + flags +
                                        " --show-step=" + ran.string(), dir_);
  ASSERT_EQ(train.code, 0) << train.out << train.err;
  EXPECT_NE(train.out.find("trained 2 steps"), std::string::npos) << train.out;
  Result dump = cli_test::RunShell(env + kBinary + " dump " + model + " --passes=train" + flags +
                                       " --out=" + dumped.string(), dir_);
  ASSERT_EQ(dump.code, 0) << dump.out << dump.err;
  const std::string step = Slurp(ran), shown = Slurp(dumped);
  // A real step: the optimizer's update and the precision report are in it.
  EXPECT_NE(step.find("state/"), std::string::npos);
  EXPECT_NE(step.find("precision report"), std::string::npos);
  // Not EXPECT_EQ: the graphs are long; the first differing line says enough.
  if (shown != step) {
    size_t at = 0;
    while (at < shown.size() && at < step.size() && shown[at] == step[at]) ++at;
    const size_t line = shown.rfind('\n', at) == std::string::npos ? 0 : shown.rfind('\n', at) + 1;
    ADD_FAILURE() << "dump and train differ for " << c.model << flags << " " << c.env << ", first at:\n  dump:  "
                  << shown.substr(line, shown.find('\n', line) - line) << "\n  train: "
                  << step.substr(line, step.find('\n', line) - line);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DumpTrainAgree, ::testing::ValuesIn(Cases()), [](const auto& info) {
  return info.param.model + "_" + std::to_string(info.index);
});

// Flags that shape the step change the dump the way they change the run: the same model with and
// without --accumulate=2, and with the training layout plain or blocked, gives different steps
// (so the comparison above can fail).
TEST(DumpTrainAgreeNegative, StepFlagsChangeTheDump) {
  const fs::path dir = cli_test::ScratchDir("mt_dump_agree_neg");
  const std::string model = kSource + "/models/fashion_cnn.onnx";
  auto dump = [&](const std::string& env, const std::string& flags) {
    Result r = cli_test::RunShell(env + kBinary + " dump " + model + " --passes=train " + flags, dir);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out;
  };
  const std::string base = dump("", "--dtype=bf16");
  EXPECT_TRUE(dump("", "--dtype=bf16 --accumulate=2") != base) << "--accumulate=2 changed nothing";
  // fp32: the conv region is blocked on AVX2 CPUs too (8 channels), bf16 there is not.
  EXPECT_TRUE(dump("MIXTRAIN_TRAIN_LAYOUT=plain ", "--precision=fp32") != dump("", "--precision=fp32"))
      << "the plain layout changed nothing";
  EXPECT_TRUE(dump("", "--dtype=fp16") != base) << "--dtype=fp16 changed nothing";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mixtrain
