// LoRA from the command line (docs/lora.md): `check --lora-rank` lists the adapters, `train
// --lora-rank` writes the merged export and the adapter file, `--lora-init` continues from it, and
// each bad input is one "mixtrain train:" line, a non-zero exit and no output file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "runtime/npy.h"
#include "tests/tools/cli_test_util.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kZoo = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/";
const std::string kGpt2 = kZoo + "gpt2_hf.onnx --data=" + kZoo + "gpt2_hf.npz --class-axis=-1 --device=cpu";

class LoraCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_lora_cli");
    fs::create_directories(dir_ / "out");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  Result Run(const std::string& args) { return cli_test::RunShell("timeout 120 " + kBinary + " " + args, dir_); }

  void ExpectError(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    Result r = Run("train " + kGpt2 + " --steps=1 " + args + " --export=" + Path("out/m.onnx") +
                   " --save=" + Path("out/ck"));
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err.rfind("mixtrain train: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_TRUE(fs::is_empty(dir_ / "out"));
  }
  fs::path dir_;
};

TEST_F(LoraCli, CheckListsTheAdapters) {
  Result r = Run("check " + kZoo + "gpt2_hf.onnx --class-axis=-1 --lora-rank=4");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("lora: 8 adapters of rank 4, 4096 parameters (16.0 KiB)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("m.transformer.h.1.mlp.c_fc.weight [in 32, out 128]: A [32,4] + B [4,128], 2.5 KiB"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("trainable: 16 initializers"), std::string::npos) << r.out;
}

TEST_F(LoraCli, TrainExportsMergedAndAdaptersAndContinues) {
  Result r = Run("train " + kGpt2 + " --steps=2 --lora-rank=4 --lora-dropout=0.1 --export=" + Path("m.onnx") +
                 " --export-adapter=" + Path("a.onnx"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(Path("m.onnx")));
  EXPECT_TRUE(fs::exists(Path("a.onnx")));
  Result again = Run("train " + kGpt2 + " --steps=1 --lora-rank=4 --lora-init=" + Path("a.onnx"));
  EXPECT_EQ(again.code, 0) << again.err;
  auto npz = ReadNpz(kZoo + "gpt2_hf.npz");
  ASSERT_TRUE(npz.ok());
  ASSERT_TRUE(WriteNpz(Path("x.npz"), {{"input_ids", npz->at("input_ids")}}).ok());
  Result run = Run("run " + Path("m.onnx") + " --inputs=" + Path("x.npz") + " --out=" + Path("y.npz"));
  EXPECT_EQ(run.code, 0) << run.err;
}

// Conv kernels, named by --lora-targets (tests/data/lora/cnn_lora.onnx, a torch.nn CNN):
// listed with PEFT's shapes, trained, merged into the kernels, written as an adapter file and
// read back; a rank above a kernel's min(in x kernel, out) is one line.
TEST_F(LoraCli, ConvKernelsByTheirNames) {
  const std::string cnn = std::string(MT_SOURCE_DIR) + "/tests/data/lora/cnn_lora.onnx";
  Result r = Run("check " + cnn + " --lora-rank=4 --lora-targets='conv.*'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("lora: 4 adapters of rank 4, 1244 parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("conv2.weight [in 8, out 16]: A [4,8,3,3] + B [16,4,1,1], 1.3 KiB"), std::string::npos) << r.out;
  auto npz = ReadNpz(std::string(MT_SOURCE_DIR) + "/tests/data/lora/cnn_lora.npz");
  ASSERT_TRUE(npz.ok());
  ASSERT_TRUE(WriteNpz(Path("d.npz"), {{"input", npz->at("input")}, {"labels", npz->at("labels")}}).ok());
  ASSERT_TRUE(WriteNpz(Path("x.npz"), {{"input", npz->at("input")}}).ok());
  const std::string train = "train " + cnn + " --data=" + Path("d.npz") + " --batch-size=4 --lora-rank=4 --lora-targets='conv.*' ";
  r = Run(train + "--steps=3 --export=" + Path("m.onnx") + " --export-adapter=" + Path("a.onnx"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = Run(train + "--steps=1 --lora-init=" + Path("a.onnx"));
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run("run " + Path("m.onnx") + " --inputs=" + Path("x.npz") + " --out=" + Path("y.npz"));
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run(train + "--steps=1 --lora-rank=30 --export=" + Path("out/m.onnx"));
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.err, "mixtrain train: --lora-rank=30 is larger than min(in x kernel, out) = 8 of the Conv kernel "
                   "'conv1.weight' [out 8, in 3, kernel 3x3]\n");
  EXPECT_TRUE(fs::is_empty(dir_ / "out"));
}

TEST_F(LoraCli, BadInputIsOneLine) {
  ExpectError("--lora-rank=40", "--lora-rank=40 is larger than min(in, out) = 32");
  ExpectError("--lora-rank=4 --lora-targets=nothing", "--lora-targets=nothing matches no weight");
  ExpectError("--lora-rank=4 --lora-targets=m.lm_head.weight", "is also read by Gather");  // tied to wte
  ExpectError("--export-adapter=" + Path("out/a.onnx"), "--export-adapter needs --lora-rank");
  ExpectError("--lora-rank=-1", "--lora-rank=-1: must be an integer in [0, 2147483647]");
  ExpectError("--lora-rank=4 --lora-dropout=1", "--lora-dropout=1: must be");
  ExpectError("--lora-targets=x", "lora_targets is set but lora_rank is 0");
  ExpectError("--lora-rank=4 --lora-init=" + std::string(MT_SOURCE_DIR) + "/tests/data/lora/gpt2_lora.adapter.onnx",
              "an adapter file for another model");
}

}  // namespace
}  // namespace mixtrain
