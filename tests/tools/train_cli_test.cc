// `mixtrain train` end to end: runs the built binary on the MLP fixture (tests/data/optim/) with a
// small .npz data set. Bad flags, models and data files give one "mixtrain train:" error line,
// a non-zero exit and leave no --save / --export / --log-json file; a tiny run writes one valid
// JSON object per step with the six keys; --resume continues the run exactly; --export writes a
// model that `mixtrain run` loads.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <random>

#include "absl/strings/str_split.h"
#include "tests/tools/cli_test_util.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/npy.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kMlp = std::string(MT_SOURCE_DIR) + "/tests/data/optim/mlp.onnx";

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = fs::temp_directory_path() /
           ("mt_train_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
    // 64 examples of the MLP's input (8 features, 4 classes) with learnable labels, plus a test
    // split; and the inputs alone for `mixtrain run`.
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0, 1);
    Tensor x(DType::kF32, {64, 8}), y(DType::kI64, {64});
    for (int64_t i = 0; i < 64; ++i) {
      float* row = x.data_as<float>() + i * 8;
      for (int j = 0; j < 8; ++j) row[j] = n(rng);
      y.data_as<int64_t>()[i] = (row[0] > 0) + 2 * (row[1] > 0);
    }
    ASSERT_TRUE(WriteNpz(Path("data.npz"), {{"x", x}, {"labels", y}, {"test/x", x}, {"test/labels", y}}).ok());
    ASSERT_TRUE(WriteNpz(Path("inputs.npz"), {{"x", x}}).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  Result Run(const std::string& args) { return cli_test::RunShell(kBinary + " " + args, dir_); }

  // Output flags every failing run is given; none of their files (nor temp files) may appear in
  // out/.
  std::string OutputFlags() const {
    return " --save=" + Path("out/run.ckpt") + " --export=" + Path("out/model.onnx") +
           " --log-json=" + Path("out/log.jsonl");
  }
  std::vector<std::string> OutputsLeft() const {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir_ / "out")) left.push_back(e.path().filename().string());
    return left;
  }
  void ExpectError(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    Result r = Run("train " + args + OutputFlags());
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err.rfind("mixtrain train: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_TRUE(OutputsLeft().empty()) << "left behind: " << OutputsLeft()[0];
  }

  std::string TinyRun(int steps) const {
    return "train " + kMlp + " --data=" + Path("data.npz") + " --batch-size=16 --steps=" + std::to_string(steps) +
           " --no-shuffle --lr=0.01";
  }

  fs::path dir_;
};

std::vector<google::protobuf::Struct> ReadJsonLines(const std::string& path) {
  std::ifstream f(path);
  std::vector<google::protobuf::Struct> out;
  std::string line;
  while (std::getline(f, line)) {
    google::protobuf::Struct s;
    auto st = google::protobuf::util::JsonStringToMessage(line, &s);
    EXPECT_TRUE(st.ok()) << "not JSON: " << line;
    out.push_back(s);
  }
  return out;
}

TEST_F(TrainCli, BadFlagsAndFilesFailCleanly) {
  ExpectError(kMlp + " --bogus=1", "bogus");
  ExpectError(kMlp + " --data=" + Path("data.npz") + " --optimizer=lion", "--optimizer");
  ExpectError(kMlp + " --data=" + Path("data.npz") + " --lr=fast", "--lr");
  ExpectError(kMlp + " --data=" + Path("data.npz") + " --precision=fp8", "--precision");
  ExpectError(Path("missing.onnx") + " --data=" + Path("data.npz"), "missing.onnx");
  {
    std::ofstream bad(Path("bad.npz"));
    bad << "this is not a zip file";
  }
  ExpectError(kMlp + " --data=" + Path("bad.npz"), "bad.npz");
  ExpectError(kMlp + " --data=" + Path("nothere.npz"), "nothere.npz");
  // Arrays that do not match the model: labels missing.
  Tensor x(DType::kF32, {4, 8});
  ASSERT_TRUE(WriteNpz(Path("nolabels.npz"), {{"x", x}}).ok());
  Result r = Run(TinyRun(2) + " --data=" + Path("nolabels.npz") + OutputFlags());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("labels"), std::string::npos) << r.err;
  EXPECT_TRUE(OutputsLeft().empty());
}

TEST_F(TrainCli, TinyRunWritesJsonLinesCheckpointAndExport) {
  Result r = Run(TinyRun(6) + OutputFlags());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("trained 6 steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("test accuracy"), std::string::npos) << r.out;
  auto lines = ReadJsonLines(Path("out/log.jsonl"));
  ASSERT_EQ(lines.size(), 6u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& f = lines[i].fields();
    EXPECT_EQ(f.size(), 6u);
    for (const char* key : {"step", "loss", "loss_scale", "skipped", "lr", "ms"})
      EXPECT_TRUE(f.contains(key)) << "line " << i << " lacks " << key;
    EXPECT_EQ(f.at("step").number_value(), i + 1);
    EXPECT_GT(f.at("loss").number_value(), 0);
    EXPECT_EQ(f.at("loss_scale").number_value(), 1);  // bf16 AMP on the CPU: no loss scaling
    EXPECT_FALSE(f.at("skipped").bool_value());
    EXPECT_NEAR(f.at("lr").number_value(), 0.01, 1e-9);
    EXPECT_GT(f.at("ms").number_value(), 0);
  }
  EXPECT_LT(lines.back().fields().at("loss").number_value(), lines.front().fields().at("loss").number_value());
  std::vector<std::string> left = OutputsLeft();
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"log.jsonl", "model.onnx", "run.ckpt"}));

  // The exported model runs in `mixtrain run`.
  Result run = Run("run " + Path("out/model.onnx") + " --inputs=" + Path("inputs.npz") + " --out=" + Path("pred.npz"));
  ASSERT_EQ(run.code, 0) << run.err;
  auto pred = ReadNpz(Path("pred.npz"));
  ASSERT_TRUE(pred.ok()) << pred.status();
  ASSERT_TRUE(pred->contains("logits"));
  const Tensor& logits = pred->at("logits");
  EXPECT_EQ(logits.dims(), (std::vector<int64_t>{64, 4}));
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_TRUE(std::isfinite(logits.GetDouble(i)));
}

TEST_F(TrainCli, ResumeContinuesTheSameRun) {
  // fp32 so that the comparison is of the mechanism, not of rounding; 4 batches per epoch, so the
  // resume point (step 3) is mid-epoch.
  ASSERT_EQ(Run(TinyRun(6) + " --precision=fp32 --log-json=" + Path("straight.jsonl")).code, 0);
  ASSERT_EQ(Run(TinyRun(3) + " --precision=fp32 --save=" + Path("half.ckpt")).code, 0);
  Result r = Run(TinyRun(6) + " --precision=fp32 --resume=" + Path("half.ckpt") + " --log-json=" + Path("resumed.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("resumed"), std::string::npos) << r.err;
  auto straight = ReadJsonLines(Path("straight.jsonl"));
  auto resumed = ReadJsonLines(Path("resumed.jsonl"));
  ASSERT_EQ(straight.size(), 6u);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed[i].fields().at("step").number_value(), 4 + i);
    EXPECT_EQ(resumed[i].fields().at("loss").number_value(), straight[3 + i].fields().at("loss").number_value())
        << "step " << 4 + i;
  }
}

TEST_F(TrainCli, BadResumeCheckpointFailsCleanly) {
  {
    std::ofstream bad(Path("bad.ckpt"));
    bad << "garbage";
  }
  Result r = Run(TinyRun(2) + " --resume=" + Path("bad.ckpt") + OutputFlags());
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("bad.ckpt"), std::string::npos) << r.err;
  EXPECT_TRUE(OutputsLeft().empty());
}

}  // namespace
}  // namespace mixtrain
