// `mixtrain train --data=FOLDER`: a folder of .npy files (test/ for the test set) trains exactly as
// the same arrays in one .npz do (same shuffled batches, same losses), with NumPy's default f64 /
// i32 / u8 arrays converted and said so in one line; a bad folder gives one "mixtrain train:" line
// naming the file, a non-zero exit, and no output file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "runtime/npy.h"
#include "tests/tools/cli_test_util.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kMlp = std::string(MT_SOURCE_DIR) + "/tests/data/optim/mlp.onnx";

class TrainFolderCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_train_folder_cli");
    fs::create_directories(dir_ / "out");
    fs::create_directories(dir_ / "data" / "test");
    // 64 examples of the MLP's input (8 features, 4 classes) with learnable labels: in the
    // model's types in data.npz, in NumPy's defaults (f64, i32; u8 for the test labels) in data/.
    std::mt19937 rng(3);
    std::normal_distribution<double> n(0, 1);
    Tensor x(DType::kF32, {64, 8}), y(DType::kI64, {64}), x64(DType::kF64, {64, 8}), y32(DType::kI32, {64}),
        y8(DType::kU8, {64});
    for (int64_t i = 0; i < 64; ++i) {
      for (int j = 0; j < 8; ++j) {
        const double v = static_cast<float>(n(rng));  // exactly representable in f32
        x64.data_as<double>()[i * 8 + j] = v;
        x.data_as<float>()[i * 8 + j] = static_cast<float>(v);
      }
      const int label = (x.data_as<float>()[i * 8] > 0) + 2 * (x.data_as<float>()[i * 8 + 1] > 0);
      y.data_as<int64_t>()[i] = label;
      y32.data_as<int32_t>()[i] = label;
      y8.data_as<uint8_t>()[i] = static_cast<uint8_t>(label);
    }
    ASSERT_TRUE(WriteNpz(Path("data.npz"), {{"x", x}, {"labels", y}, {"test/x", x}, {"test/labels", y}}).ok());
    ASSERT_TRUE(WriteNpy(Path("data/x.npy"), x64).ok());
    ASSERT_TRUE(WriteNpy(Path("data/labels.npy"), y32).ok());
    ASSERT_TRUE(WriteNpy(Path("data/test/x.npy"), x64).ok());
    ASSERT_TRUE(WriteNpy(Path("data/test/labels.npy"), y8).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  Result Run(const std::string& args) { return cli_test::RunShell("timeout 60 " + kBinary + " " + args, dir_); }
  std::string Args(const std::string& data) const {
    return "train " + kMlp + " --data=" + data + " --batch-size=16 --steps=8 --seed=5 --lr=0.01";
  }
  std::string OutputFlags() const {
    return " --save=" + Path("out/run.ckpt") + " --export=" + Path("out/model.onnx") +
           " --log-json=" + Path("out/log.jsonl");
  }
  void ExpectError(const std::string& needle) {
    Result r = Run(Args(Path("data")) + OutputFlags());
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err.rfind("mixtrain train: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("trained"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::is_empty(dir_ / "out")) << "an output file was left behind";
  }

  fs::path dir_;
};

// The "loss" of every step of a --log-json file.
std::vector<std::string> Losses(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  const std::regex loss("\"loss\": ([^,]+),");
  std::smatch m;
  for (std::string line; std::getline(f, line);)
    if (std::regex_search(line, m, loss)) out.push_back(m[1]);
  return out;
}

TEST_F(TrainFolderCli, FolderTrainsLikeTheNpz) {
  Result npz = Run(Args(Path("data.npz")) + " --log-json=" + Path("npz.jsonl"));
  ASSERT_EQ(npz.code, 0) << npz.err;
  Result folder = Run(Args(Path("data")) + " --log-json=" + Path("folder.jsonl"));
  ASSERT_EQ(folder.code, 0) << folder.err;
  const std::string note = "mixtrain train: " + Path("data") +
                           ": converting as batches are read: 'labels' i32 to i64, 'labels' u8 to i64, 'x' f64 to f32\n";
  EXPECT_NE(folder.err.find(note), std::string::npos) << folder.err;
  EXPECT_EQ(npz.err.find("converting"), std::string::npos) << npz.err;
  const std::vector<std::string> losses = Losses(Path("npz.jsonl"));
  ASSERT_EQ(losses.size(), 8u);
  EXPECT_EQ(Losses(Path("folder.jsonl")), losses);
  // The same test set: the same evaluation at each epoch's end (8 steps of 16: two epochs).
  auto evaluations = [](const std::string& out) {
    return out.substr(0, out.find("trained "));
  };
  EXPECT_NE(npz.out.find("epoch 2: test loss"), std::string::npos) << npz.out;
  EXPECT_EQ(evaluations(folder.out), evaluations(npz.out));
}

// Shuffling stays exact across a resume: a run on the folder stopped mid-epoch (step 5 of 4-batch
// epochs) and resumed continues with the losses of an uninterrupted run on the .npz.
TEST_F(TrainFolderCli, ResumeOnTheFolderContinuesTheNpzRun) {
  const std::string fp32 = " --precision=fp32";  // compares the mechanism, not rounding
  ASSERT_EQ(Run(Args(Path("data.npz")) + fp32 + " --log-json=" + Path("straight.jsonl")).code, 0);
  ASSERT_EQ(Run(Args(Path("data")) + fp32 + " --steps=5 --save=" + Path("half.ckpt")).code, 0);
  Result r = Run(Args(Path("data")) + fp32 + " --resume=" + Path("half.ckpt") + " --log-json=" + Path("resumed.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> straight = Losses(Path("straight.jsonl")), resumed = Losses(Path("resumed.jsonl"));
  ASSERT_EQ(straight.size(), 8u);
  EXPECT_EQ(resumed, std::vector<std::string>(straight.begin() + 5, straight.end()));
}

TEST_F(TrainFolderCli, ArraysOfDifferentLengths) {
  ASSERT_TRUE(WriteNpy(Path("data/labels.npy"), Tensor(DType::kI64, {60})).ok());
  ExpectError(Path("data") + ": x.npy has 64 examples, labels.npy has 60");
}

TEST_F(TrainFolderCli, PickledArray) {
  fs::copy_file(std::string(MT_SOURCE_DIR) + "/tests/data/npy/object.npy", dir_ / "data" / "test" / "x.npy",
                fs::copy_options::overwrite_existing);
  ExpectError(Path("data/test/x.npy") + ": holds Python objects (dtype object, pickled)");
}

TEST_F(TrainFolderCli, TruncatedFile) {
  fs::resize_file(dir_ / "data" / "x.npy", fs::file_size(dir_ / "data" / "x.npy") - 8);
  ExpectError(Path("data/x.npy") + ": shape (64, 8) needs more than the");
}

TEST_F(TrainFolderCli, MissingArray) {
  fs::remove(dir_ / "data" / "labels.npy");
  ExpectError(Path("data/labels.npy") + ": missing: the model reads an array 'labels' (the folder holds x.npy)");
}

}  // namespace
}  // namespace mixtrain
