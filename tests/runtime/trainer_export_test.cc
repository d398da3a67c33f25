// Trainer::ExportInferenceModel: the exported model is valid ONNX (checker + strict shape
// inference) in fp32, fp16 and bf16 — ops with no low-precision form at the model's opset (Conv
// has no bfloat16 before opset 22) stay fp32 — and it is the trained model in inference form:
// its logits give the loss Trainer::Evaluate reports, BatchNorm using the trained running
// statistics; low-precision exports stay close to the fp32 one.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/half.h"
#include "onnx/onnx_pb.h"
#include "runtime/session.h"
#include "tests/runtime/train_test_util.h"

namespace mixtrain {
namespace {

using traintest::Fp32Config;
using traintest::LoadNpz;
using traintest::MakeTrainer;

absl::Status CheckFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  onnx::ModelProto m;
  if (!m.ParseFromString(ss.str())) return absl::InvalidArgumentError("not a ModelProto");
  return CheckOnnxModel(m);
}

Tensor RunExport(const std::string& path, const Tensor& x, DType input_dtype) {
  auto g = ImportOnnxFile(path);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return Tensor();
  std::string input = (*g)->inputs()[0]->name;
  auto s = Session::Create(std::shared_ptr<const Graph>(std::move(*g)));
  EXPECT_TRUE(s.ok()) << s.status();
  Tensor feed = x;
  if (input_dtype != DType::kF32) {
    feed = Tensor(input_dtype, x.dims());
    for (int64_t i = 0; i < x.numel(); ++i) {
      float v = x.data_as<float>()[i];
      feed.data_as<uint16_t>()[i] = input_dtype == DType::kF16 ? FloatToHalf(v) : FloatToBFloat16(v);
    }
  }
  auto out = (*s)->Run({{input, feed}});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : Tensor();
}

double MeanCrossEntropy(const Tensor& logits, const Tensor& labels) {
  int64_t n = logits.dims()[0], k = logits.dims()[1];
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, z = 0;
    for (int64_t j = 0; j < k; ++j) mx = std::max(mx, logits.GetDouble(i * k + j));
    for (int64_t j = 0; j < k; ++j) z += std::exp(logits.GetDouble(i * k + j) - mx);
    sum += std::log(z) + mx - logits.GetDouble(i * k + labels.GetInt(i));
  }
  return sum / n;
}

TEST(TrainerExport, BatchNormModelIsTheTrainedModelInInferenceForm) {
  std::unique_ptr<Trainer> t = MakeTrainer("mlp_bn.onnx", Fp32Config());
  ASSERT_NE(t, nullptr);
  auto batch = LoadNpz("batch.npz");
  Tensor stats_before = *t->GetParameter("bn.running_mean");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->Step(batch).ok());
  EXPECT_FALSE(stats_before.Identical(*t->GetParameter("bn.running_mean")));
  auto eval = t->Evaluate(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  const std::string dir = testing::TempDir();
  Tensor ref;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(d));
    const std::string path = dir + "/mlp_bn_export.onnx";
    ASSERT_TRUE(t->ExportInferenceModel(path, d).ok());
    ASSERT_TRUE(CheckFile(path).ok()) << CheckFile(path);
    auto g = ImportOnnxFile(path);
    ASSERT_TRUE(g.ok());
    Tensor logits = RunExport(path, batch.at("x"), (*g)->inputs()[0]->dtype);
    ASSERT_EQ(logits.dims(), (std::vector<int64_t>{16, 4}));
    double loss = MeanCrossEntropy(logits, batch.at("labels"));
    if (d == DType::kF32) {
      ref = logits;
      EXPECT_NEAR(loss, eval->loss_sum / eval->examples, 1e-5);
    } else {
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < ref.numel(); ++i) {
        worst = std::max(worst, std::fabs(logits.GetDouble(i) - ref.GetDouble(i)));
        scale = std::max(scale, std::fabs(ref.GetDouble(i)));
      }
      EXPECT_LT(worst, (d == DType::kBF16 ? 3e-2 : 5e-3) * scale);
    }
    std::filesystem::remove(path);
  }
}

TEST(TrainerExport, ConvModelExportsValidOnnxInEveryDtype) {
  pb::TrainConfig c = Fp32Config();
  auto t = Trainer::Create(std::string(MT_SOURCE_DIR) + "/models/fashion_cnn.onnx", c);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string path = testing::TempDir() + "/cnn_export.onnx";
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(d));
    ASSERT_TRUE((*t)->ExportInferenceModel(path, d).ok());
    absl::Status s = CheckFile(path);
    EXPECT_TRUE(s.ok()) << s;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mixtrain
