// The loss pass's cross_entropy with the classes on another axis than 1 (moved there by a
// Transpose): a language model's N x T x V logits (labels N x T) and a middle axis of a rank-4
// tensor. The reference is the mean over all positions of -log softmax over the class axis.
#include <cmath>

#include <gtest/gtest.h>

#include "graph/verifier.h"
#include "passes/passes.h"
#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using gradcheck::Random;

TEST(LossClassAxis, LastAxisClassesMatchADirectCrossEntropy) {
  constexpr int64_t kN = 2, kT = 3, kV = 5;
  G b(17);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), Dim(kT), Dim(kV)}));
  g.AddInput(x);
  // A parameter on the path so the graph is a model: logits = x * w.
  Value* logits = b.Op1("Mul", {x, b.Param("w", {kV}, 3)});
  g.AddOutput(logits);
  MT_CHECK_OK(InferShapes(g));
  LossOptions o;
  o.class_axis = -1;
  auto ran = MakeLossPass(o)->Run(g);
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_TRUE(Verify(g).ok());
  EXPECT_EQ(g.FindValue("labels")->shape.ToString(), "[N,3]");

  std::vector<float> xv = Random(kN * kT * kV, 11, -3, 3);
  std::vector<int64_t> lv = {4, 0, 2, 1, 3, 3};
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run({{"x", Tensor::FromVector<float>(DType::kF32, {kN, kT, kV}, xv)},
                              {"labels", Tensor::FromVector<int64_t>(DType::kI64, {kN, kT}, lv)}},
                             {"loss"});
  ASSERT_TRUE(out.ok()) << out.status();

  const Tensor& w = *g.FindValue("w")->initializer;
  double want = 0;
  for (int64_t p = 0; p < kN * kT; ++p) {
    double m = -1e30, z = 0;
    std::vector<double> row(kV);
    for (int64_t v = 0; v < kV; ++v) m = std::max(m, row[v] = xv[p * kV + v] * w.GetDouble(v));
    for (double r : row) z += std::exp(r - m);
    want += -(row[lv[p]] - m - std::log(z));
  }
  want /= kN * kT;
  EXPECT_NEAR((*out)[0].GetDouble(0), want, 1e-5 * std::abs(want));
}

// Classes on a middle axis: [N, A, C, D], axis 2.
TEST(LossClassAxis, MiddleAxisClassesMatchADirectCrossEntropy) {
  constexpr int64_t kN = 2, kA = 4, kC = 3, kD = 2;
  G b(17);
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({kN, kA, kC, kD}));
  g.AddInput(x);
  g.AddOutput(b.Op1("Identity", {x}));
  MT_CHECK_OK(InferShapes(g));
  LossOptions o;
  o.class_axis = 2;
  auto ran = MakeLossPass(o)->Run(g);
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_TRUE(Verify(g).ok());
  EXPECT_EQ(g.FindValue("labels")->shape.ToString(), "[2,4,2]");

  std::vector<float> xv = Random(kN * kA * kC * kD, 5, -3, 3);
  std::vector<int64_t> lv(kN * kA * kD);
  for (size_t i = 0; i < lv.size(); ++i) lv[i] = static_cast<int64_t>((i * 7) % kC);
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run({{"x", Tensor::FromVector<float>(DType::kF32, {kN, kA, kC, kD}, xv)},
                              {"labels", Tensor::FromVector<int64_t>(DType::kI64, {kN, kA, kD}, lv)}},
                             {"loss"});
  ASSERT_TRUE(out.ok()) << out.status();
  double want = 0;
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t a = 0; a < kA; ++a)
      for (int64_t d = 0; d < kD; ++d) {
        auto at = [&](int64_t c) { return xv[((n * kA + a) * kC + c) * kD + d]; };
        double m = -1e30, z = 0;
        for (int64_t c = 0; c < kC; ++c) m = std::max<double>(m, at(c));
        for (int64_t c = 0; c < kC; ++c) z += std::exp(at(c) - m);
        want += -(at(lv[(n * kA + a) * kD + d]) - m - std::log(z));
      }
  want /= kN * kA * kD;
  EXPECT_NEAR((*out)[0].GetDouble(0), want, 1e-5 * std::abs(want));
}

TEST(LossClassAxis, BatchAxisOrOutOfRangeIsAnError) {
  for (int axis : {0, 3, -4}) {
    G b(17);
    Graph& g = b.graph();
    Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, 3, 5}));
    g.AddInput(x);
    g.AddOutput(b.Op1("Mul", {x, b.Param("w", {5}, 3)}));
    MT_CHECK_OK(InferShapes(g));
    LossOptions o;
    o.class_axis = axis;
    auto ran = MakeLossPass(o)->Run(g);
    ASSERT_FALSE(ran.ok()) << axis;
    EXPECT_NE(ran.status().message().find("class axis"), absl::string_view::npos) << ran.status();
  }
}

}  // namespace
}  // namespace mixtrain
