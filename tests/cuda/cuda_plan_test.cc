// Which models the CUDA backend can train, decided without a GPU: CheckModel(device "cuda") plans
// each training step and evaluation for CUDA as a session would (fp32, bf16 AMP, fp16 AMP; every
// kernel looked up with its dtypes). The four models and every zoo export (transformers, timm,
// torch.nn, Keras; both torch exporters) must plan completely; a graph whose op has a CUDA kernel
// but not for its dtype must be named, so the check can fail.
// This is what caught the step counter (Cast bool -> i64, Add i64) that no CUDA kernel took.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "graph/onnx_export.h"
#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace mixtrain {
namespace {

struct Model {
  std::string name, path;
  int class_axis = 1;
};

std::vector<Model> Models() {
  const std::string root = MT_SOURCE_DIR;
  std::vector<Model> out;
  for (const char* m : {"mlp", "fashion_cnn", "gpt_mini", "resnet_mini"})
    out.push_back({m, root + "/models/" + m + ".onnx", std::string(m) == "gpt_mini" ? -1 : 1});
  std::ifstream manifest(root + "/tests/data/zoo/manifest.tsv");
  std::string line;
  std::getline(manifest, line);  // the header
  while (std::getline(manifest, line)) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() < 5 || f[3] != "cross_entropy") continue;
    out.push_back({f[0], root + "/tests/data/zoo/" + f[0] + ".onnx", std::stoi(f[4])});
  }
  return out;
}

TEST(CudaPlan, ModelsAndZooExportsPlanCompletely) {
#if MIXTRAIN_HAVE_CUDA
  const std::vector<Model> models = Models();
  ASSERT_GE(models.size(), 21u) << "the zoo manifest went missing";
  for (const Model& m : models) {
    CheckOptions o;
    o.device = "cuda";
    o.class_axis = m.class_axis;
    auto r = CheckModel(m.path, o);
    ASSERT_TRUE(r.ok()) << m.name << ": " << r.status();
    ASSERT_TRUE(r->trains) << m.name;
    ASSERT_TRUE(r->cuda_unknown.empty()) << r->cuda_unknown;
    std::string missing;
    for (const std::string& s : r->cuda_missing_ops) missing += "\n  " + s;
    // Dropout has no CUDA kernel yet: a train-mode export with dropout lacks exactly that one
    // (--device=auto trains it on the CPU, saying why). A CUDA Dropout takes this line off.
    if (!r->dropouts.empty()) {
      EXPECT_EQ(r->cuda_missing_ops, std::vector<std::string>{"Dropout"}) << m.name << " lacks CUDA kernels:" << missing;
      continue;
    }
    EXPECT_TRUE(r->cuda_missing_ops.empty()) << m.name << " lacks CUDA kernels:" << missing;
  }
#else
  GTEST_SKIP() << "this build has no CUDA backend";
#endif
}

// Div on i64 has a CUDA kernel for float dtypes only: the op-level lookup passes, the plan names it.
TEST(CudaPlan, AKernelWithoutTheDtypeIsNamed) {
#if MIXTRAIN_HAVE_CUDA
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({4, 3}));
  Value* n = g.AddValue("n", DType::kI64, Shape::Of({4, 1}));
  g.AddInput(x);
  g.AddInput(n);
  Value* half = g.AddNode("Div", {n, g.AddInitializer("two", Tensor::ScalarI64(2))}, 1, "div")->output(0);
  Node* cast = g.AddNode("Cast", {half}, 1, "cast");
  cast->SetAttr(Attribute::Int("to", ToOnnxType(DType::kF32)));
  Value* w = g.AddInitializer("w", Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 7}));
  Value* h = g.AddNode("MatMul", {x, w}, 1, "mm")->output(0);
  g.AddOutput(g.AddNode("Mul", {h, cast->output(0)}, 1, "scale")->output(0));
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mt_cuda_plan_div_" + std::to_string(::getpid()) + ".onnx")).string();
  ASSERT_TRUE(SaveOnnxFile(g, path).ok());
  CheckOptions o;
  o.device = "cuda";
  o.loss = "mse";
  auto r = CheckModel(path, o);
  std::filesystem::remove(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->trains);
  std::string all;
  for (const std::string& s : r->cuda_missing_ops) all += s + "\n";
  EXPECT_NE(all.find("Div (i64, i64)"), std::string::npos) << all;
  EXPECT_NE(all.find("fp32 step"), std::string::npos) << all;
#else
  GTEST_SKIP() << "this build has no CUDA backend";
#endif
}

}  // namespace
}  // namespace mixtrain
