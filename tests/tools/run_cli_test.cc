// `mixtrain run` end to end: the built binary reads an .npz, runs a shipped model and writes its
// outputs by name; the result must equal an in-process Session run, bf16 must stay close to it,
// and bad arguments must fail with a message naming the culprit. Also a smoke test of `bench`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "graph/onnx_import.h"
#include "runtime/npy.h"
#include "runtime/session.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

const std::string kBinary = std::string(MT_BINARY_DIR) + "/mixtrain";
const std::string kModel = std::string(MT_SOURCE_DIR) + "/models/mlp.onnx";

struct Result {
  int code;
  std::string output;  // stdout and stderr
};

Result RunCli(const std::string& args) {
  std::string cmd = kBinary + " " + args + " 2>&1";
  Result r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class RunCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = fs::temp_directory_path() / ("run_cli_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    Tensor x(DType::kF32, {4, 784});
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::sin(0.01f * i);
    input_ = x;
    ASSERT_TRUE(WriteNpz((dir_ / "in.npz").string(), {{"input", x}}).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  Tensor Reference() {
    auto g = ImportOnnxFile(kModel);
    EXPECT_TRUE(g.ok()) << g.status();
    auto s = Session::Create(**g);
    EXPECT_TRUE(s.ok()) << s.status();
    auto out = (*s)->Run({{"input", input_}});
    EXPECT_TRUE(out.ok()) << out.status();
    return (*out)[0];
  }

  fs::path dir_;
  Tensor input_;
};

// --no-optimize runs the graph as a plain Session does, so the outputs are bit-identical. By
// default `run` applies the inference passes, whose fused oneDNN calls may round differently
// (which ones depends on the CPU's ISA): close, not identical.
TEST_F(RunCliTest, WritesOutputsByNameMatchingTheSession) {
  for (const char* flags : {" --no-optimize", ""}) {
    SCOPED_TRACE(flags);
    std::string out = (dir_ / "out.npz").string();
    Result r = RunCli("run " + kModel + " --inputs=" + (dir_ / "in.npz").string() + " --out=" + out + flags);
    ASSERT_EQ(r.code, 0) << r.output;
    auto got = ReadNpz(out);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 1u);
    ASSERT_TRUE(got->contains("logits"));
    const Tensor& y = got->at("logits");
    const Tensor ref = Reference();
    if (*flags != '\0') {
      EXPECT_TRUE(y.Identical(ref));
      continue;
    }
    ASSERT_EQ(y.dims(), ref.dims());
    double max_ref = 0, max_err = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      max_ref = std::max(max_ref, std::fabs(ref.GetDouble(i)));
      max_err = std::max(max_err, std::fabs(y.GetDouble(i) - ref.GetDouble(i)));
    }
    EXPECT_LT(max_err, 1e-5 * max_ref);
  }
}

TEST_F(RunCliTest, Bf16StaysCloseToFp32AndWritesFp32) {
  std::string out = (dir_ / "out_bf16.npz").string();
  Result r = RunCli("run " + kModel + " --inputs=" + (dir_ / "in.npz").string() + " --out=" + out + " --dtype=bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  auto got = ReadNpz(out);
  ASSERT_TRUE(got.ok()) << got.status();
  const Tensor& y = got->at("logits");
  Tensor ref = Reference();
  ASSERT_EQ(y.dtype(), DType::kF32);
  ASSERT_EQ(y.dims(), ref.dims());
  double max_ref = 0, max_err = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    max_ref = std::max(max_ref, std::fabs(ref.GetDouble(i)));
    max_err = std::max(max_err, std::fabs(y.GetDouble(i) - ref.GetDouble(i)));
  }
  EXPECT_GT(max_err, 0);                // it did run in bf16
  EXPECT_LT(max_err, 0.05 * max_ref);   // three layers of 8-bit mantissas
}

TEST_F(RunCliTest, ErrorsNameTheProblem) {
  std::string in = (dir_ / "in.npz").string(), out = (dir_ / "o.npz").string();
  Result r = RunCli("run " + kModel + " --inputs=" + (dir_ / "missing.npz").string() + " --out=" + out);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("missing.npz"), std::string::npos) << r.output;
  ASSERT_TRUE(WriteNpz((dir_ / "wrong.npz").string(), {{"inputz", input_}}).ok());
  r = RunCli("run " + kModel + " --inputs=" + (dir_ / "wrong.npz").string() + " --out=" + out);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("inputz"), std::string::npos) << r.output;
  r = RunCli("run " + kModel + " --inputs=" + in + " --out=" + out + " --dtype=int8");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--dtype"), std::string::npos) << r.output;
  r = RunCli("run " + kModel + " --inputs=" + in);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

// transformers' GPT-2 exported with dynamo=True, optimize=False splits its qkv projection with
// SplitToSequence + SequenceAt, which no kernel runs: canonicalization, which every graph goes
// through, makes them a Split, so --no-optimize runs it too, with the optimized run's values.
TEST_F(RunCliTest, NoOptimizeRunsTheDynamoGpt2Export) {
  const std::string zoo = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/";
  auto ref = ReadNpz(zoo + "gpt2_hf.npz");
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE(WriteNpz((dir_ / "ids.npz").string(), {{"input_ids", ref->at("input_ids")}}).ok());
  std::map<std::string, Tensor> outs;
  for (const char* flags : {" --no-optimize", ""}) {
    const std::string out = (dir_ / (std::string("gpt2") + (*flags ? "_plain" : "_opt") + ".npz")).string();
    Result r = RunCli("run " + zoo + "gpt2_hf.onnx --inputs=" + (dir_ / "ids.npz").string() + " --out=" + out + flags);
    ASSERT_EQ(r.code, 0) << flags << ": " << r.output;
    auto got = ReadNpz(out);
    ASSERT_TRUE(got.ok()) << got.status();
    outs.emplace(flags, got->at("logits"));
  }
  const Tensor &plain = outs.at(" --no-optimize"), &opt = outs.at("");
  ASSERT_EQ(plain.dims(), std::vector<int64_t>({4, 8, 64}));
  ASSERT_EQ(plain.dims(), opt.dims());
  double max_ref = 0, max_err = 0;
  for (int64_t i = 0; i < plain.numel(); ++i) {
    max_ref = std::max(max_ref, std::fabs(opt.GetDouble(i)));
    max_err = std::max(max_err, std::fabs(plain.GetDouble(i) - opt.GetDouble(i)));
  }
  EXPECT_LT(max_err, 1e-5 * max_ref);
}

TEST_F(RunCliTest, BenchPrintsTimesMemoryAndProfile) {
  Result r = RunCli("bench " + kModel + " --batch-size=3 --warmup=1 --iters=3 --profile");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("batch 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("forward: median"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("planned peak memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Gemm"), std::string::npos) << r.output;  // the profile's rows
  r = RunCli("bench " + kModel + " --batch-size=0");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--batch-size"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mixtrain
