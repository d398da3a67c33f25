// `mixtrain check` and `mixtrain train --steps=1` agree: on every zoo export (tests/data/zoo/,
// its own .npz) and every model of models/ (a random batch made here), both succeed with only the
// loss flags, so "trains" means `train` starts and steps; and on a model check refuses, train
// fails too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "runtime/npy.h"
#include "tests/tools/cli_test_util.h"
#include "tests/tools/random_batch.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kSource = MT_SOURCE_DIR;

struct Model {
  std::string path;  // the .onnx
  std::string data;  // its .npz; "" = a random batch made from the model's inputs
  int class_axis = 1;
};

std::vector<Model> AllModels() {
  std::vector<Model> models;
  std::ifstream f(kSource + "/tests/data/zoo/manifest.tsv");
  std::string line;
  std::getline(f, line);  // header: name exporter opset loss class_axis ...
  while (std::getline(f, line)) {
    std::istringstream row(line);
    std::string name, exporter, opset, loss, axis;
    std::getline(row, name, '\t');
    std::getline(row, exporter, '\t');
    std::getline(row, opset, '\t');
    std::getline(row, loss, '\t');
    std::getline(row, axis, '\t');
    const std::string base = kSource + "/tests/data/zoo/" + name;
    if (!name.empty()) models.push_back({base + ".onnx", base + ".npz", std::stoi(axis)});
  }
  // models/README.md: the classifiers' logits are N x 10, gpt_mini's N x 32 x 256.
  for (const auto& [file, axis] : std::vector<std::pair<std::string, int>>{
           {"fashion_cnn", 1}, {"mlp", 1}, {"resnet_mini", 1}, {"gpt_mini", -1}})
    models.push_back({kSource + "/models/" + file + ".onnx", "", axis});
  return models;
}

class CheckTrainAgree : public cli_test::ScratchCliTest<::testing::TestWithParam<Model>> {
 protected:
  CheckTrainAgree() : ScratchCliTest("mt_agree") {}
};

TEST_P(CheckTrainAgree, CheckSaysTrainsAndTrainSteps) {
  const Model& m = GetParam();
  std::string data = m.data;
  if (data.empty()) {
    data = (dir_ / "batch.npz").string();
    absl::Status st = cli_test::WriteRandomBatch(m.path, m.class_axis, data);
    ASSERT_TRUE(st.ok()) << st;
  }
  const std::string axis = " --class-axis=" + std::to_string(m.class_axis);
  Result check = Run("check " + m.path + axis);
  Result train = Run("train " + m.path + " --data=" + data + axis + " --steps=1");
  EXPECT_EQ(check.code == 0, train.code == 0) << "check and train disagree\ncheck:\n"
                                              << check.out << check.err << "\ntrain:\n" << train.out << train.err;
  EXPECT_EQ(check.code, 0) << check.out << check.err;
  EXPECT_EQ(train.code, 0) << train.out << train.err;
  EXPECT_NE(train.out.find("trained 1 steps"), std::string::npos) << train.out;
}

INSTANTIATE_TEST_SUITE_P(Models, CheckTrainAgree, ::testing::ValuesIn(AllModels()), [](const auto& info) {
  std::string name = fs::path(info.param.path).stem().string();
  return (info.param.data.empty() ? "models_" : "zoo_") + name;
});

// A model whose loss no parameter reaches: check refuses it (exit 1) and train fails, both
// saying why.
TEST(CheckTrainAgreeNegative, NoParameterReachesTheLoss) {
  const fs::path dir = cli_test::ScratchDir("mt_agree_neg");
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({4, 3}));
  g.AddInput(x);
  Value* two = g.AddInitializer("two", Tensor::FromVector<int64_t>(DType::kI64, {}, {2}));
  Node* cast = g.AddNode("Cast", {two}, 1, "cast");
  cast->SetAttr(Attribute::Int("to", 1));
  g.AddOutput(g.AddNode("Mul", {x, cast->output(0)}, 1, "scale")->output(0));
  const std::string model = (dir / "noparams.onnx").string();
  ASSERT_TRUE(SaveOnnxFile(g, model).ok());
  std::map<std::string, Tensor> arrays;
  arrays.emplace("x", Tensor(DType::kF32, {4, 3}));
  arrays.emplace("labels", Tensor(DType::kF32, {4, 3}));
  const std::string data = (dir / "data.npz").string();
  ASSERT_TRUE(WriteNpz(data, arrays).ok());
  Result check = cli_test::RunShell(kBinary + " check " + model + " --loss=mse", dir);
  Result train = cli_test::RunShell(kBinary + " train " + model + " --data=" + data + " --loss=mse --steps=1", dir);
  EXPECT_EQ(check.code, 1) << check.out << check.err;
  EXPECT_NE(check.out.find("no trainable parameter reaches 'loss'"), std::string::npos) << check.out;
  EXPECT_NE(train.code, 0) << train.out << train.err;
  EXPECT_NE(train.err.find("no trainable parameter reaches 'loss'"), std::string::npos) << train.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mixtrain
