// `mixtrain check` on what trains (passes/parameters.h): the frozen initializers listed under the
// rule that froze them, a warning for each weight that --freeze keeps from training, and one for
// a one-element value read both as a weight and as something else, naming the flag that decides.
#include <gtest/gtest.h>

#include <filesystem>

#include "graph/graph.h"
#include "graph/onnx_export.h"
#include "tests/tools/cli_test_util.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kZoo = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/";

class CheckTrainability : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_check_trainability");
  }
  void TearDown() override { fs::remove_all(dir_); }
  Result Check(const std::string& args) { return cli_test::RunShell(kBinary + " check " + args, dir_); }
  fs::path dir_;
};

// TorchScript's folded one-element PReLU slope trains by its position; the tf2onnx epsilon does
// not, and is listed under its rule by name. No warning for either.
TEST_F(CheckTrainability, PositionsTrainAndFrozenValuesAreListedUnderTheirRule) {
  Result ts = Check(kZoo + "unet_prelu_ts.onnx --verbose");
  EXPECT_EQ(ts.code, 0) << ts.out << ts.err;
  EXPECT_NE(ts.out.find("onnx::PRelu_40 f32[1,1,1] (read as PRelu slope (node '/act1/PRelu'))"), std::string::npos)
      << ts.out;
  EXPECT_EQ(ts.out.find("warning:"), std::string::npos) << ts.out;
  Result tf = Check(kZoo + "keras_dw_bn.onnx");
  EXPECT_EQ(tf.code, 0) << tf.out << tf.err;
  EXPECT_NE(tf.out.find("1 (4 B): constant: tf2onnx constant in no parameter position: const_fold_opt__"),
            std::string::npos) << tf.out;
  EXPECT_EQ(tf.out.find("warning:"), std::string::npos) << tf.out;
}

// --freeze on a weight: listed as frozen by the flag, and a warning says what it is read as.
TEST_F(CheckTrainability, FreezingAWeightWarns) {
  Result r = Check(kZoo + "unet_prelu_ts.onnx --freeze='onnx::PRelu_40|head\\.bias'");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("(--freeze matches it): head.bias"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: 'onnx::PRelu_40' is read as PRelu slope (node '/act1/PRelu') but does not "
                       "train: --freeze matches it"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: 'head.bias' is read as Gemm C"), std::string::npos) << r.out;
}

// One value, x's PReLU slope and the exponent of a Pow after it: it trains, with a warning that
// names it and the --freeze that keeps it constant; with that flag the warning says it is frozen.
TEST_F(CheckTrainability, AmbiguousScalarWarnsWithTheFlag) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({4, 3}));
  g.AddInput(x);
  Value* s = g.AddInitializer("onnx::PRelu_7", Tensor::FromVector<float>(DType::kF32, {1}, {0.5f}));
  Value* w = g.AddInitializer("fc.weight", Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, -2, 3, 4, -5, 6}));
  Node* act = g.AddNode("PRelu", {x, s}, 1, "act");
  Node* pow = g.AddNode("Pow", {act->output(0), s}, 1, "pow");
  Node* fc = g.AddNode("MatMul", {pow->output(0), w}, 1, "fc");
  g.AddOutput(fc->output(0));
  const std::string path = (dir_ / "ambiguous.onnx").string();
  ASSERT_TRUE(SaveOnnxFile(g, path).ok());
  Result r = Check(path + " --loss=mse");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("trainable: 2 initializers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: 'onnx::PRelu_7' is one value read as PRelu slope (node 'act') and as Pow input 1 "
                       "(node 'pow'): it trains; --freeze='onnx::PRelu_7' keeps it constant"),
            std::string::npos) << r.out;
  Result frozen = Check(path + " --loss=mse --freeze='onnx::PRelu_7'");
  EXPECT_EQ(frozen.code, 0) << frozen.out << frozen.err;
  EXPECT_NE(frozen.out.find("trainable: 1 initializers"), std::string::npos) << frozen.out;
  EXPECT_EQ(frozen.out.find("it trains;"), std::string::npos) << frozen.out;
  EXPECT_NE(frozen.out.find("warning: 'onnx::PRelu_7' is read as PRelu slope (node 'act') but does not train"),
            std::string::npos) << frozen.out;
}

}  // namespace
}  // namespace mixtrain
