// Gradient parity with PyTorch: for every model in models/ and three more op mixes
// (tests/data/grad/*.onnx), train_mode + loss + autodiff run on the CPU must reproduce PyTorch's
// loss within 1e-5 relative and every parameter gradient within 1e-4 (max abs difference / max
// abs value). Fixtures: tests/data/make_grad_fixtures.py (large gradients are stored as a fixed
// sample of elements plus the whole tensor's max |value|).
#include <cmath>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "kernels/host_evaluator.h"
#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "passes/passes.h"
#include "runtime/npy.h"
#include "runtime/session.h"

namespace mixtrain {
namespace {

struct Case {
  const char* name;
  const char* model;  // relative to the source root
  const char* loss;
};

// Whether a path of nodes leads from `v` to the loss (false for null).
bool ReachesLoss(const Value* v) {
  std::vector<const Value*> stack{v};
  absl::flat_hash_set<const Value*> seen;
  while (!stack.empty()) {
    const Value* x = stack.back();
    stack.pop_back();
    if (x == nullptr || !seen.insert(x).second) continue;
    if (x->name == kLossName) return true;
    for (const Node* c : x->consumers)
      for (const Value* out : c->outputs()) stack.push_back(out);
  }
  return false;
}

void CheckParity(const Case& c) {
  const std::string root = MT_SOURCE_DIR;
  auto model = ImportOnnxFile(absl::StrCat(root, "/", c.model));
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto batch = ReadNpz(absl::StrCat(root, "/tests/data/grad/", c.name, "_batch.npz"));
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  auto expected = ReadNpz(absl::StrCat(root, "/tests/data/grad/", c.name, "_expected.npz"));
  ASSERT_TRUE(expected.ok()) << expected.status().message();

  GradientGraphOptions opt;

  opt.autodiff.evaluator = &EvaluateOnHost;
  opt.loss.kind = c.loss;
  // The fixtures differentiate the graph with respect to every float initializer (exporter
  // constants too): this checks autodiff, not which initializers train by default (zoo_test).
  opt.autodiff.trainable = ".*";
  auto g = BuildGradientGraph(**model, opt);
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::vector<std::string> fetch{kLossName};
  for (const std::string& n : GradientOutputs(**g)) fetch.push_back(n);
  auto session = Session::Create(**g);
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto out = (*session)->Run(*batch, fetch);
  ASSERT_TRUE(out.ok()) << out.status().message();

  const double torch_loss = expected->at("loss").GetDouble(0);
  EXPECT_NEAR((*out)[0].GetDouble(0), torch_loss, 1e-5 * std::abs(torch_loss)) << "loss";

  // Every gradient PyTorch computed is one of ours, and the other way round.
  int compared = 0;
  for (size_t i = 1; i < fetch.size(); ++i) {
    const std::string param = fetch[i].substr(std::string(kGradPrefix).size());
    auto e = expected->find(fetch[i]);
    ASSERT_NE(e, expected->end()) << "PyTorch has no gradient for " << param;
    const Tensor& ours = (*out)[i];
    const Tensor& ref = e->second;
    auto idx = expected->find("idx/" + param);
    double maxabs = 0, maxdiff = 0;
    for (int64_t k = 0; k < ref.numel(); ++k) {
      const int64_t at = idx == expected->end() ? k : idx->second.GetInt(k);
      ASSERT_LT(at, ours.numel()) << param;
      maxdiff = std::max(maxdiff, std::abs(ours.GetDouble(at) - ref.GetDouble(k)));
      maxabs = std::max(maxabs, std::abs(ref.GetDouble(k)));
    }
    if (idx != expected->end()) {
      maxabs = expected->at("maxabs/" + param).GetDouble(0);
      double ours_max = 0;
      for (int64_t k = 0; k < ours.numel(); ++k) ours_max = std::max(ours_max, std::abs(ours.GetDouble(k)));
      EXPECT_NEAR(ours_max, maxabs, 1e-4 * maxabs) << "max |grad| of " << param;
    }
    EXPECT_LE(maxdiff, 1e-4 * std::max(maxabs, 1e-12)) << "grad of " << param << ": max abs diff "
                                                        << maxdiff << ", max abs " << maxabs;
    ++compared;
  }
  // The forward fusions (fuse_gelu, fuse_softmax) swallow the exporter's scalar constants of the
  // patterns they match (GELU's 0.5 and 1/sqrt(2), attention's scale and fill): those no longer
  // reach the loss and have no gradient here. Every other gradient PyTorch computed is one of ours.
  int torch_grads = 0;
  for (const auto& [k, v] : *expected) {
    if (k.rfind(kGradPrefix, 0) != 0) continue;
    const Value* in_graph = (*g)->FindValue(k.substr(std::string(kGradPrefix).size()));
    if (v.numel() == 1 && !ReachesLoss(in_graph)) continue;
    ++torch_grads;
  }
  EXPECT_EQ(compared, torch_grads);
}

class TorchParity : public ::testing::TestWithParam<Case> {};

TEST_P(TorchParity, LossAndGradientsMatchPyTorch) { CheckParity(GetParam()); }

// What `mixtrain dump --passes=train_mode,loss,autodiff` writes passes onnx::checker (full check,
// ai.mixtrain schemas included), so the train graph opens in Netron and other ONNX tools.
TEST_P(TorchParity, GradientGraphPassesOnnxChecker) {
  auto model = ImportOnnxFile(absl::StrCat(MT_SOURCE_DIR, "/", GetParam().model));
  ASSERT_TRUE(model.ok()) << model.status().message();
  GradientGraphOptions opt;
  opt.autodiff.evaluator = &EvaluateOnHost;
  opt.loss.kind = GetParam().loss;
  auto g = BuildGradientGraph(**model, opt);
  ASSERT_TRUE(g.ok()) << g.status().message();
  absl::Status st = CheckOnnxModel(ExportOnnx(**g));
  // Debian's checker (ONNX 1.12) refuses the IR version of models from current exporters
  // (opset 18, IR 10) whatever they contain; for those the train graph must fail exactly as the
  // forward model does, i.e. the passes add nothing the checker objects to.
  absl::Status forward = CheckOnnxModel(ExportOnnx(**model));
  if (forward.ok()) {
    EXPECT_TRUE(st.ok()) << st.message();
  } else {
    EXPECT_EQ(st.message(), forward.message());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, TorchParity,
    ::testing::Values(Case{"fashion_cnn", "models/fashion_cnn.onnx", "cross_entropy"},
                      Case{"mlp", "models/mlp.onnx", "cross_entropy"},
                      Case{"resnet_mini", "models/resnet_mini.onnx", "cross_entropy"},
                      Case{"gpt_mini", "models/gpt_mini.onnx", "cross_entropy"},
                      Case{"conv1d_net", "tests/data/grad/conv1d_net.onnx", "cross_entropy"},
                      Case{"conv_autoencoder", "tests/data/grad/conv_autoencoder.onnx", "mse"},
                      Case{"ln_gelu_mlp", "tests/data/grad/ln_gelu_mlp.onnx", "bce_with_logits"}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace mixtrain
