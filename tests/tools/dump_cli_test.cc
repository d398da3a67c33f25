// `mixtrain dump` end to end: runs the built binary on fixtures, checks the text/dot/onnx output,
// that `dot -Tsvg` renders the DOT, and that every bad flag or file gives one "mixtrain dump:"
// line, a non-zero exit and no output file.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_split.h"
#include "tests/tools/cli_test_util.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kData = std::string(MT_SOURCE_DIR) + "/tests/data/onnxio/";

class DumpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_dump_cli");
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result Run(const std::string& cmdline) { return cli_test::RunShell(cmdline, dir_); }
  Result Dump(const std::string& args) { return Run(kBinary + " dump " + args); }

  // One error line starting "mixtrain dump: " and containing `needle`, non-zero exit.
  void ExpectError(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    Result r = Dump(args);
    EXPECT_NE(r.code, 0);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err.rfind("mixtrain dump: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }

  fs::path dir_;
};

TEST_F(DumpCli, TextListsNodesAndSummary) {
  Result r = Dump(kData + "tiny.onnx");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("conv: Conv(x: f32[N,3,8,8], conv.w: f32[4,3,3,3], conv.b: f32[4]) -> "
                      "(c: f32[N,4,8,8])"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("to_f16: Cast(r: f32[N,4,8,8]) -> (r16: f16[N,4,8,8])"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("[precision=f16]"), std::string::npos);
  EXPECT_NE(r.out.find("summary: 8 nodes"), std::string::npos);
  EXPECT_NE(r.out.find("  Cast: 2\n"), std::string::npos);
  // 4*3*3*3 + 4 + 2*4 = 120 parameters of 4 bytes.
  EXPECT_NE(r.out.find("parameters: 120 (480 bytes) in 3 initializers"), std::string::npos);
  EXPECT_NE(r.out.find("  f32: 120 (480 bytes)"), std::string::npos);
}

TEST_F(DumpCli, DotRendersWithGraphviz) {
  std::string dot = (dir_ / "g.dot").string();
  Result r = Dump(kData + "tiny.onnx --format=dot --out=" + dot + " --passes=import,verify");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  std::ifstream in(dot);
  std::string text(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(text.rfind("digraph", 0), 0u);
  EXPECT_NE(text.find("shape=diamond"), std::string::npos) << "Cast nodes stand out";
  EXPECT_NE(text.find("cluster_legend"), std::string::npos);
  // relu is annotated f16: filled with the fp16 colour, like the Cast to f16.
  EXPECT_NE(text.find("fillcolor=\"#fdae6b\", label=\"relu"), std::string::npos) << text;
  Result svg = Run("dot -Tsvg " + dot);
  ASSERT_EQ(svg.code, 0) << svg.err;
  EXPECT_NE(svg.out.find("<svg"), std::string::npos);
  // Straight from stdout too, with an unknown op in the graph.
  Result pipe = Run(kBinary + " dump " + kData + "unknown_op.onnx --format=dot | dot -Tsvg");
  ASSERT_EQ(pipe.code, 0) << pipe.err;
  EXPECT_NE(pipe.out.find("FancyOp"), std::string::npos);
}

TEST_F(DumpCli, OnnxOutputIsValidAndRoundTrips) {
  std::string out = (dir_ / "out.onnx").string();
  Result r = Dump(kData + "tiny.onnx --format=onnx --out=" + out);
  ASSERT_EQ(r.code, 0) << r.err;
  auto g = ImportOnnxFile(out);
  ASSERT_TRUE(g.ok()) << g.status();
  onnx::ModelProto m = ExportOnnx(**g);
  EXPECT_TRUE(CheckOnnxModel(m).ok());
  std::ifstream in(out, std::ios::binary);
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(bytes, SerializeDeterministic(m));
}

TEST_F(DumpCli, ModelsFolderDumps) {
  fs::path models = fs::path(MT_SOURCE_DIR) / "models";
  ASSERT_TRUE(fs::exists(models)) << "no models/ folder in the checkout";
  for (const auto& e : fs::directory_iterator(models)) {
    if (e.path().extension() != ".onnx") continue;
    Result r = Run(kBinary + " dump " + e.path().string() + " --format=dot | dot -Tsvg");
    EXPECT_EQ(r.code, 0) << e.path() << ": " << r.err;
    EXPECT_NE(r.out.find("<svg"), std::string::npos) << e.path();
  }
}

TEST_F(DumpCli, HelpListsFlags) {
  Result r = Dump("--help");
  ASSERT_EQ(r.code, 0);
  for (const char* flag : {"--passes", "--format", "--out"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << r.out;
}

TEST_F(DumpCli, BadFlagsAndFilesFailCleanly) {
  const std::string tiny = kData + "tiny.onnx";
  ExpectError(tiny + " --format=svg", "--format");
  ExpectError(tiny + " --passes=import,nosuchpass", "nosuchpass");
  ExpectError(tiny + " --frobnicate=1", "--frobnicate");
  ExpectError(tiny + " --format=onnx", "--out");
  ExpectError("", "MODEL.onnx");
  ExpectError(tiny + " " + tiny, "MODEL.onnx");
  ExpectError((dir_ / "missing.onnx").string(), "missing.onnx");
  std::string junk = (dir_ / "junk.onnx").string();
  std::ofstream(junk) << "this is not protobuf at all, not even close";
  ExpectError(junk, "junk.onnx");
  std::string empty = (dir_ / "empty.onnx").string();
  std::ofstream(empty) << "";
  ExpectError(empty, "empty");
  // Unwritable output: error naming it, no file left.
  ExpectError(tiny + " --out=" + (dir_ / "no" / "such" / "dir.txt").string(), "dir.txt");
}

TEST_F(DumpCli, FailureLeavesNoOutputFile) {
  std::string junk = (dir_ / "junk.onnx").string();
  std::ofstream(junk) << "garbage";
  for (const char* fmt : {"text", "dot", "onnx"}) {
    std::string out = (dir_ / (std::string("out.") + fmt)).string();
    Result r = Dump(junk + " --format=" + fmt + " --out=" + out);
    EXPECT_NE(r.code, 0);
    EXPECT_FALSE(fs::exists(out)) << out;
  }
  // Only the junk file is in the folder: no temp files either.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) entries += e.path() != fs::path(junk);
  EXPECT_EQ(entries, 0);
}

}  // namespace
}  // namespace mixtrain
