// Heap allocations per training step once the first step has run (issue 13: "no per-step heap
// allocation after the first step"). Counted by the CLI's malloc wrapper (tools/alloc_counter.cc,
// linked into this test) through Trainer's per-node profile. The data-movement engines must make
// none; a oneDNN-backed Gemm only what one oneDNN execute makes inside itself (its own argument
// map), measured here on a reorder rather than assumed. Sanitizer builds own malloc: skipped there.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/simd_target.h"
#include "mixtrain/profile.h"
#include "runtime/trainer.h"
#include "tools/alloc_counter.h"

namespace mixtrain {
namespace {

// Allocations one oneDNN primitive run makes inside the library, for a bound 8-element reorder
// (two arguments). oneDNN's execute copies its arguments into a hash map, so a primitive with
// more arguments or post-ops makes a few more: the bounds below allow k + 3 per run.
int64_t OneDnnExecuteAllocations() {
  dnnl::memory::desc md({8}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  dnnl_util::BoundReorder r(md, md);
  float a[8] = {}, b[8] = {};
  dnnl_util::Bind(r.from(), a);
  dnnl_util::Bind(r.to(), b);
  r.Execute();  // first run: lazy initialisation
  const uint64_t before = cli::HeapAllocations();
  r.Execute();
  return static_cast<int64_t>(cli::HeapAllocations() - before);
}

// Profiles steps 4-5 of fp32 training on `batch`; per op type: {calls, allocations}.
std::map<std::string, std::pair<int64_t, int64_t>> AllocationsByOp(const std::string& model,
                                                                    const std::map<std::string, Tensor>& batch,
                                                                    int class_axis) {
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::FP32);
  c.set_class_axis(class_axis);
  auto t = Trainer::Create(std::string(MT_SOURCE_DIR) + "/" + model, c);
  EXPECT_TRUE(t.ok()) << t.status();
  std::map<std::string, std::pair<int64_t, int64_t>> by_op;
  if (!t.ok()) return by_op;
  Trainer& tr = **t;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(tr.Step(batch).ok());
  tr.set_profiling(true);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(tr.Step(batch).ok());
  for (const StepNodeTime& n : tr.Profile()) {
    by_op[n.node->op_type()].first += n.calls;
    by_op[n.node->op_type()].second += n.allocations;
  }
  return by_op;
}

Tensor Labels(int64_t n, int64_t t, int64_t classes) {
  Tensor y(DType::kI64, t > 0 ? std::vector<int64_t>{n, t} : std::vector<int64_t>{n});
  std::mt19937 rng(7);
  for (int64_t i = 0; i < y.numel(); ++i) y.data_as<int64_t>()[i] = rng() % classes;
  return y;
}

class StepAllocations : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cli::HeapAllocationsCounted()) GTEST_SKIP() << "the sanitizer owns malloc: nothing is counted";
    SetHeapAllocationCounter(&cli::HeapAllocations);
  }
  void TearDown() override { SetHeapAllocationCounter(nullptr); }
};

// The movement ops of a torch nn.TransformerEncoder's step (its attention's Transposes are not
// all foldable into products) allocate nothing.
TEST_F(StepAllocations, TransformerStepMovesDataWithoutAllocating) {
  Tensor x(DType::kF32, {4, 6, 32});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(i % 11) / 11.0f;
  auto by_op = AllocationsByOp("tests/data/zoo/tfm_encoder.onnx", {{"x", x}, {"labels", Labels(4, 0, 5)}}, 1);
  for (const char* op : {"Transpose", "Expand", "Reshape", "Slice"}) {
    auto it = by_op.find(op);
    if (it == by_op.end()) continue;
    EXPECT_EQ(it->second.second, 0) << op << ": " << it->second.first << " calls";
  }
  ASSERT_TRUE(by_op.count("Transpose")) << "the encoder's attention has Transposes";
}

// gpt_mini's attention Transposes are all read in place by its products (the training step's
// fuse_matmul); its 2-D Gemms allocate only what oneDNN's execute does. (The batched, permuted
// FusedMatMuls are not bounded: below AVX-512 oneDNN runs them with gemm:jit, whose batched
// driver allocates per call inside the library, ~30 per run.)
TEST_F(StepAllocations, GptProductsAllocateOnlyInsideOneDnn) {
  Tensor tokens(DType::kI64, {8, 32});
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data_as<int64_t>()[i] = (i * 37) % 256;
  auto by_op = AllocationsByOp("models/gpt_mini.onnx", {{"tokens", tokens}, {"labels", Labels(8, 32, 256)}}, -1);
  const int64_t k = OneDnnExecuteAllocations();
  EXPECT_EQ(by_op.count("Transpose"), 0u);
  // Backward Gemms are plain 2-D products (transposes are strides): one primitive run each, two
  // where gemm:jit (below AVX-512) gets an operand copied K-contiguous first (dnnl_matmul.cc).
  ASSERT_TRUE(by_op.count("Gemm"));
  auto [calls, allocs] = by_op.at("Gemm");
  ASSERT_GT(calls, 0);
  const int64_t runs = cpu::Avx512Enabled() ? 1 : 2;
  EXPECT_LE(allocs, calls * runs * (k + 3)) << "oneDNN makes " << k << " per reorder run";
  // Our own kernels of the step keep their scratch between calls: bias-gradient reductions,
  // LayerNorm forward and backward, the q/k/v Split and its gradient's Concat allocate nothing.
  for (const char* op : {"ReduceSum", "LayerNormalization", "LayerNormalizationGrad", "Split", "Concat"}) {
    ASSERT_TRUE(by_op.count(op)) << op << " is in gpt_mini's step";
    EXPECT_EQ(by_op.at(op).second, 0) << op << ": " << by_op.at(op).first << " calls";
  }
}

TEST_F(StepAllocations, CnnStepAllocatesOnlyInsideOneDnn) {
  Tensor x(DType::kF32, {8, 1, 28, 28});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(i % 13) / 13.0f;
  auto by_op = AllocationsByOp("models/fashion_cnn.onnx", {{"input", x}, {"labels", Labels(8, 0, 10)}}, 1);
  const int64_t k = OneDnnExecuteAllocations();
  auto [calls, allocs] = by_op.at("Gemm");
  EXPECT_LE(allocs, calls * (k + 3)) << "oneDNN makes " << k << " per reorder run";
  // ConvGrad runs at most 7 primitives (two convolutions, five reorders); it used to build a
  // reorder primitive per operand per call (~120 allocations).
  auto [gcalls, gallocs] = by_op.at("ConvGrad");
  EXPECT_LE(gallocs, gcalls * 7 * (k + 3)) << "oneDNN makes " << k << " per reorder run";
  // The channel-blocked pools (the training layout, on every CPU this runs on) keep their
  // windows and scratch between calls.
  for (const char* op : {"MaxPool", "MaxPoolGrad"}) {
    ASSERT_TRUE(by_op.count(op)) << op << " is in fashion_cnn's step";
    EXPECT_EQ(by_op.at(op).second, 0) << op << ": " << by_op.at(op).first << " calls";
  }
}

}  // namespace
}  // namespace mixtrain
