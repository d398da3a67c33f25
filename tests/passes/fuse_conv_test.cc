// The inference conv passes (fuse_conv, conv_layout, conv_transposes, conv_flatten_weights):
// what they rewrite and what they must leave alone (shared intermediates, graph outputs,
// broadcasts, training-mode BatchNormalization), and that the rewritten graph computes what
// the original did, on small graphs and on the shipped fashion_cnn and resnet_mini models in
// fp32 (tight) and bf16 (loose); the optimized models pass onnx::checker.
#include <cmath>
#include <map>
#include <random>

#include "kernels/cpu/backend.h"
#include "gtest/gtest.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "passes/conv_pass_util.h"
#include "passes/inference.h"
#include "passes/pass_registry.h"
#include "passes/low_precision.h"
#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using conv_pass::SoleConsumer;
using gradcheck::G;
using inference_test::Count;
using inference_test::ExpectClose;
using inference_test::Find;
using inference_test::Feeds;
using inference_test::RunGraph;
using A = Attribute;

// With a value: the CPU the "inference" pipeline is built for has (true) or lacks (false) the
// channel-blocked kernels; without: this CPU.
std::optional<bool> g_blocked;

Target TestTarget() {
  if (!g_blocked) return CpuBackend().target();
  TargetCapabilities caps = CpuBackend().target().caps;
  caps.channel_blocked = *g_blocked;
  return CpuTarget(caps);
}

// Runs the named passes (or the whole inference pipeline for "inference") on a copy of `g`
// and checks the copy computes what g does; returns the copy.
std::unique_ptr<Graph> RewriteAndCompare(Graph& g, const std::vector<std::string>& passes,
                                         double tol = 1e-5) {
  EXPECT_TRUE(InferShapes(g).ok());
  std::unique_ptr<Graph> opt = g.Clone();
  PassManager pm;
  for (const std::string& p : passes) {
    auto pass = p == "inference" ? MakeInferencePass(TestTarget()) : CreatePassByName(p);
    EXPECT_TRUE(pass.ok()) << p;
    if (pass.ok()) pm.Add(std::move(*pass));
  }
  absl::Status st = pm.Run(*opt);
  EXPECT_TRUE(st.ok()) << st;
  auto feeds = Feeds(g, 3);
  ExpectClose(RunGraph(*opt, feeds), RunGraph(g, feeds), tol);
  return opt;
}

Value* Input(G& b, const std::string& name, std::vector<int64_t> dims) {
  Value* x = b.graph().AddValue(name, DType::kF32, Shape::Of(dims));
  b.graph().AddInput(x);
  return x;
}

std::vector<A> Pad1() { return {A::Ints("pads", {1, 1, 1, 1})}; }

// ---- fuse_conv ------------------------------------------------------------------------------

TEST(FuseConv, ConvReluBecomesFusedConv) {
  G b;
  Value* x = Input(b, "x", {2, 3, 8, 8});
  Value* c = b.Op1("Conv", {x, b.Param("w", {4, 3, 3, 3}, 1), b.Param("bias", {4}, 2)}, Pad1());
  Value* y = b.Op1("Relu", {c});
  b.graph().AddOutput(y);
  auto opt = RewriteAndCompare(b.graph(), {"fuse_conv"});
  EXPECT_EQ(Count(*opt, "Conv"), 0);
  EXPECT_EQ(Count(*opt, "Relu"), 0);
  Node* f = Find(*opt, "FusedConv");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->attr_string("activation", ""), "Relu");
  EXPECT_EQ(f->output(0)->name, y->name);  // the graph output keeps its name
}

TEST(FuseConv, ConvOutputUsedElsewhereStays) {
  G b;
  Value* x = Input(b, "x", {2, 3, 8, 8});
  Value* c = b.Op1("Conv", {x, b.Param("w", {4, 3, 3, 3}, 1)}, Pad1());
  b.graph().AddOutput(b.Op1("Relu", {c}));
  b.graph().AddOutput(c);
  auto opt = RewriteAndCompare(b.graph(), {"fuse_conv"});
  EXPECT_EQ(Count(*opt, "FusedConv"), 0);
  EXPECT_EQ(Count(*opt, "Relu"), 1);
}

TEST(FuseConv, ResidualAddAndActivation) {
  G b;
  Value* x = Input(b, "x", {2, 3, 6, 5});
  Value* z = Input(b, "z", {2, 4, 6, 5});
  Value* c = b.Op1("Conv", {x, b.Param("w", {4, 3, 3, 3}, 1), b.Param("bias", {4}, 2)}, Pad1());
  b.graph().AddOutput(b.Op1("LeakyRelu", {b.Op1("Add", {z, c})}, {A::Float("alpha", 0.3f)}));
  auto opt = RewriteAndCompare(b.graph(), {"fuse_conv"});
  ASSERT_EQ(opt->num_nodes(), 1u);
  Node* f = Find(*opt, "FusedConv");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->num_inputs(), 4u);
  EXPECT_EQ(f->input(3)->name, "z");
  EXPECT_EQ(f->attr_string("activation", ""), "LeakyRelu");
}

TEST(FuseConv, BroadcastAddIsNoResidual) {
  G b;
  Value* x = Input(b, "x", {2, 3, 6, 6});
  Value* c = b.Op1("Conv", {x, b.Param("w", {4, 3, 3, 3}, 1)}, Pad1());
  b.graph().AddOutput(b.Op1("Add", {c, b.Param("k", {1, 4, 1, 1}, 3)}));
  auto opt = RewriteAndCompare(b.graph(), {"fuse_conv"});
  EXPECT_EQ(Count(*opt, "FusedConv"), 0);
  EXPECT_EQ(Count(*opt, "Add"), 1);
}

TEST(FuseConv, FoldsInferenceBatchNormOnly) {
  for (int training : {0, 1}) {
    G b;
    Value* x = Input(b, "x", {2, 3, 6, 6});
    Value* c = b.Op1("Conv", {x, b.Param("w", {4, 3, 3, 3}, 1), b.Param("bias", {4}, 2)}, Pad1());
    std::vector<float> var = {0.5f, 1.5f, 2.0f, 0.25f};
    Value* bn = b.Op1("BatchNormalization",
                      {c, b.Param("s", {4}, 3), b.Param("o", {4}, 4), b.Param("m", {4}, 5),
                       b.Param("v", {4}, var)},
                      {A::Float("epsilon", 1e-3f), A::Int("training_mode", training)});
    b.graph().AddOutput(b.Op1("Relu", {bn}));
    auto opt = RewriteAndCompare(b.graph(), {"fuse_conv"}, 1e-5);
    EXPECT_EQ(Count(*opt, "BatchNormalization"), training) << "training_mode " << training;
    if (training == 0) {
      ASSERT_EQ(opt->num_nodes(), 1u);
      EXPECT_EQ(Find(*opt, "FusedConv")->attr_string("activation", ""), "Relu");
    }
  }
}

// ---- layout ---------------------------------------------------------------------------------

// fashion_cnn's shape: conv-relu-pool twice, flatten, gemm (c_in input channels, then m1 and
// m2; with multiples of 16 the region runs channel-blocked).
void BuildCnn(G& b, int64_t c_in, bool pool_is_output, int64_t m1 = 8, int64_t m2 = 16) {
  Value* x = Input(b, "x", {2, c_in, 12, 12});
  Value* h = b.Op1("Relu", {b.Op1("Conv", {x, b.Param("w1", {m1, c_in, 3, 3}, 1),
                                           b.Param("b1", {m1}, 2)}, Pad1())});
  const std::vector<A> pool = {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})};
  h = b.Op1("MaxPool", {h}, pool);
  h = b.Op1("Relu", {b.Op1("Conv", {h, b.Param("w2", {m2, m1, 3, 3}, 3), b.Param("b2", {m2}, 4)},
                           Pad1())});
  h = b.Op1("MaxPool", {h}, pool);
  if (pool_is_output) b.graph().AddOutput(h);
  h = b.Op1("Flatten", {h});
  h = b.Op1("Gemm", {h, b.Param("fw", {10, m2 * 9}, 5), b.Param("fb", {10}, 6)},
            {A::Int("transB", 1)});
  b.graph().AddOutput(h);
}

TEST(ConvLayout, SingleChannelCnnHasNoTransposeLeft) {
  G b;
  BuildCnn(b, 1, false);
  auto opt = RewriteAndCompare(b.graph(), {"inference"});
  // The input's move of its size-1 channel dim is a view; the flatten's is in the weights.
  EXPECT_EQ(Count(*opt, "Transpose"), 0);
  EXPECT_EQ(Count(*opt, "Reshape"), 1);
  EXPECT_EQ(Count(*opt, "FusedConv"), 2);
  EXPECT_EQ(Count(*opt, "MaxPool"), 2);
  for (const auto& n : opt->nodes())
    if (n->op_type() == "FusedConv" || n->op_type() == "MaxPool") {
      EXPECT_EQ(n->domain(), "ai.mixtrain");
      EXPECT_EQ(n->attr_int("channels_last", 0), 1);
    }
}

TEST(ConvLayout, TransposesOnlyAtRegionBoundaries) {
  G b;
  BuildCnn(b, 3, false);
  auto opt = RewriteAndCompare(b.graph(), {"inference"});
  EXPECT_EQ(Count(*opt, "Transpose"), 1);  // the input's
}

TEST(ConvLayout, FlattenOfSharedFeatureMapKeepsItsTranspose) {
  G b;
  BuildCnn(b, 3, true);
  auto opt = RewriteAndCompare(b.graph(), {"inference"});
  EXPECT_EQ(Count(*opt, "Transpose"), 2);  // the input's and the graph output's
  EXPECT_EQ(opt->initializers().size(), b.graph().initializers().size());  // no new weights
}

TEST(ConvLayout, ResidualRegionStaysChannelsLast) {
  G b;
  Value* x = Input(b, "x", {2, 4, 7, 7});
  Value* h = b.Op1("Relu", {b.Op1("Conv", {x, b.Param("w1", {4, 4, 3, 3}, 1)}, Pad1())});
  Value* c = b.Op1("Conv", {h, b.Param("w2", {4, 4, 3, 3}, 2)}, Pad1());
  Value* half = b.Param("k", {1}, std::vector<float>{0.5f});
  Value* r = b.Op1("Sigmoid", {b.Op1("Mul", {b.Op1("Add", {c, h}), half})});
  b.graph().AddOutput(b.Op1("GlobalAveragePool", {r}));
  auto opt = RewriteAndCompare(b.graph(), {"inference"});
  EXPECT_EQ(Count(*opt, "Transpose"), 1);  // the input's; the pooled [N,1,1,C] is a view
  EXPECT_EQ(Find(*opt, "GlobalAveragePool")->domain(), "ai.mixtrain");
}

// The ops of a blocked region: FusedConvs and pools with channel_block = 16.
void ExpectBlocked(const Graph& g) {
  for (const auto& n : g.nodes())
    if (n->op_type() == "FusedConv" || n->op_type() == "MaxPool") {
      EXPECT_EQ(n->attr_int("channel_block", 0), 16) << n->name();
      EXPECT_EQ(n->attr_int("channels_last", 0), 0) << n->name();
    }
}

// The blocked 16->32 conv runs Winograd (fp32, constant weights): its pooled outputs differ
// from the direct conv's by up to 5.3e-5 at |y| = 0.79 (3e-5 of 1 + |y|), so these compare
// with 1e-4 instead of 1e-5.
constexpr double kWinogradTol = 1e-4;

// The blocked rewrite is what the tests below check, on whatever CPU runs them (its kernels
// exist everywhere; only on AVX-512 are they fast, so the pass asks the target's capabilities):
// "inference" is built for a CPU with or without them while one of these lives.
class TargetTraitsScope {
 public:
  explicit TargetTraitsScope(bool blocked) { g_blocked = blocked; }
  ~TargetTraitsScope() { g_blocked.reset(); }
};

TEST(ConvLayout, BlockedRegionHasNoConversionLeft) {
  TargetTraitsScope blocked(true);
  G b;
  BuildCnn(b, 1, false, 16, 32);
  auto opt = RewriteAndCompare(b.graph(), {"inference"}, kWinogradTol);
  EXPECT_EQ(Count(*opt, "Transpose"), 0);
  EXPECT_EQ(Count(*opt, "Reshape"), 0);  // the flatten's order is in the permuted weights
  EXPECT_EQ(Count(*opt, "FusedConv"), 2);
  ExpectBlocked(*opt);
  // The first conv reads the image's single NC<sp> channel and swallows the first pool
  // (conv_pool); the second reads its blocked output.
  EXPECT_EQ(Count(*opt, "MaxPool"), 1);
  const Node* conv1 = Find(*opt, "FusedConv");
  EXPECT_EQ(conv1->attr_int("input_channel_block", -1), 0);
  EXPECT_EQ(conv1->attr_ints("pool_kernel_shape"), (std::vector<int64_t>{2, 2}));
  const Node* conv2 = SoleConsumer(*opt, conv1->output(0));
  ASSERT_NE(conv2, nullptr);
  EXPECT_EQ(conv2->op_type(), "FusedConv");
  EXPECT_EQ(conv2->attr_int("input_channel_block", -1), 16);
  EXPECT_FALSE(conv2->has_attr("pool_kernel_shape"));  // its input is blocked
}

// Without AVX-512 (oneDNN would run nChw16c convs in its reference code) the same region runs
// channels-last.
TEST(ConvLayout, NoBlockedRegionWithoutBlockedKernels) {
  TargetTraitsScope avx2(false);
  G b;
  BuildCnn(b, 1, false, 16, 32);
  auto opt = RewriteAndCompare(b.graph(), {"inference"}, 1e-5);
  int convs = 0;
  for (const auto& n : opt->nodes())
    if (n->op_type() == "FusedConv" || n->op_type() == "MaxPool") {
      EXPECT_EQ(n->attr_int("channel_block", 0), 0) << n->name();
      EXPECT_EQ(n->attr_int("channels_last", 0), 1) << n->name();
      convs += n->op_type() == "FusedConv";
    }
  EXPECT_EQ(convs, 2);
}

TEST(ConvLayout, BlockedRegionInBf16) {
  TargetTraitsScope blocked(true);
  G b;
  BuildCnn(b, 1, false, 16, 32);
  ASSERT_TRUE(LowerFloatModel(b.graph(), DType::kBF16).ok());
  auto opt = RewriteAndCompare(b.graph(), {"inference"}, 2e-2);
  EXPECT_EQ(Count(*opt, "Transpose"), 0);
  ExpectBlocked(*opt);
  EXPECT_EQ(Count(*opt, "MaxPool"), 2);  // conv_pool folds fp32 only
}

TEST(ConvPool, PoolWithPadsOrSharedConvOutputStays) {
  TargetTraitsScope blocked(true);
  for (bool shared : {false, true}) {
    G b;
    Value* x = Input(b, "x", {2, 1, 10, 10});
    Value* c = b.Op1("Relu", {b.Op1("Conv", {x, b.Param("w", {16, 1, 3, 3}, 1)}, Pad1())});
    std::vector<A> pool = {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})};
    if (!shared) pool.push_back(A::Ints("pads", {0, 0, 1, 1}));
    Value* p = b.Op1("MaxPool", {c}, pool);
    Value* h = b.Op1("Relu", {b.Op1("Conv", {p, b.Param("w2", {16, 16, 3, 3}, 2)})});
    b.graph().AddOutput(h);
    if (shared) b.graph().AddOutput(b.Op1("Conv", {c, b.Param("w3", {16, 16, 1, 1}, 3)}));
    auto opt = RewriteAndCompare(b.graph(), {"inference"}, kWinogradTol);
    EXPECT_EQ(Count(*opt, "MaxPool"), 1) << "shared " << shared;
    ExpectBlocked(*opt);
    for (const auto& n : opt->nodes()) EXPECT_FALSE(n->has_attr("pool_kernel_shape"));
  }
}

TEST(ConvLayout, BlockedGraphOutputKeepsItsConversion) {
  TargetTraitsScope blocked(true);
  G b;
  BuildCnn(b, 1, true, 16, 32);
  auto opt = RewriteAndCompare(b.graph(), {"inference"}, kWinogradTol);
  ExpectBlocked(*opt);
  // The pooled map is a graph output: converted back once (Transpose + Reshape), and the
  // Flatten reads that NC<sp> output, so the weights stay.
  EXPECT_EQ(Count(*opt, "Transpose"), 1);
  EXPECT_EQ(Count(*opt, "Reshape"), 1);
  EXPECT_EQ(opt->initializers().size(), b.graph().initializers().size() + 1);  // Reshape's shape
}

TEST(ConvLayout, WideInputFromOutsideStaysChannelsLast) {
  // 16 input channels from the graph input would need a conversion into the blocked layout.
  G b;
  BuildCnn(b, 16, false, 16, 32);
  auto opt = RewriteAndCompare(b.graph(), {"inference"});
  for (const auto& n : opt->nodes())
    if (n->op_type() == "FusedConv") EXPECT_EQ(n->attr_int("channels_last", 0), 1);
}

TEST(ConvTransposes, ReshapeChainsMergeAndIdentitiesVanish) {
  G b;
  Value* x = Input(b, "x", {2, 32, 3, 3});
  const auto reshape = [&](Value* v, std::vector<int64_t> s) {
    const int64_t r = static_cast<int64_t>(s.size());
    return b.Op1("Reshape", {v, b.graph().AddInitializer(b.graph().UniqueName("s"),
                                                         Tensor::FromVector<int64_t>(
                                                             DType::kI64, {r}, s))});
  };
  // A round trip through [N, 2, 16, 3, 3] is x itself.
  Value* back = reshape(reshape(x, {0, 2, 16, 3, 3}), {0, 32, 3, 3});
  Value* relu = b.Op1("Relu", {back});
  b.graph().AddOutput(relu);
  // An intermediate read elsewhere stays.
  Value* mid = reshape(x, {2, 32, 9});
  b.graph().AddOutput(reshape(mid, {2, 288}));
  b.graph().AddOutput(b.Op1("Neg", {mid}));
  auto opt = RewriteAndCompare(b.graph(), {"conv_transposes"});
  EXPECT_EQ(Count(*opt, "Reshape"), 2);
  EXPECT_EQ(opt->FindValue(relu->name)->producer->input(0)->name, "x");
}

TEST(ConvTransposes, InversePairsCancelOthersStay) {
  G b;
  Value* x = Input(b, "x", {2, 3, 4, 5});
  const auto pair = [&] {
    Value* t = b.Op1("Transpose", {x}, {A::Ints("perm", {0, 2, 3, 1})});
    return b.Op1("Transpose", {t}, {A::Ints("perm", {0, 3, 1, 2})});
  };
  Value* relu = b.Op1("Relu", {pair()});
  b.graph().AddOutput(relu);
  b.graph().AddOutput(pair());  // a graph output: its name must survive
  b.graph().AddOutput(b.Op1("Transpose", {b.Op1("Relu", {x})}, {A::Ints("perm", {0, 2, 1, 3})}));
  auto opt = RewriteAndCompare(b.graph(), {"conv_transposes"});
  EXPECT_EQ(Count(*opt, "Transpose"), 3);
  EXPECT_EQ(opt->FindValue(relu->name)->producer->input(0)->name, "x");
}

// ---- shipped models -------------------------------------------------------------------------

void CompareModel(const std::string& file, DType dt, double tol) {
  SCOPED_TRACE(file + " " + DTypeName(dt));
  auto g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/" + file);
  ASSERT_TRUE(g.ok()) << g.status();
  if (dt != DType::kF32) ASSERT_TRUE(LowerFloatModel(**g, dt).ok());
  std::unique_ptr<Graph> opt = (*g)->Clone();
  ASSERT_TRUE(OptimizeForInference(*opt, CpuBackend().target()).ok());
  EXPECT_GT(Count(*opt, "FusedConv"), 0);
  auto feeds = Feeds(**g, 4);
  ExpectClose(RunGraph(*opt, feeds), RunGraph(**g, feeds), tol);
  if (dt == DType::kF32) {
    absl::Status st = CheckOnnxModel(ExportOnnx(*opt));
    EXPECT_TRUE(st.ok()) << st.message();
  }
}

// fp32 1e-4: fashion_cnn's channel-blocked 32->64 conv runs oneDNN's Winograd kernel, whose
// error is about 3x the direct conv's (1.0e-6 vs 3.6e-7 of the output's scale on that conv,
// tests/kernels/blocked_conv_test.cc); through the fc layers that stays well below 1e-4.
TEST(ConvModels, OptimizedEqualsUnoptimized) {
  for (const char* m : {"fashion_cnn.onnx", "resnet_mini.onnx"}) {
    CompareModel(m, DType::kF32, 1e-4);
    CompareModel(m, DType::kBF16, 5e-2);
  }
}

}  // namespace
}  // namespace mixtrain
