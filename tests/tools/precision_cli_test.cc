// The precision debugger on the command line (issue 16): `train --debug-precision` names the node
// behind the skipped steps of a model built to overflow fp16, `suggest-policy` turns the
// statistics into a policy that removes them, `dump --stats` marks the nodes; bad statistics
// files are refused by name, writing nothing.
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_test_util.h"

namespace mixtrain::cli_test {
namespace {

const std::string kModel = std::string(MT_SOURCE_DIR) + "/models/precision/logit_scale_overflow.onnx";
const std::string kMlp = std::string(MT_SOURCE_DIR) + "/models/mlp.onnx";
const std::string kData = " --steps=40 --limit-train=2560 --limit-test=1000 --log-every=1000";

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(PrecisionCliTest, DebuggerNamesTheNodeAndTheSuggestedPolicyRemovesTheSkippedSteps) {
  const auto dir = ScratchDir("precision_cli");
  const auto stats = dir / "stats.json", policy = dir / "policy.textproto";
  Result amp = RunShell(kBinary + " train " + kModel + kData + " --dtype=fp16 --debug-precision=10 --debug-precision-out=" +
                            stats.string(), dir);
  ASSERT_EQ(amp.code, 0) << amp.err;
  EXPECT_NE(amp.err.find("skipped: the first non-finite value is"), std::string::npos) << amp.err;
  EXPECT_NE(amp.err.find("/fc2/Gemm/grad"), std::string::npos) << amp.err;
  EXPECT_NE(amp.out.find("precision: "), std::string::npos) << amp.out;
  EXPECT_EQ(amp.out.find("(0 skipped)"), std::string::npos) << amp.out;
  ASSERT_TRUE(std::filesystem::exists(stats));

  Result s = RunShell(kBinary + " suggest-policy " + stats.string() + " --out=" + policy.string(), dir);
  ASSERT_EQ(s.code, 0) << s.err;
  const std::string text = Slurp(policy);
  EXPECT_NE(text.find("fp32_nodes: \"^/fc2/Gemm$\""), std::string::npos) << text;
  EXPECT_NE(text.find("low_dtype: FP16"), std::string::npos) << text;
  EXPECT_NE(text.find("skipped step"), std::string::npos) << "each line says why:\n" << text;

  Result fixed = RunShell(kBinary + " train " + kModel + kData + " --policy=" + policy.string(), dir);
  ASSERT_EQ(fixed.code, 0) << fixed.err;
  EXPECT_NE(fixed.out.find("(0 skipped)"), std::string::npos) << fixed.out << fixed.err;
  EXPECT_NE(fixed.err.find("precision amp (f16)"), std::string::npos) << fixed.err;

  Result dump = RunShell(kBinary + " dump " + kModel + " --passes=train --dtype=fp16 --stats=" + stats.string(), dir);
  ASSERT_EQ(dump.code, 0) << dump.err;
  EXPECT_NE(dump.out.find("[risk=non-finite: first non-finite value of"), std::string::npos) << dump.out;
  EXPECT_NE(dump.out.find("[risk=near-overflow"), std::string::npos) << dump.out;
  Result dot = RunShell(kBinary + " dump " + kModel + " --passes=train --dtype=fp16 --format=dot --stats=" + stats.string(), dir);
  ASSERT_EQ(dot.code, 0) << dot.err;
  EXPECT_NE(dot.out.find("cluster_risk"), std::string::npos);
  EXPECT_NE(dot.out.find("fillcolor=\"#d62728\", label=\"/fc2/Gemm/grad"), std::string::npos) << dot.out;
  std::filesystem::remove_all(dir);
}

TEST(PrecisionCliTest, BadStatisticsFilesAreRefusedByNameAndNothingIsWritten) {
  const auto dir = ScratchDir("precision_cli");
  const auto out = dir / "policy.textproto";
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  struct Case {
    std::string file, error;
  };
  for (const Case& c : {Case{write("garbage.json", "{\"format\": \"mixtrain-precision-stats\", \"vers"), "not JSON"},
                        Case{write("other.json", "{\"format\": \"something\"}"), "not a precision statistics file"},
                        Case{write("v9.json", "{\"format\": \"mixtrain-precision-stats\", \"version\": 9}"), "version 9"},
                        Case{write("fields.json", "{\"format\": \"mixtrain-precision-stats\", \"version\": 1, "
                                                  "\"model\": \"m\", \"low_dtype\": \"fp16\", \"steps\": 1, "
                                                  "\"skipped_steps\": 0, \"values\": [{\"value\": 3}], \"skipped\": []}"),
                             "values[0]"},
                        Case{(dir / "missing.json").string(), "missing.json"}}) {
    Result r = RunShell(kBinary + " suggest-policy " + c.file + " --out=" + out.string(), dir);
    EXPECT_EQ(r.code, 1) << c.file;
    EXPECT_NE(r.err.find(c.error), std::string::npos) << c.file << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.file;
  }
  Result neg = RunShell(kBinary + " train " + kMlp + " --debug-precision=-1", dir);
  EXPECT_EQ(neg.code, 2);
  EXPECT_NE(neg.err.find("--debug-precision=-1"), std::string::npos) << neg.err;
  std::filesystem::remove_all(dir);
}

TEST(PrecisionCliTest, DumpRefusesStatisticsOfAnotherModel) {
  const auto dir = ScratchDir("precision_cli");
  const auto stats = dir / "mlp.json", out = dir / "graph.txt";
  Result t = RunShell(kBinary + " train " + kMlp + " --steps=3 --limit-train=256 --limit-test=100 --dtype=bf16 "
                          "--debug-precision-out=" + stats.string(), dir);
  ASSERT_EQ(t.code, 0) << t.err;
  // A healthy run marks nothing: make one value non-finite so the file names a node.
  std::string text = Slurp(stats);
  const std::string ok = "\"inf\": 0";
  ASSERT_NE(text.rfind(ok), std::string::npos);
  text.replace(text.rfind(ok), ok.size(), "\"inf\": 3");  // the last value: a backward node's
  std::ofstream(stats) << text;
  Result d = RunShell(kBinary + " dump " + kModel + " --passes=train --dtype=fp16 --stats=" + stats.string() +
                          " --out=" + out.string(), dir);
  EXPECT_EQ(d.code, 1);
  EXPECT_NE(d.err.find("is in this graph"), std::string::npos) << d.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(dir);
}

// A policy that moves every matrix product to fp32 turns AMP off: suggest-policy says so, in the
// policy and on stderr, rather than leaving `train` to report "precision amp" over an fp32 step.
TEST(PrecisionCliTest, SuggestedPolicyThatPinsEveryMatrixProductSaysAmpIsOff) {
  const auto dir = ScratchDir("precision_cli");
  const auto stats = dir / "stats.json", all = dir / "all.json";
  Result r = RunShell(kBinary + " train " + kMlp + " --steps=2 --limit-train=128 --limit-test=64 --dtype=fp16 "
                      "--debug-precision-out=" + stats.string(), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  Result some = RunShell(kBinary + " suggest-policy " + stats.string(), dir);
  ASSERT_EQ(some.code, 0) << some.err;
  EXPECT_EQ(some.out.find("AMP is then off"), std::string::npos) << some.out;
  // Every Gemm's output near fp16's largest value: all three move to fp32.
  nlohmann::json j = nlohmann::json::parse(Slurp(stats));
  int gemms = 0;
  for (nlohmann::json& v : j.at("values"))
    if (v.at("op_type") == "Gemm" && v.at("phase") == "forward" && v.at("dtype") == "fp16") {
      v["max_abs"] = 60000.0;
      ++gemms;
    }
  ASSERT_EQ(gemms, 3);
  std::ofstream(all) << j.dump();
  Result off = RunShell(kBinary + " suggest-policy " + all.string(), dir);
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_NE(off.out.find("deny: \"Gemm\""), std::string::npos) << off.out;
  EXPECT_NE(off.out.find("AMP is then off"), std::string::npos) << off.out;
  EXPECT_NE(off.err.find("AMP is"), std::string::npos) << off.err;
}

}  // namespace
}  // namespace mixtrain::cli_test
