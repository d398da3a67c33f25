// Activation recompute (passes/recompute.cc) through the Trainer: on models we export and on
// exports nobody here wrote (transformers, timm, torch.nn through both exporters), fp32 training
// with recompute = all and auto gives bit-identical losses and parameters to recompute = none
// over several Adam steps, copies forward nodes into the backward, and plans less memory.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::HostTensor;
using mixtrain::TensorMap;
using mixtrain::Trainer;

struct Model {
  std::string path;  // under the source tree
  int class_axis;
  int64_t batch;
  int64_t classes;  // labels drawn from [0, classes)
  // The simulated memory finds segments worth recomputing, and the planned peak drops. Where it
  // finds none (a small CNN whose last segment is all there is; an unrolled recurrence, whose
  // steps' copies would live as long as the originals), the step must simply stay the same.
  bool fewer_bytes = true;
};

const std::string kSrc = std::string(MT_SOURCE_DIR) + "/";

// A zoo export's own reference batch; for models/, random inputs of the shapes the step takes
// (symbolic dims = `batch`), labels in [0, classes).
TensorMap Batch(const Trainer& t, const Model& m) {
  if (m.path.rfind("tests/data/zoo/", 0) == 0) {
    auto z = mixtrain::ReadNpz(kSrc + m.path.substr(0, m.path.size() - 5) + ".npz");
    EXPECT_TRUE(z.ok()) << z.status();
    TensorMap b;
    for (const mixtrain::TensorInfo& in : t.BatchInputs()) b.emplace(in.name, z->at(in.name));
    return b;
  }
  std::mt19937 rng(11);
  TensorMap b;
  for (const mixtrain::TensorInfo& in : t.BatchInputs()) {
    std::vector<int64_t> dims = in.shape;
    for (int64_t& d : dims)
      if (d < 0) d = m.batch;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    const bool labels = in.name == "labels";
    if (in.type == mixtrain::ElementType::kInt64) {
      std::vector<int64_t> v(n);
      const int64_t hi = labels ? m.classes : 256;  // gpt_mini's vocabulary
      for (int64_t& x : v) x = std::uniform_int_distribution<int64_t>(0, hi - 1)(rng);
      b.emplace(in.name, *HostTensor::FromVector<int64_t>(dims, v));
    } else {
      std::vector<float> v(n);
      for (float& x : v) x = std::normal_distribution<float>(0, 1)(rng);
      b.emplace(in.name, *HostTensor::FromVector<float>(dims, v));
    }
  }
  return b;
}

std::unique_ptr<Trainer> Make(const Model& m, const std::string& recompute) {
  mixtrain::TrainConfig c;
  c.precision.preset = mixtrain::TrainConfig::Precision::Preset::kFp32;
  c.class_axis = m.class_axis;
  c.recompute = recompute;
  c.device = "cpu";
  auto t = Trainer::Create(kSrc + m.path, c);
  EXPECT_TRUE(t.ok()) << m.path << ": " << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// A language model's step under bf16 AMP (logits N x T x V) with `recompute`.
std::unique_ptr<Trainer> MakeBf16(const std::string& path, const std::string& recompute) {
  mixtrain::TrainConfig c;
  c.precision.low_dtype = mixtrain::TrainConfig::Precision::LowType::kBf16;
  c.class_axis = -1;
  c.recompute = recompute;
  c.device = "cpu";
  auto t = Trainer::Create(kSrc + path, c);
  EXPECT_TRUE(t.ok()) << path << ": " << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

int CountRecomputed(const Trainer& t) {
  auto text = t.TransformedGraph();
  if (!text.ok()) return -1;
  int n = 0;
  for (size_t at = text->find("recompute/"); at != std::string::npos; at = text->find("recompute/", at + 1)) ++n;
  return n;
}

class RecomputeTest : public ::testing::TestWithParam<Model> {};

TEST_P(RecomputeTest, SameStepsLessMemory) {
  const Model& m = GetParam();
  auto none = Make(m, "none");
  ASSERT_NE(none, nullptr);
  const TensorMap batch = Batch(*none, m);
  std::vector<float> want;
  for (int s = 0; s < 3; ++s) {
    auto r = none->Step(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    want.push_back(*r->loss);
  }
  EXPECT_EQ(CountRecomputed(*none), 0);
  const size_t peak_none = none->StepPlanStatistics()->peak_planned_bytes;
  for (const std::string mode : {"all", "auto"}) {
    auto t = Make(m, mode);
    ASSERT_NE(t, nullptr);
    for (int s = 0; s < 3; ++s) {
      auto r = t->Step(batch);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(std::memcmp(&*r->loss, &want[s], sizeof(float)), 0)
          << mode << " step " << s << ": loss " << *r->loss << " vs " << want[s];
    }
    for (const std::string& p : none->ParameterNames()) {
      auto a = none->GetParameter(p);
      auto b = t->GetParameter(p);
      ASSERT_TRUE(a.ok() && b.ok()) << p;
      EXPECT_TRUE(*a == *b) << mode << ": parameter " << p << " differs after 3 steps";
    }
    const size_t peak = t->StepPlanStatistics()->peak_planned_bytes;
    EXPECT_LE(peak, peak_none) << m.path << " " << mode;
    if (m.fewer_bytes) {
      EXPECT_GT(CountRecomputed(*t), 0) << m.path << " " << mode << ": no segment found";
      if (mode == "all") {
        EXPECT_LT(peak, peak_none) << m.path;
      }
    }
    std::printf("%s: planned peak %.2f MiB, recompute=%s %.2f MiB (%d copies)\n", m.path.c_str(),
                peak_none / 1048576.0, mode.c_str(), peak / 1048576.0, CountRecomputed(*t));
  }
}

// A transformer's blocks are recomputed whole: under recompute=all, bf16 AMP, the activations
// kept for the backward fall below 0.8x (each block keeps its input; what one block's backward
// needs is made again right before it; the last block's backward comes right after the forward,
// so a two-block export recomputes its first block only; gpt_mini falls to 0.31x). Before the simulated memory left the optimizer's
// in-place state updates out, every segment looked useless against a peak placed in the
// optimizer; before early backward nodes (1 - tanh^2) were moved behind the forward, the MLP
// halves could not be recomputed.
TEST(Recompute, TransformerBlocksAreRecomputedWhole) {
  for (const char* path : {"models/gpt_mini.onnx", "tests/data/zoo/gpt2_hf.onnx", "tests/data/zoo/llama_hf.onnx"}) {
    size_t kept[2] = {0, 0};
    for (int all = 0; all < 2; ++all) {
      auto t = MakeBf16(path, all ? "all" : "none");
      ASSERT_NE(t, nullptr);
      Model m{path, -1, 16, 2};
      ASSERT_TRUE(t->Step(Batch(*t, m)).ok()) << path;
      auto stats = t->StepMemoryStatistics();
      ASSERT_TRUE(stats.has_value()) << path;
      kept[all] = stats->activations_kept;
    }
    std::printf("%s, bf16: activations kept for the backward %.3f MiB, recompute=all %.3f MiB (%.2fx)\n", path,
                kept[0] / 1048576.0, kept[1] / 1048576.0, static_cast<double>(kept[1]) / static_cast<double>(kept[0]));
    EXPECT_LT(static_cast<double>(kept[1]), 0.8 * static_cast<double>(kept[0])) << path;
  }
}

// Under bf16 AMP each weight's bf16 copy is read by its product in the forward and by the input
// gradient in the backward; recompute casts it again for the backward instead of holding it
// across. The clones are the same Casts of the same weights, so the steps stay bit-identical
// in bf16 too, and the activations kept for the backward fall.
TEST(Recompute, WeightCopiesAreCastAgainForTheBackward) {
  for (const char* path : {"tests/data/zoo/gpt2_hf.onnx", "tests/data/zoo/llama_hf.onnx"}) {
    SCOPED_TRACE(path);
    std::vector<float> losses[2];
    size_t kept[2] = {0, 0};
    std::unique_ptr<Trainer> t[2];
    for (int on = 0; on < 2; ++on) {
      t[on] = MakeBf16(path, on ? "auto" : "none");
      ASSERT_NE(t[on], nullptr);
      const TensorMap batch = Batch(*t[on], Model{path, -1, 0, 0});
      for (int s = 0; s < 3; ++s) {
        auto r = t[on]->Step(batch);
        ASSERT_TRUE(r.ok()) << r.status();
        losses[on].push_back(*r->loss);
      }
      kept[on] = t[on]->StepMemoryStatistics()->activations_kept;
    }
    EXPECT_EQ(std::memcmp(losses[0].data(), losses[1].data(), 3 * sizeof(float)), 0);
    for (const std::string& p : t[0]->ParameterNames())
      EXPECT_TRUE(*t[0]->GetParameter(p) == *t[1]->GetParameter(p)) << p;
    // The recomputed Casts that read a parameter: "recompute/...: Cast(<parameter>: f32[...]".
    auto text = t[1]->TransformedGraph();
    ASSERT_TRUE(text.ok());
    int casts = 0;
    const std::vector<std::string> params = t[1]->ParameterNames();
    for (size_t begin = 0; begin < text->size();) {
      size_t end = text->find('\n', begin);
      if (end == std::string::npos) end = text->size();
      const std::string line = text->substr(begin, end - begin);
      if (line.rfind("recompute/", 0) == 0)
        for (const std::string& p : params)
          if (line.find(": Cast(" + p + ": ") != std::string::npos) ++casts;
      begin = end + 1;
    }
    EXPECT_GT(casts, 0) << "no weight copy recomputed";
    EXPECT_LT(kept[1], kept[0]);
    std::printf("%s, bf16: %d weight casts recomputed; activations kept %.3f -> %.3f MiB\n", path, casts,
                kept[0] / 1048576.0, kept[1] / 1048576.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, RecomputeTest,
    ::testing::Values(Model{"models/gpt_mini.onnx", -1, 4, 256}, Model{"models/fashion_cnn.onnx", 1, 16, 10, false},
                      Model{"models/resnet_mini.onnx", 1, 8, 10},
                      Model{"tests/data/zoo/gpt2_hf.onnx", -1, 0, 0},
                      Model{"tests/data/zoo/bert_hf.onnx", 1, 0, 0}, Model{"tests/data/zoo/llama_hf.onnx", -1, 0, 0, false},
                      Model{"tests/data/zoo/tfm_encoder.onnx", 1, 0, 0},
                      Model{"tests/data/zoo/convnext_timm.onnx", 1, 0, 0},
                      Model{"tests/data/zoo/lstm_ts.onnx", 1, 0, 0, false}),
    [](const ::testing::TestParamInfo<Model>& i) {
      std::string n = i.param.path.substr(i.param.path.rfind('/') + 1);
      n = n.substr(0, n.find('.'));
      return n;
    });

}  // namespace
