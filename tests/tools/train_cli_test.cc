// `mixtrain train` end to end: runs the built binary on the MLP fixture (tests/data/optim/) with a
// small .npz data set. Bad flags, models and data files give one "mixtrain train:" error line,
// a non-zero exit and leave no --save / --export / --log-json file; a tiny run writes one valid
// JSON object per step with the six keys; --resume continues the run exactly; --export writes a
// model that `mixtrain run` loads. Everything is checked before the first step (docs/validation.md):
// numeric flags of every command, NaN/Inf data, labels, FIFOs given as inputs, output paths; and
// --log-json stays valid JSON and writes through no predictable temp file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <chrono>
#include <cmath>
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
    dir_ = cli_test::ScratchDir("mt_train_cli");
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

  // `timeout`: a run that blocks (a FIFO read, say) fails the test instead of hanging the suite.
  Result Run(const std::string& args) { return cli_test::RunShell("timeout 60 " + kBinary + " " + args, dir_); }

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

  std::string TinyRun(int steps) const { return "train " + TinyArgs(steps); }
  // TinyRun's arguments, for ExpectError.
  std::string TinyArgs(int steps) const {
    return kMlp + " --data=" + Path("data.npz") + " --batch-size=16 --steps=" + std::to_string(steps) +
           " --no-shuffle --lr=0.01";
  }

  fs::path dir_;
};

// The step rows of a --log-json file (every line must be JSON); `evals` gets the evaluation rows
// (those with "eval_loss").
std::vector<google::protobuf::Struct> ReadJsonLines(const std::string& path,
                                                    std::vector<google::protobuf::Struct>* evals = nullptr) {
  std::ifstream f(path);
  std::vector<google::protobuf::Struct> out;
  std::string line;
  while (std::getline(f, line)) {
    google::protobuf::Struct s;
    auto st = google::protobuf::util::JsonStringToMessage(line, &s);
    EXPECT_TRUE(st.ok()) << "not JSON: " << line;
    if (!s.fields().contains("eval_loss")) out.push_back(s);
    else if (evals) evals->push_back(s);
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
  std::vector<google::protobuf::Struct> evals;
  auto lines = ReadJsonLines(Path("out/log.jsonl"), &evals);
  ASSERT_EQ(lines.size(), 6u);
  // 4 batches per epoch: the end of epoch 1 (step 4) and the final evaluation (step 6).
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0].fields().at("step").number_value(), 4);
  EXPECT_EQ(evals[0].fields().at("epoch").number_value(), 1);
  EXPECT_EQ(evals[1].fields().at("step").number_value(), 6);
  for (const auto& e : evals)
    for (const char* key : {"eval_loss", "eval_perplexity", "eval_top1", "eval_examples"})
      EXPECT_TRUE(e.fields().contains(key)) << key;
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

// The numbers a probe of bad inputs found running and exiting 0: each now fails before training,
// naming the flag and the rule.
TEST_F(TrainCli, BadNumericFlagsFailNamingTheFlag) {
  const std::string data = " --data=" + Path("data.npz") + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--lr=-1", "--lr=-1: must be a finite number > 0"},
      {"--lr=nan", "--lr=nan: must be a finite number > 0"},
      {"--lr=inf", "--lr=inf: must be a finite number > 0"},
      {"--lr=1e39", "--lr=1e39: must be a finite number > 0 (a float32"},
      {"--steps=-1", "--steps=-1: must be an integer in [0, 1000000000000]"},
      {"--steps=nan", "--steps=nan: must be an integer"},
      {"--steps=1e30", "--steps=1e30: must be an integer in [0, 1000000000000]"},
      {"--steps=9.3e18", "--steps=9.3e18: must be an integer in [0, 1000000000000]"},
      {"--loss-scale=inf", "--loss-scale=inf: must be a finite number > 0, or one of: dynamic, off"},
      {"--loss-scale=1e39", "--loss-scale=1e39: must be a finite number > 0"},
      {"--batch-size=2.5", "--batch-size=2.5: must be an integer in [1, 2147483647]"},
      {"--beta2=1", "--beta2=1: must be a finite number in [0, 1)"},
      {"--seed=-3", "--seed=-3"},
      {"--log-every=0", "--log-every=0"},
      {"--class-axis=64", "--class-axis=64: must be an integer in [-64, 63]"},
      // Relations to the data: more than the 64 examples in one batch.
      {"--batch-size=65", "--batch-size=65: must be <= the 64 training examples"},
  };
  for (const auto& [flag, error] : cases) ExpectError(kMlp + data + flag, error);
  // A --config's fields get the same rules, named by field.
  {
    std::ofstream cfg(Path("bad.textproto"));
    cfg << "optimizer { lr: -1 }\n";
  }
  ExpectError(kMlp + data + "--config=" + Path("bad.textproto"), "optimizer.lr=-1: must be a finite number > 0");
}

// Every other command's numeric flags are checked by the same table.
TEST_F(TrainCli, OtherCommandsCheckTheirNumericFlags) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench " + kMlp + " --iters=0", "--iters=0: must be an integer in [1, 1000000]"},
      {"bench " + kMlp + " --warmup=-1", "--warmup=-1"},
      {"bench " + kMlp + " --batch-size=0", "--batch-size=0"},
      {"bench " + kMlp + " --dims=N=0.5", "--dims N=0.5: must be an integer"},
      {"check " + kMlp + " --class-axis=1.5", "--class-axis=1.5"},
      {"dump " + kMlp + " --class-axis=nan", "--class-axis=nan"},
      {"grad " + kMlp + " --data=" + Path("data.npz") + " --out=" + Path("out/g.npz") + " --class-axis=1e30",
       "--class-axis=1e30"},
  };
  for (const auto& [args, error] : cases) {
    SCOPED_TRACE(args);
    Result r = Run(args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(error), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_TRUE(OutputsLeft().empty());
  // --help shows each numeric flag's rule.
  Result help = Run("train --help");
  EXPECT_NE(help.out.find("learning rate (default: 0.001; a finite number > 0)"), std::string::npos) << help.out;
}

TEST_F(TrainCli, NonFiniteInputsAreRefusedUnlessAllowed) {
  Tensor x(DType::kF32, {64, 8}), y(DType::kI64, {64});
  for (int64_t i = 0; i < 64 * 8; ++i) x.data_as<float>()[i] = 0.25f * (i % 7);
  for (int64_t i = 0; i < 64; ++i) y.data_as<int64_t>()[i] = i % 4;
  x.data_as<float>()[5 * 8 + 3] = NAN;  // in the first batch of 16
  ASSERT_TRUE(WriteNpz(Path("nan.npz"), {{"x", x}, {"labels", y}}).ok());
  ExpectError(TinyArgs(4) + " --data=" + Path("nan.npz"), "nan.npz: array 'x' holds NaN at [5, 3]");

  // Allowed: the NaN batch's step skips its update, the others train; the log stays JSON (null).
  Result r = Run(TinyRun(4) + " --data=" + Path("nan.npz") + " --allow-nonfinite-inputs --log-json=" +
                 Path("out/log.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("trained 4 steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(1 skipped)"), std::string::npos) << r.out;
  std::ifstream f(Path("out/log.jsonl"));
  const std::string text(std::istreambuf_iterator<char>(f), {});
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  auto lines = ReadJsonLines(Path("out/log.jsonl"));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].fields().at("loss").kind_case(), google::protobuf::Value::kNullValue) << text;
  EXPECT_TRUE(lines[0].fields().at("skipped").bool_value());
  EXPECT_GT(lines[1].fields().at("loss").number_value(), 0);

  // Every value NaN: every step skips, nothing trains, and that is an error.
  for (int64_t i = 0; i < 64 * 8; ++i) x.data_as<float>()[i] = NAN;
  ASSERT_TRUE(WriteNpz(Path("allnan.npz"), {{"x", x}, {"labels", y}}).ok());
  r = Run(TinyRun(4) + " --data=" + Path("allnan.npz") + " --allow-nonfinite-inputs");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("mixtrain train: all 4 steps skipped their update"), std::string::npos) << r.err;
}

TEST_F(TrainCli, BadDataIsNamedBeforeTraining) {
  Tensor x(DType::kF32, {64, 8}), y(DType::kI64, {64}), yf(DType::kF32, {64}), y_short(DType::kI64, {63});
  for (int64_t i = 0; i < 64; ++i) y.data_as<int64_t>()[i] = i % 4;
  y.data_as<int64_t>()[50] = 7;  // the 4th batch: found before the first
  ASSERT_TRUE(WriteNpz(Path("labels.npz"), {{"x", x}, {"labels", y}}).ok());
  ExpectError(TinyArgs(4) + " --data=" + Path("labels.npz"),
              "labels.npz: array 'labels' holds label 7 at [50], outside the model's 4 classes [0, 4)");
  y.data_as<int64_t>()[50] = 0;
  ASSERT_TRUE(WriteNpz(Path("test_split.npz"), {{"x", x}, {"labels", y}, {"test/x", x}, {"test/labels", y_short}}).ok());
  ExpectError(TinyArgs(4) + " --data=" + Path("test_split.npz"), "test_split.npz (test/ arrays): array 'x' has 64");
  ASSERT_TRUE(WriteNpz(Path("short.npz"), {{"x", x}, {"labels", y_short}}).ok());
  ExpectError(TinyArgs(4) + " --data=" + Path("short.npz"), "array 'x' has 64 examples, array 'labels' has 63");
  // i32 labels would be converted (OpenTrainingData); float ones are not class indices.
  ASSERT_TRUE(WriteNpz(Path("f32.npz"), {{"x", x}, {"labels", yf}}).ok());
  ExpectError(TinyArgs(4) + " --data=" + Path("f32.npz"), "array 'labels' is f32, the model's input 'labels' is i64");
  ASSERT_TRUE(WriteNpz(Path("empty.npz"), {}).ok());
  ExpectError(TinyArgs(4) + " --data=" + Path("empty.npz"), "empty.npz: holds no arrays");
  Tensor wide(DType::kF32, {64, 9});
  ASSERT_TRUE(WriteNpz(Path("wide.npz"), {{"x", wide}, {"labels", y}}).ok());
  ExpectError(TinyArgs(4) + " --data=" + Path("wide.npz"), "array 'x' has shape [64, 9], the model's input 'x' is [");
}

// Logits flattened in the model (zoo flat_lm_*: head(x).view(-1, V), labels N*T): train batches
// T label rows per example and says so in one note; the zoo's .npz also holds arrays the model
// does not read (references), which are ignored with one note. A fixed-batch export trains at its
// batch without --batch-size and refuses another one naming the input's shape.
TEST_F(TrainCli, FlattenedLogitsTakeKLabelRowsPerExample) {
  const std::string zoo = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/";
  Result dyn = Run("train " + zoo + "flat_lm_dynamo.onnx --data=" + zoo + "flat_lm_dynamo.npz --batch-size=2 --steps=2");
  ASSERT_EQ(dyn.code, 0) << dyn.out << dyn.err;
  EXPECT_NE(dyn.err.find("mixtrain train: output 'logits' holds 8 rows per example of input 'idx': each example "
                         "takes 8 consecutive rows of 'labels'\n"),
            std::string::npos) << dyn.err;
  EXPECT_NE(dyn.err.find("flat_lm_dynamo.npz: 10 arrays the model does not read ignored (adam_losses, grad/"),
            std::string::npos) << dyn.err;
  EXPECT_NE(dyn.err.find("4 train examples, batch 2, 2 steps"), std::string::npos) << dyn.err;
  EXPECT_NE(dyn.out.find("trained 2 steps"), std::string::npos) << dyn.out;

  Result fixed = Run("train " + zoo + "flat_lm_ts.onnx --data=" + zoo + "flat_lm_ts.npz --steps=1");
  ASSERT_EQ(fixed.code, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.err.find("4 train examples, batch 4, 1 steps"), std::string::npos) << fixed.err;
  ExpectError(zoo + "flat_lm_ts.onnx --data=" + zoo + "flat_lm_ts.npz --steps=1 --batch-size=2",
              "--batch-size=2: the model was exported with a fixed batch of 4 (input 'idx' is [4, 8])");
}

// A FIFO given as an input is refused at once instead of blocking the run forever.
TEST_F(TrainCli, FifoInputsAreRefusedWithoutBlocking) {
  const std::string fifo = Path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  ExpectError(kMlp + " --data=" + fifo, "--data: '" + fifo + "' is a FIFO, not a regular file");
  ExpectError(fifo + " --data=" + Path("data.npz"), "MODEL.onnx: '" + fifo + "' is a FIFO");
  ExpectError(kMlp + " --data=" + Path("data.npz") + " --config=" + fifo, "--config: '" + fifo + "' is a FIFO");
  ExpectError(kMlp + " --data=" + Path("data.npz") + " --resume=" + fifo, "--resume: '" + fifo + "' is a FIFO");
  Result run = Run("run " + kMlp + " --inputs=" + fifo + " --out=" + Path("out/o.npz"));
  EXPECT_NE(run.err.find("--inputs: '" + fifo + "' is a FIFO"), std::string::npos) << run.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

// Output paths are checked before the model is even built: a typo costs a second, not a run.
TEST_F(TrainCli, BadOutputPathsFailBeforeTheFirstStep) {
  const std::string run = TinyRun(4);
  struct Case {
    std::string flags, error;
  };
  fs::create_directories(dir_ / "a_dir");
  ASSERT_EQ(::mkfifo(Path("out_fifo").c_str(), 0600), 0);
  const std::vector<Case> cases = {
      {" --save=" + Path("no/such/dir/run.ckpt"), "--save=" + Path("no/such/dir/run.ckpt") + ": folder '"},
      {" --export=" + Path("a_dir"), "--export=" + Path("a_dir") + ": is a directory"},
      {" --log-json=" + Path("out_fifo"), ": is a FIFO; only a regular file is replaced"},
      {" --save=" + Path("x.ckpt") + " --export=" + Path("x.ckpt"),
       "--save=" + Path("x.ckpt") + " and --export=" + Path("x.ckpt") + " are the same file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    Result r = Run(run + c.flags);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(c.error), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("step "), std::string::npos) << "trained before failing: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_FALSE(fs::exists(Path("x.ckpt")));
}

// --log-json never writes through a guessable name: a symbolic link planted at the old
// "<path>.tmp" is left alone by a good run and by a failed one, and a link at the path itself is
// refused rather than followed.
TEST_F(TrainCli, LogJsonFollowsNoPlantedLink) {
  const std::string victim = Path("victim.txt");
  {
    std::ofstream v(victim);
    v << "precious";
  }
  fs::create_symlink(victim, Path("out/log.jsonl.tmp"));
  auto victim_text = [&] {
    std::ifstream v(victim);
    return std::string(std::istreambuf_iterator<char>(v), {});
  };
  Result ok = Run(TinyRun(3) + " --log-json=" + Path("out/log.jsonl"));
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(victim_text(), "precious");
  EXPECT_TRUE(fs::is_symlink(Path("out/log.jsonl.tmp")));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(Path("out/log.jsonl"))));
  EXPECT_EQ(ReadJsonLines(Path("out/log.jsonl")).size(), 3u);

  fs::remove(Path("out/log.jsonl"));
  Result failed = Run(TinyRun(3) + " --log-json=" + Path("out/log.jsonl") + " --resume=" + Path("missing.ckpt"));
  EXPECT_NE(failed.code, 0);
  EXPECT_EQ(victim_text(), "precious");
  EXPECT_FALSE(fs::exists(Path("out/log.jsonl")));
  std::vector<std::string> left = OutputsLeft();
  EXPECT_EQ(left, std::vector<std::string>{"log.jsonl.tmp"}) << "a temp file was left behind";

  fs::create_symlink(victim, Path("out/link.jsonl"));
  Result link = Run(TinyRun(3) + " --log-json=" + Path("out/link.jsonl"));
  EXPECT_NE(link.code, 0);
  EXPECT_NE(link.err.find("is a symbolic link"), std::string::npos) << link.err;
  EXPECT_EQ(victim_text(), "precious");
}

}  // namespace
}  // namespace mixtrain
