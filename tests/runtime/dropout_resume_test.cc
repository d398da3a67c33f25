// A model with training-mode Dropout resumes bit-identically: the masks are drawn from (seed,
// session run count), and checkpoints save and restore the count.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "graph/shape_inference.h"
#include "runtime/trainer.h"
#include "tests/runtime/train_test_util.h"

namespace mixtrain {
namespace {

// x[N,8] -> Gemm(8->16) -> Relu -> Dropout(0.5) -> Gemm(16->3) -> logits[N,3].
std::unique_ptr<Graph> DropoutMlp() {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  auto weights = [&](std::vector<int64_t> dims) {
    Tensor t(DType::kF32, dims);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = nd(rng);
    return t;
  };
  Value* x = g->AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), Dim(8)}));
  g->AddInput(x);
  Node* fc1 = g->AddNode("Gemm", {x, g->AddInitializer("w1", weights({16, 8})),
                                   g->AddInitializer("b1", weights({16}))}, 1, "fc1");
  fc1->SetAttr(Attribute::Int("transB", 1));
  Node* relu = g->AddNode("Relu", {fc1->output(0)}, 1, "relu");
  Node* drop = g->AddNode("Dropout", {relu->output(0), g->AddInitializer("ratio", Tensor::Scalar(0.5f))},
                          1, "drop");
  Value* logits = g->AddValue("logits", DType::kF32, Shape({Dim::Symbol("N"), Dim(3)}));
  Node* fc2 = g->AddNode("Gemm", {drop->output(0), g->AddInitializer("w2", weights({3, 16})),
                                  g->AddInitializer("b2", weights({3}))}, {logits}, "fc2");
  fc2->SetAttr(Attribute::Int("transB", 1));
  g->AddOutput(logits);
  EXPECT_TRUE(InferShapes(*g).ok());
  return g;
}

std::map<std::string, Tensor> Batch(int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Tensor x(DType::kF32, {16, 8});
  Tensor y(DType::kI64, {16});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = nd(rng);
  for (int64_t i = 0; i < 16; ++i) y.data_as<int64_t>()[i] = rng() % 3;
  return {{"x", x}, {"labels", y}};
}

std::unique_ptr<Trainer> Make() {
  pb::TrainConfig c = traintest::Fp32Config();
  c.mutable_optimizer()->set_lr(0.05f);
  auto t = Trainer::CreateFromGraph(DropoutMlp(), c);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(DropoutResume, TwoNStepsEqualNPlusResumePlusN) {
  constexpr int kN = 4;
  auto straight = Make();
  ASSERT_NE(straight, nullptr);
  std::vector<float> losses;
  for (int i = 0; i < 2 * kN; ++i) {
    auto r = straight->Step(Batch(i));
    ASSERT_TRUE(r.ok()) << r.status();
    losses.push_back(r->loss);
  }
  const std::string ckpt =
      (std::filesystem::temp_directory_path() / ("mixtrain_dropout_resume." + std::to_string(getpid()) + ".ckpt"))
          .string();
  auto first = Make();
  for (int i = 0; i < kN; ++i) ASSERT_TRUE(first->Step(Batch(i)).ok());
  ASSERT_TRUE(first->SaveCheckpoint(ckpt).ok());
  auto resumed = Make();
  ASSERT_TRUE(resumed->LoadCheckpoint(ckpt).ok());
  for (int i = kN; i < 2 * kN; ++i) {
    auto r = resumed->Step(Batch(i));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->loss, losses[i]) << "step " << i;  // bit-identical, masks included
  }
  auto a = straight->State();
  auto b = resumed->State();
  ASSERT_TRUE(a.ok() && b.ok());
  traintest::ExpectSameState(*a, *b);
  std::filesystem::remove(ckpt);
}

}  // namespace
}  // namespace mixtrain
