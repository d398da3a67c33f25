// The conv_layout_train pass: a training step's conv region (forward convs and pools, their
// gradients) rewritten channel-blocked. The rewritten step must compute the same gradients (the
// same primitives and pooling rule, in another layout), keep the parameters' layout, and convert
// only at the region's edges; an op that cannot run blocked stays as it is with the ops that
// depend on it, and with no blocked kernels the graph stays as it is. The traits are forced here,
// so every outcome is checked on every CPU (the blocked kernels exist everywhere; AVX-512 and
// AVX2 only make them fast).
#include <cmath>

#include <gtest/gtest.h>

#include "kernels/cpu/passes/cpu_passes.h"
#include "absl/strings/str_cat.h"

#include "graph/verifier.h"
#include "passes/inference.h"
#include "passes/passes.h"
#include "passes/training.h"
#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::CountOps;
using gradcheck::G;
using A = Attribute;

struct Net {
  int64_t image_channels = 3;
  int64_t c1 = 16, c2 = 32;
  bool overlapping_second_pool = false;
  // The second conv adds its input (c2 == c1), a gradient summed from the conv's dX and the skip
  // path; its pooled input is also a graph output, read back in ONNX's layout.
  bool residual = false;
  // No pools, and a Sigmoid after each conv's Relu: no conv feeds another region op.
  bool lone_convs = false;
};

const std::vector<std::string> kParams = {"w1", "b1", "w2", "b2"};

// image -> Conv(c1) -> Relu -> MaxPool 2x2/2 -> Conv(c2) -> Relu -> MaxPool -> weighted-sum
// loss, differentiated and put through the training step's backward fusions, as the pipeline does.
void Build(G& b, const Net& net) {
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({2, net.image_channels, 12, 12}));
  g.AddInput(x);
  const std::vector<A> conv = {A::Ints("pads", {1, 1, 1, 1})};
  Value* h = b.Op1("Relu", {b.Op1("Conv", {x, b.Param("w1", {net.c1, net.image_channels, 3, 3}, 1),
                                           b.Param("b1", {net.c1}, 2)}, conv)});
  h = net.lone_convs ? b.Op1("Sigmoid", {h})
                     : b.Op1("MaxPool", {h}, {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})});
  Value* c2 = b.Op1("Conv", {h, b.Param("w2", {net.c2, net.c1, 3, 3}, 3), b.Param("b2", {net.c2}, 4)}, conv);
  if (net.residual) {
    g.AddOutput(h);
    c2 = b.Op1("Add", {c2, h});
  }
  h = b.Op1("Relu", {c2});
  if (net.lone_convs) {
    h = b.Op1("Sigmoid", {h});
  } else {
    h = b.Op1("MaxPool", {h},
              net.overlapping_second_pool
                  ? std::vector<A>{A::Ints("kernel_shape", {3, 3}), A::Ints("strides", {2, 2}), A::Ints("pads", {1, 1, 1, 1})}
                  : std::vector<A>{A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})});
  }
  gradcheck::AppendWeightedSumLoss(b, {h});
  AutodiffOptions opt;
  opt.freeze = "c_.*";
  auto st = MakeAutodiffPass(opt)->Run(g);
  ASSERT_TRUE(st.ok()) << st.status().message();
  for (auto make : {MakeFuseConvEpiloguePass, MakeFuseBackwardPass}) {
    auto changed = make()->Run(g);
    ASSERT_TRUE(changed.ok()) << changed.status().message();
  }
}

Tensor Image(int64_t channels) {
  Tensor x(DType::kF32, {2, channels, 12, 12});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>((i * 37) % 11) / 5.0f - 1.0f;
  return x;
}

std::vector<Tensor> Grads(const Graph& g, const Tensor& x) {
  auto s = Session::Create(g);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return {};
  std::vector<std::string> names;
  for (const std::string& p : kParams) names.push_back("grad/" + p);
  auto r = (*s)->Run({{"x", x}}, names);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<Tensor>{};
}

// The blocked step's results against the unblocked one's: the same primitives and pooling
// rule in another layout, so equal up to the order of oneDNN's sums.
void ExpectSame(const std::vector<Tensor>& after, const std::vector<Tensor>& before,
                const std::vector<std::string>& names) {
  ASSERT_EQ(after.size(), before.size());
  for (size_t k = 0; k < before.size(); ++k) {
    ASSERT_EQ(after[k].dims(), before[k].dims()) << names[k];
    for (int64_t i = 0; i < before[k].numel(); ++i)
      ASSERT_NEAR(after[k].data_as<float>()[i], before[k].data_as<float>()[i],
                  1e-5 * (1 + std::fabs(before[k].data_as<float>()[i])))
          << names[k] << "[" << i << "]";
  }
}

absl::StatusOr<bool> RunPass(Graph& g, int64_t block) {
  // The training step's channel block: 16 (AVX-512), 8 (AVX2) or 0 (none).
  return MakeConvLayoutTrainingPass(block)->Run(g);
}

TEST(ConvLayoutTrainPass, RegionRunsBlockedWithTheSameGradients) {
  for (int64_t block : {16, 8})
  for (bool overlapping : {false, true}) {
    SCOPED_TRACE(absl::StrCat(overlapping ? "3x3/2 padded second pool" : "2x2/2 pools", ", block ", block));
    G b;
    ASSERT_NO_FATAL_FAILURE(Build(b, {.overlapping_second_pool = overlapping}));
    Graph& g = b.graph();
    const Tensor x = Image(3);
    const std::vector<Tensor> before = Grads(g, x);
    ASSERT_EQ(before.size(), kParams.size());
    auto changed = RunPass(g, block);
    ASSERT_TRUE(changed.ok()) << changed.status().message();
    ASSERT_TRUE(*changed);
    ASSERT_TRUE(Verify(g).ok()) << Verify(g).message();
    ASSERT_TRUE(InferShapes(g).ok());
    // Every op of the region is blocked; the first conv (and its ConvGrad) reads the image as is.
    int region = 0;
    for (const auto& n : g.nodes()) {
      const std::string& op = n->op_type();
      if (op != "FusedConv" && op != "MaxPool" && op != "MaxPoolGrad" && op != "ConvGrad") continue;
      ++region;
      EXPECT_EQ(n->domain(), "ai.mixtrain") << n->name();
      EXPECT_EQ(n->attr_int("channel_block", 0), block) << n->name();
      if (op == "FusedConv" || op == "ConvGrad")
        EXPECT_EQ(n->attr_int("input_channel_block", -1), n->input(op == "ConvGrad" ? 1 : 0)->name == "x" ? 0 : block)
            << n->name();
    }
    EXPECT_EQ(region, 8);
    // Conversions only at the edges: the last pool's output out, the loss gradient in.
    EXPECT_EQ(CountOps(g, "Transpose"), 2);
    // The parameters' gradients keep ONNX's layout and values.
    ASSERT_NO_FATAL_FAILURE(ExpectSame(Grads(g, x), before, kParams));
    auto again = RunPass(g, block);
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(*again) << "a blocked region is left as it is";
  }
}

// A residual conv whose input is also a graph output: fuse_conv_epilogue folds the Add into the
// conv (FusedConv's Z, the skip path, read blocked); the skip path's gradient sum runs outside the
// region on converted values, the graph output keeps ONNX's layout and values, and the gradients
// stay the same.
TEST(ConvLayoutTrainPass, ResidualConvAndAGraphOutputOfTheRegion) {
  for (int64_t block : {16, 8}) {
    SCOPED_TRACE(absl::StrCat("block ", block));
    G b;
    ASSERT_NO_FATAL_FAILURE(Build(b, {.c1 = 16, .c2 = 16, .residual = true}));
    Graph& g = b.graph();
    const Tensor x = Image(3);
    std::string pooled;  // the first pool's output, a graph output of the region
    for (const Value* v : g.outputs())
      if (v->shape.rank_known && v->shape.rank() == 4) pooled = v->name;
    ASSERT_FALSE(pooled.empty());
    auto run = [&](std::vector<std::string> names) {
      auto sess = Session::Create(g);
      EXPECT_TRUE(sess.ok()) << sess.status().message();
      auto r = (*sess)->Run({{"x", x}}, names);
      EXPECT_TRUE(r.ok()) << r.status().message();
      return r.ok() ? *r : std::vector<Tensor>{};
    };
    std::vector<std::string> names = {pooled};
    for (const std::string& p : kParams) names.push_back("grad/" + p);
    const std::vector<Tensor> before = run(names);
    ASSERT_EQ(before.size(), names.size());
    auto changed = RunPass(g, block);
    ASSERT_TRUE(changed.ok()) << changed.status().message();
    ASSERT_TRUE(*changed);
    ASSERT_TRUE(Verify(g).ok()) << Verify(g).message();
    ASSERT_TRUE(InferShapes(g).ok());
    // Both convs run blocked, the second reading its Z (the skip path) blocked too.
    int blocked_convs = 0, with_z = 0;
    for (const auto& n : g.nodes())
      if (n->op_type() == "FusedConv" || n->op_type() == "Conv") {
        blocked_convs += n->attr_int("channel_block", 0) == block;
        with_z += n->num_inputs() > 3 && n->input(3) != nullptr && n->input(3)->shape.rank() == 5;
      }
    EXPECT_EQ(blocked_convs, 2);
    EXPECT_EQ(with_z, 1);
    const Value* out = g.FindValue(pooled);
    ASSERT_NE(out, nullptr);
    EXPECT_TRUE(g.IsGraphOutput(out));
    EXPECT_EQ(out->shape.rank(), 4) << "the graph output keeps ONNX's layout";
    ASSERT_NO_FATAL_FAILURE(ExpectSame(run(names), before, names));
  }
}

// A conv whose output channels do not fill blocks stays in ONNX's layout with its pool and their
// gradients; the ops before it still run blocked, converted where the two meet, and the
// gradients stay the same.
TEST(ConvLayoutTrainPass, PartialRegionAroundAConvThatCannotBlock) {
  for (auto [block, c2] : {std::pair<int64_t, int64_t>{16, 24}, {8, 12}}) {
    SCOPED_TRACE(absl::StrCat("block ", block, ", second conv ", c2, " channels"));
    G b;
    ASSERT_NO_FATAL_FAILURE(Build(b, {.c2 = c2}));
    Graph& g = b.graph();
    const Tensor x = Image(3);
    const std::vector<Tensor> before = Grads(g, x);
    auto changed = RunPass(g, block);
    ASSERT_TRUE(changed.ok()) << changed.status().message();
    ASSERT_TRUE(*changed);
    ASSERT_TRUE(Verify(g).ok()) << Verify(g).message();
    ASSERT_TRUE(InferShapes(g).ok());
    // The ops of the first conv (16 channels) are blocked, those of the second are not.
    int blocked = 0, plain = 0;
    for (const auto& n : g.nodes()) {
      const std::string& op = n->op_type();
      if (op != "FusedConv" && op != "MaxPool" && op != "MaxPoolGrad" && op != "ConvGrad") continue;
      const int64_t channels = op == "ConvGrad" || op == "MaxPoolGrad"
                                   ? Shape(n->input(op == "ConvGrad" ? 0 : 1)->shape).dims[1].value
                                   : n->output(0)->shape.dims[1].value;
      if (n->attr_int("channel_block", 0) == block) {
        ++blocked;
        EXPECT_EQ(channels, 16 / block) << n->name() << ": the first conv's ops";
      } else {
        ++plain;
        EXPECT_EQ(n->attr_int("channel_block", 0), 0) << n->name();
      }
    }
    EXPECT_EQ(blocked, 4);
    EXPECT_EQ(plain, 4);
    ASSERT_NO_FATAL_FAILURE(ExpectSame(Grads(g, x), before, kParams));
  }
}

// Nothing to block: no blocked kernels, or the first conv cannot run blocked (then no later op
// reads a blocked value), or the dtype has no blocked kernels, or a lone conv whose output only
// ops outside the region read (a stem conv before a norm).
TEST(ConvLayoutTrainPass, LeavesGraphsWithNothingToBlock) {
  struct Refusal {
    const char* why;
    Net net;
    int64_t block;
    bool bf16 = false;
  };
  for (const Refusal& r : {Refusal{"no blocked kernels on this CPU", {}, 0},
                           Refusal{"an image with more than 4 channels (the first conv, so every op after it)",
                                   {.image_channels = 8}, 16},
                           Refusal{"bf16 in 8-channel blocks", {}, 8, true},
                           Refusal{"lone convs (each read by a Sigmoid)", {.lone_convs = true}, 16}}) {
    SCOPED_TRACE(r.why);
    G b;
    ASSERT_NO_FATAL_FAILURE(Build(b, r.net));
    Graph& g = b.graph();
    if (r.bf16) {  // the region's activations in bf16, as the precision pass leaves them
      for (const auto& n : g.nodes())
        for (Value* v : n->outputs())
          if (v != nullptr && v->dtype == DType::kF32 && v->shape.rank_known && v->shape.rank() == 4)
            v->dtype = DType::kBF16;
    }
    const int64_t nodes = static_cast<int64_t>(g.nodes().size());
    auto changed = RunPass(g, r.block);
    ASSERT_TRUE(changed.ok()) << changed.status().message();
    EXPECT_FALSE(*changed);
    EXPECT_EQ(static_cast<int64_t>(g.nodes().size()), nodes);
    for (const auto& n : g.nodes()) EXPECT_EQ(n->attr_int("channel_block", 0), 0) << n->name();
    if (r.bf16) {  // the refusal is the block's: in 16-channel blocks the same region converts
      auto in16 = RunPass(g, 16);
      ASSERT_TRUE(in16.ok()) << in16.status().message();
      EXPECT_TRUE(*in16);
    }
  }
}

}  // namespace
}  // namespace mixtrain
