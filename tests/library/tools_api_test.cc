// The public API the CLI's run / bench / dump / grad commands are built on (issue 7):
// InferenceOptions (low compute type), plan statistics and profile, TensorInfo::dim_names,
// HostTensor::ConvertedTo, TransformModel and ComputeGradients. Only include/mixtrain/ is used.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using namespace mixtrain;

const std::string kMlp = std::string(MT_SOURCE_DIR) + "/models/mlp.onnx";
const std::string kGradDir = std::string(MT_SOURCE_DIR) + "/tests/data/grad/";

HostTensor Ramp(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * i);
  return HostTensor::FromVector<float>(shape, v).value();
}

TEST(ToolsApiTest, InputsNameTheirSymbolicDims) {
  auto s = InferenceSession::Create(kMlp);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<TensorInfo> in = (*s)->Inputs();
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].shape, (std::vector<int64_t>{-1, 784}));
  EXPECT_EQ(in[0].dim_names, (std::vector<std::string>{"N", ""}));
}

TEST(ToolsApiTest, Bf16ComputeStaysCloseToFp32AndReturnsFp32) {
  auto f32 = InferenceSession::Create(kMlp);
  InferenceOptions o;
  o.compute_type = ElementType::kBFloat16;
  auto bf16 = InferenceSession::Create(kMlp, o);
  ASSERT_TRUE(f32.ok() && bf16.ok()) << bf16.status();
  EXPECT_EQ((*bf16)->Inputs()[0].type, ElementType::kBFloat16);  // what Run takes unconverted
  TensorMap feeds{{"input", Ramp({2, 784})}};
  auto a = (*f32)->Run(feeds);
  auto b = (*bf16)->Run(feeds);  // fp32 feeds are converted
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  const HostTensor& ya = a->at("logits");
  const HostTensor& yb = b->at("logits");
  ASSERT_EQ(yb.type(), ElementType::kFloat32);
  ASSERT_EQ(ya.shape(), yb.shape());
  std::vector<float> fa = ya.ToFloats(), fb = yb.ToFloats();
  double max_abs = 0, max_err = 0;
  for (size_t i = 0; i < fa.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(double(fa[i])));
    max_err = std::max(max_err, std::fabs(double(fa[i]) - fb[i]));
  }
  EXPECT_GT(max_err, 0);  // it really computed in bf16
  EXPECT_LT(max_err, 0.05 * max_abs + 1e-3);

  o.float32_outputs = false;
  auto raw = InferenceSession::Create(kMlp, o);
  ASSERT_TRUE(raw.ok());
  auto c = (*raw)->Run(feeds);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->at("logits").type(), ElementType::kBFloat16);

  o.compute_type = ElementType::kInt8;
  auto bad = InferenceSession::Create(kMlp, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("compute_type"), std::string::npos) << bad.status();
}

TEST(ToolsApiTest, PlanStatisticsAndProfile) {
  auto s = InferenceSession::Create(kMlp);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE((*s)->LastPlanStatistics().has_value());
  (*s)->SetProfiling(true);
  TensorMap feeds{{"input", Ramp({3, 784})}};
  ASSERT_TRUE((*s)->Run(feeds).ok());
  ASSERT_TRUE((*s)->Run(feeds).ok());
  std::optional<PlanStatistics> st = (*s)->LastPlanStatistics();
  ASSERT_TRUE(st.has_value());
  EXPECT_GT(st->peak_planned_bytes, 0u);
  EXPECT_GE(st->naive_bytes, st->peak_planned_bytes);
  EXPECT_GT(st->kernels, 0);
  int64_t gemm_calls = -1;
  for (const OpTypeTime& p : (*s)->Profile())
    if (p.op_type == "Gemm") gemm_calls = p.calls;
  EXPECT_GT(gemm_calls, 0);
  EXPECT_EQ(gemm_calls % 2, 0);  // the same kernels in each of the two runs
}

TEST(ToolsApiTest, ConvertedToRoundsBetweenFloatTypes) {
  HostTensor t = HostTensor::FromVector<float>({3}, {1.0f, -2.5f, 1.0f / 3}).value();
  auto h = t.ConvertedTo(ElementType::kFloat16);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->type(), ElementType::kFloat16);
  std::vector<float> back = h->ToFloats();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_NEAR(back[2], 1.0f / 3, 1e-3);
  EXPECT_FALSE(HostTensor::FromVector<int64_t>({1}, {1}).value().ConvertedTo(ElementType::kFloat32).ok());
}

TEST(ToolsApiTest, TransformModelRendersThePassesAndTheirErrors) {
  TransformOptions o;
  o.passes = {"train_mode", "precision", "loss", "autodiff"};
  auto text = TransformModel(kMlp, o);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->graph.find("Gemm"), std::string::npos);
  EXPECT_FALSE(text->precision_report.empty());
  EXPECT_NE(text->graph.find(text->precision_report), std::string::npos);  // text appends it
  EXPECT_NE(text->graph.find("grad/"), std::string::npos);
  auto dot = TransformModel(kMlp, o, GraphFormat::kDot);
  ASSERT_TRUE(dot.ok()) << dot.status();
  EXPECT_EQ(dot->graph.rfind("digraph", 0), 0u) << dot->graph.substr(0, 40);
  EXPECT_EQ(dot->graph.find(dot->precision_report), std::string::npos);
  auto onnx = TransformModel(kMlp, {}, GraphFormat::kOnnx);
  ASSERT_TRUE(onnx.ok()) << onnx.status();
  auto reloaded = InferenceSession::CreateFromBytes(onnx->graph);  // no passes: still the model
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();

  o.passes = {"precision", "nosuchpass"};
  auto bad = TransformModel(kMlp, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("nosuchpass"), std::string::npos) << bad.status();
  o.passes = {"precision"};
  o.precision = "quarter";
  bad = TransformModel(kMlp, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("quarter"), std::string::npos) << bad.status();
}

TEST(ToolsApiTest, ComputeGradientsMatchesThePyTorchFixture) {
  auto batch = ReadNpz(kGradDir + "conv1d_net_batch.npz");
  auto expected = ReadNpz(kGradDir + "conv1d_net_expected.npz");
  ASSERT_TRUE(batch.ok() && expected.ok());
  auto g = ComputeGradients(kGradDir + "conv1d_net.onnx", *batch);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NEAR(g->loss.ToFloats()[0], expected->at("loss").ToFloats()[0], 1e-4);
  EXPECT_EQ(g->gradients.size(), expected->size() - 1);
  for (const auto& [param, grad] : g->gradients) {
    auto it = expected->find("grad/" + param);
    ASSERT_NE(it, expected->end()) << param;
    std::vector<float> a = grad.ToFloats(), e = it->second.ToFloats();
    ASSERT_EQ(a.size(), e.size()) << param;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-4 + 1e-3 * std::fabs(e[i])) << param;
  }

  GradientOptions o;
  o.labels = "targets";
  auto missing = ComputeGradients(kGradDir + "conv1d_net.onnx", *batch, o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("'targets'"), std::string::npos) << missing.status();
}

}  // namespace
