// `mixtrain grad` end to end on the MLP fixture: a batch's gradients are written; an empty .npz,
// NaN inputs (unless --allow-nonfinite-inputs) and a bad --out fail before any computation with
// one "mixtrain grad:" line and leave no output file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "runtime/npy.h"
#include "tests/tools/cli_test_util.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
const std::string kMlp = std::string(MT_SOURCE_DIR) + "/tests/data/optim/mlp.onnx";

class GradCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(cli_test::kBinary)) << cli_test::kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_grad_cli");
    Tensor x(DType::kF32, {8, 8}), y(DType::kI64, {8});
    for (int64_t i = 0; i < 64; ++i) x.data_as<float>()[i] = 0.125f * (i % 5);
    for (int64_t i = 0; i < 8; ++i) y.data_as<int64_t>()[i] = i % 4;
    ASSERT_TRUE(WriteNpz(Path("batch.npz"), {{"x", x}, {"labels", y}}).ok());
    x.data_as<float>()[2 * 8 + 6] = NAN;
    ASSERT_TRUE(WriteNpz(Path("nan.npz"), {{"x", x}, {"labels", y}}).ok());
    ASSERT_TRUE(WriteNpz(Path("empty.npz"), {}).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  cli_test::Result Grad(const std::string& data, const std::string& more = "") {
    return cli_test::RunShell(cli_test::kBinary + " grad " + kMlp + " --data=" + Path(data) + " --out=" +
                                  Path("grads.npz") + more,
                              dir_);
  }
  void ExpectError(const std::string& data, const std::string& more, const std::string& needle) {
    SCOPED_TRACE(data + more);
    cli_test::Result r = Grad(data, more);
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err.rfind("mixtrain grad: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(Path("grads.npz")));
  }
  fs::path dir_;
};

TEST_F(GradCli, WritesTheGradients) {
  cli_test::Result r = Grad("batch.npz");
  ASSERT_EQ(r.code, 0) << r.err;
  auto g = ReadNpz(Path("grads.npz"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->contains("loss"));
  EXPECT_GT(g->size(), 1u);
}

TEST_F(GradCli, BadDataFailsBeforeComputing) {
  ExpectError("empty.npz", "", "empty.npz: holds no arrays");
  ExpectError("nan.npz", "", "nan.npz: array 'x' holds NaN at [2, 6]");
  ExpectError("missing.npz", "", "--data: cannot open '" + Path("missing.npz") + "'");
  ExpectError("batch.npz", " --out=" + Path("no/dir/g.npz"), "--out=" + Path("no/dir/g.npz") + ": folder");
  // Allowed, the NaN reaches the gradients.
  cli_test::Result r = Grad("nan.npz", " --allow-nonfinite-inputs");
  ASSERT_EQ(r.code, 0) << r.err;
  auto g = ReadNpz(Path("grads.npz"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(std::isnan(g->at("loss").GetDouble(0)));
}

}  // namespace
}  // namespace mixtrain
