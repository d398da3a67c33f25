// `mixtrain check` end to end: a zoo export trains (exit 0) and the report says what trains,
// what is frozen and the dynamic dims; a model with several blocking nodes lists all of them
// (exit 1); a bad file or flag is one "mixtrain check:" line and exit 2.
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

class CheckCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_check_cli");
  }
  void TearDown() override { fs::remove_all(dir_); }
  Result Check(const std::string& args) { return cli_test::RunShell(kBinary + " check " + args, dir_); }
  fs::path dir_;
};

TEST_F(CheckCli, ZooExportTrains) {
  Result r = Check(kZoo + "tfm_encoder_dyn.onnx");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tfm_encoder_dyn.onnx: trains"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dynamic dims: input 'x': [batch,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trainable: 26 initializers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("canonicalization: "), std::string::npos) << r.out;
}

TEST_F(CheckCli, DynamoExporterConstantsAreFrozenWithTheirReason) {
  Result r = Check(kZoo + "llama_hf.onnx --class-axis=-1 --verbose");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("trainable: 21 initializers"), std::string::npos) << r.out;
  // The rotary tables come from the inv_freq buffer; the transposed q_proj weight trains.
  EXPECT_NE(r.out.find("unsqueeze_14 f32[1,1,8,16]: constant, folded by the exporter from BUFFER"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val_110 f32[32,32] (parameter m.model.layers.0.self_attn.q_proj.weight"),
            std::string::npos) << r.out;
  // --trainable overrides the rule.
  Result all = Check(kZoo + "llama_hf.onnx --class-axis=-1 --trainable=.*");
  EXPECT_EQ(all.code, 0) << all.out << all.err;
  EXPECT_EQ(all.out.find("trainable: 21 initializers"), std::string::npos) << all.out;
}

// Dropout: a train-mode export's dropouts with their ratios (the dynamo exporter's bernoulli mask
// rewritten into Dropout); an eval-mode export has none, and check says how to keep them.
TEST_F(CheckCli, SaysWhichDropoutsTrain) {
  Result ts = Check(kZoo + "dropout_mlp_ts.onnx");
  EXPECT_EQ(ts.code, 0) << ts.out << ts.err;
  EXPECT_NE(ts.out.find("dropout: /drop1/Dropout (ratio 0.3), /drop2/Dropout (ratio 0.3); evaluation and export "
                        "drop nothing"),
            std::string::npos) << ts.out;
  EXPECT_NE(ts.out.find("4 constant nodes folded"), std::string::npos) << ts.out;
  Result mask = Check(kZoo + "mobilenetv3_tv_train.onnx");
  EXPECT_EQ(mask.code, 0) << mask.out << mask.err;
  EXPECT_NE(mask.out.find("(ratio 0.2); evaluation"), std::string::npos) << mask.out;
  EXPECT_EQ(mask.out.find("RandomUniformLike"), std::string::npos) << mask.out;
  Result eval = Check(kZoo + "mobilenetv3_timm.onnx");
  EXPECT_EQ(eval.code, 0) << eval.out << eval.err;
  EXPECT_NE(eval.out.find("dropout: none (an export from eval() mode"), std::string::npos) << eval.out;
}

// x -> MatMul(W1) -> Det and x -> MatMul(W2) -> Mod(fmod=1): two branches, each
// blocked by an op without a gradient rule; both are reported.
TEST_F(CheckCli, ListsEveryBlockingNode) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3}));
  g.AddInput(x);
  std::vector<float> w(9, 0.5f);
  Value* w1 = g.AddInitializer("w1", Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 7}));
  Value* w2 = g.AddInitializer("w2", Tensor::FromVector<float>(DType::kF32, {3, 3}, w));
  Node* a = g.AddNode("MatMul", {x, w1}, 1, "mm1");
  Node* b = g.AddNode("MatMul", {x, w2}, 1, "mm2");
  Node* lp = g.AddNode("Det", {a->output(0)}, 1, "the_det");
  Node* mod = g.AddNode("Mod", {b->output(0), b->output(0)}, 1, "the_mod");
  mod->SetAttr(Attribute::Int("fmod", 1));
  Node* sum = g.AddNode("Add", {lp->output(0), mod->output(0)}, 1, "sum");
  g.AddOutput(sum->output(0));
  const std::string path = (dir_ / "blocked.onnx").string();
  ASSERT_TRUE(SaveOnnxFile(g, path).ok());
  Result r = Check(path + " --loss=mse");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("does NOT train"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blocking (2):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the_det"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the_mod"), std::string::npos) << r.out;
}

// --device=cuda lists the training step's ops without a CUDA kernel (needs no GPU, only the CUDA
// backend built): the MLP and the CNN are covered; a model through Sin and Cos (trainable on the
// CPU, no CUDA kernels) lists both, with their gradients' ops, and exits 1. A build without the
// backend says it cannot tell.
TEST_F(CheckCli, CudaKernelCoverage) {
  const std::string models = std::string(MT_SOURCE_DIR) + "/models/";
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({4, 3}));
  g.AddInput(x);
  Value* w = g.AddInitializer("w", Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 7}));
  Value* h = g.AddNode("MatMul", {x, w}, 1, "mm")->output(0);
  Value* s = g.AddNode("Sin", {h}, 1, "sin")->output(0);
  g.AddOutput(g.AddNode("Cos", {s}, 1, "cos")->output(0));
  const std::string trig = (dir_ / "trig.onnx").string();
  ASSERT_TRUE(SaveOnnxFile(g, trig).ok());
  Result mlp = Check(models + "mlp.onnx --device=cuda");
  Result cnn = Check(models + "fashion_cnn.onnx --device=cuda");
  Result other = Check(trig + " --loss=mse --device=cuda");
#if MIXTRAIN_HAVE_CUDA
  for (const Result* r : {&mlp, &cnn}) {
    EXPECT_EQ(r->code, 0) << r->out << r->err;
    EXPECT_NE(r->out.find("cuda: every op of the training step"), std::string::npos) << r->out;
  }
  EXPECT_EQ(other.code, 1) << other.out << other.err;
  const size_t at = other.out.find("cuda: no CUDA kernel for");
  ASSERT_NE(at, std::string::npos) << other.out;
  const std::string listed = other.out.substr(at);
  for (const char* op : {" Sin", " Cos"}) EXPECT_NE(listed.find(op), std::string::npos) << op << "\n" << listed;
#else
  EXPECT_EQ(mlp.code, 1) << mlp.out << mlp.err;
  EXPECT_NE(mlp.out.find("cuda: cannot tell"), std::string::npos) << mlp.out;
#endif
  Result bad = Check(models + "mlp.onnx --device=tpu");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--device=tpu"), std::string::npos) << bad.err;
}

TEST_F(CheckCli, BadInputExits2) {
  Result missing = Check((dir_ / "nope.onnx").string());
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.err.rfind("mixtrain check: ", 0), 0u) << missing.err;
  EXPECT_NE(missing.err.find("nope.onnx"), std::string::npos) << missing.err;
  const std::string corrupt = (dir_ / "corrupt.onnx").string();
  { std::ofstream(corrupt) << "not a protobuf at all"; }
  EXPECT_EQ(Check(corrupt).code, 2);
  Result flag = Check(kZoo + "keras_mlp.onnx --class-axis=banana");
  EXPECT_EQ(flag.code, 2) << flag.err;
  EXPECT_NE(flag.err.find("class-axis"), std::string::npos) << flag.err;
}

}  // namespace
}  // namespace mixtrain
