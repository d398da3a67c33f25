// The lora pass (passes/lora.h): default targets found from the graph's structure on exports of
// several exporters, the branch it adds, what trains, the merge, and each bad input refused with
// one line naming the culprit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "graph/onnx_import.h"
#include "passes/lora.h"
#include "passes/parameters.h"
#include "passes/pipeline.h"
#include "graph/shape_inference.h"
#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain {
namespace {

// This CPU's target, with bf16 native whatever the CPU (the recipe's AUTO then picks bf16 AMP).
Target Bf16Cpu() {
  Target t = CpuBackend().target();
  t.caps.native_bf16 = true;
  return t;
}

const std::string kZoo = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/";
const std::string kLoraDir = std::string(MT_SOURCE_DIR) + "/tests/data/lora/";

// The model canonicalized as training prepares it.
std::unique_ptr<Graph> Prepared(const std::string& name) {
  auto g = ImportOnnxFile(kZoo + name + ".onnx");
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  TrainingRecipe r;
  EXPECT_TRUE(PrepareModel(**g, r).ok());
  return *std::move(g);
}

// A regex matching exactly `name`.
std::string RegexFor(const std::string& name) {
  std::string re;
  for (char c : name) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) re += '\\';
    re += c;
  }
  return re;
}

LoraOptions Rank(int64_t rank, std::string targets = "") {
  LoraOptions o;
  o.rank = rank;
  o.alpha = 2.0f * static_cast<float>(rank);
  o.targets = std::move(targets);
  return o;
}

// The blocks' projections, whatever the exporter: 4 per GPT-2 block (c_attn, attn c_proj, c_fc,
// mlp c_proj), 7 per Llama block (q, k, v, o, gate, up, down); never the tied embedding (also
// read by a Gather) nor the LM head (its shape equals gate/up's in llama_hf: vocab 64 =
// intermediate 64).
TEST(LoraTargets, DefaultsAreTheRepeatedBlocksProducts) {
  const std::pair<const char*, size_t> cases[] = {
      {"gpt2_hf", 8}, {"gpt2_hf_ts", 8}, {"llama_hf", 14}, {"tfm_encoder", 8}, {"tfm_encoder_dynamo", 8}, {"vit_timm", 8}};
  for (const auto& [name, want] : cases) {
    std::unique_ptr<Graph> g = Prepared(name);
    ASSERT_NE(g, nullptr);
    auto t = FindLoraTargets(*g, Rank(2));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    EXPECT_EQ(t->size(), want) << name;
    for (const LoraTarget& target : *t) {
      const Value* w = g->FindValue(target.weight);
      for (const Node* reader : w->consumers) EXPECT_NE(reader->op_type(), "Gather") << name << " " << target.weight;
      EXPECT_EQ(w->initializer->rank(), 2);
    }
  }
  // llama_hf's head: the last product, the only one whose result reaches the logits directly.
  std::unique_ptr<Graph> llama = Prepared("llama_hf");
  auto t = FindLoraTargets(*llama, Rank(2));
  ASSERT_TRUE(t.ok());
  std::set<std::string> chosen;
  for (const LoraTarget& target : *t) chosen.insert(target.weight);
  int products_reading_64_wide = 0;
  for (const auto& n : llama->nodes())
    if (n->op_type() == "MatMul" && n->input(1)->is_initializer() && n->input(1)->initializer->dims()[1] == 64 &&
        !chosen.contains(n->input(1)->name))
      ++products_reading_64_wide;
  EXPECT_EQ(products_reading_64_wide, 1) << "exactly the head is left out";
}

TEST(LoraTargets, RegexOverInitializerOrNodeNames) {
  std::unique_ptr<Graph> g = Prepared("gpt2_hf");
  auto by_weight = FindLoraTargets(*g, Rank(2, ".*c_attn\\.weight"));
  ASSERT_TRUE(by_weight.ok()) << by_weight.status();
  EXPECT_EQ(by_weight->size(), 2u);
  // The product reading h.0's c_attn weight, by its node name.
  const std::string product = (*by_weight)[0].products.at(0);
  auto by_node = FindLoraTargets(*g, Rank(2, product));
  ASSERT_TRUE(by_node.ok()) << by_node.status();
  ASSERT_EQ(by_node->size(), 1u);
  EXPECT_EQ((*by_node)[0].weight, (*by_weight)[0].weight);
}

TEST(LoraTargets, BadInputIsOneLineNamingTheCulprit) {
  std::unique_ptr<Graph> gpt2 = Prepared("gpt2_hf");
  auto none = FindLoraTargets(*gpt2, Rank(2, "no_such_weight"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--lora-targets=no_such_weight matches no weight"), std::string::npos)
      << none.status();
  auto big = FindLoraTargets(*gpt2, Rank(40));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("--lora-rank=40 is larger than min(in, out) = 32"), std::string::npos)
      << big.status();
  // The tied embedding (the dynamo export names it after lm_head): a Gather reads it too, so a
  // merged export would change the embedding.
  auto tied = FindLoraTargets(*gpt2, Rank(2, ".*lm_head\\.weight"));
  ASSERT_FALSE(tied.ok());
  EXPECT_NE(tied.status().message().find("also read by Gather"), std::string::npos) << tied.status();

  // Conv kernels: a grouped Conv's adapter could not be merged into it; a ConvTranspose is not
  // adapted; a rank above min(in x kernel, out).
  std::unique_ptr<Graph> mix = Prepared("nn_mix");
  for (const auto& n : mix->nodes()) {
    if (n->op_type() != "Conv" && n->op_type() != "ConvTranspose") continue;
    const bool grouped = n->attr_int("group", 1) != 1;
    if (n->op_type() == "Conv" && !grouped) continue;
    auto r = FindLoraTargets(*mix, Rank(2, RegexFor(n->input(1)->name)));
    ASSERT_FALSE(r.ok()) << n->name();
    EXPECT_NE(r.status().message().find(grouped ? "with group = " : "is read by ConvTranspose"), std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find(n->input(1)->name), std::string::npos) << r.status();
  }
  std::unique_ptr<Graph> vit = Prepared("vit_timm");
  auto conv_rank = FindLoraTargets(*vit, Rank(1000, "patch_embed\\.proj\\.weight"));
  ASSERT_FALSE(conv_rank.ok());
  EXPECT_NE(conv_rank.status().message().find("--lora-rank=1000 is larger than min(in x kernel, out)"),
            std::string::npos)
      << conv_rank.status();

  auto bad_regex = FindLoraTargets(*gpt2, Rank(2, "(("));
  EXPECT_FALSE(bad_regex.ok());

  std::unique_ptr<Graph> mlp = Prepared("keras_mlp");
  auto flat = FindLoraTargets(*mlp, Rank(2));
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(flat.status().message().find("no repeated blocks"), std::string::npos) << flat.status();
}

TEST(LoraPass, AdaptersAloneTrainAndTheBranchStartsAtZero) {
  std::unique_ptr<Graph> g = Prepared("gpt2_hf");
  const size_t before = g->initializers().size();
  PassManager pm;
  pm.Add(MakeLoraPass(Rank(4)));
  ASSERT_TRUE(pm.Run(*g).ok());
  const std::vector<LoraAdapter> adapters = LoraAdapters(*g);
  ASSERT_EQ(adapters.size(), 8u);
  EXPECT_EQ(g->initializers().size(), before + 16 + 1);  // A, B per target, and the scale
  auto trains = SelectTrainable(*g, {});
  ASSERT_TRUE(trains.ok());
  std::set<std::string> names;
  for (const Value* v : *trains) names.insert(v->name);
  std::set<std::string> want;
  for (const LoraAdapter& a : adapters) {
    want.insert(a.a);
    want.insert(a.b);
    EXPECT_FLOAT_EQ(a.scale, 2.0f);
    const Tensor& b = *g->FindValue(a.b)->initializer;
    for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(b.data_as<float>()[i], 0.0f) << a.b;
    // PEFT's Kaiming-uniform bound 1/sqrt(in), drawn (not zero).
    const Tensor& av = *g->FindValue(a.a)->initializer;
    const double bound = 1.0 / std::sqrt(static_cast<double>(av.dims()[0]));
    double max_abs = 0;
    for (int64_t i = 0; i < av.numel(); ++i) max_abs = std::max(max_abs, std::fabs(double{av.data_as<float>()[i]}));
    EXPECT_LE(max_abs, bound);
    EXPECT_GT(max_abs, bound / 2);
  }
  EXPECT_EQ(names, want) << "only the adapters train by default";
  // --trainable adds to the adapters.
  auto plus = SelectTrainable(*g, {".*ln_f.*", ""});
  ASSERT_TRUE(plus.ok());
  EXPECT_EQ(plus->size(), want.size() + 2);
}

TEST(LoraMerge, FoldsScaledProductInEitherLayout) {
  Tensor w = Tensor::FromVector<float>(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor a = Tensor::FromVector<float>(DType::kF32, {2, 1}, {1, 2});      // [in 2, rank 1]
  Tensor b = Tensor::FromVector<float>(DType::kF32, {1, 3}, {1, 0, -1});  // [rank 1, out 3]
  auto m = MergeLoraDelta(w, a, b, 0.5f, false);
  ASSERT_TRUE(m.ok());
  const std::vector<float> want{1.5f, 2, 2.5f, 5, 5, 5};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(m->data_as<float>()[i], want[i]);
  // W stored [out, in]: the transpose of the delta.
  Tensor wt = Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, 4, 2, 5, 3, 6});
  auto mt = MergeLoraDelta(wt, a, b, 0.5f, true);
  ASSERT_TRUE(mt.ok());
  const std::vector<float> want_t{1.5f, 5, 2, 5, 2.5f, 5};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(mt->data_as<float>()[i], want_t[i]);
  EXPECT_FALSE(MergeLoraDelta(w, a, b, 0.5f, true).ok()) << "shapes that do not fit";
}

TEST(LoraMerge, FoldsAConvBranchIntoTheKernel) {
  // W [out 2, in 1, 1, 2]; A [rank 1, in 1, 1, 2]; B [out 2, rank 1, 1, 1].
  Tensor w = Tensor::FromVector<float>(DType::kF32, {2, 1, 1, 2}, {1, 2, 3, 4});
  Tensor a = Tensor::FromVector<float>(DType::kF32, {1, 1, 1, 2}, {1, -1});
  Tensor b = Tensor::FromVector<float>(DType::kF32, {2, 1, 1, 1}, {2, 3});
  auto m = MergeLoraDelta(w, a, b, 0.5f, false);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<float> want{1 + 1, 2 - 1, 3 + 1.5f, 4 - 1.5f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(m->data_as<float>()[i], want[i]);
  Tensor wrong = Tensor::FromVector<float>(DType::kF32, {2, 1, 1, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_FALSE(MergeLoraDelta(wrong, a, b, 0.5f, false).ok()) << "a kernel of another size";
}

// Runs g and returns its first output.
Tensor Forward(const Graph& g, const std::map<std::string, Tensor>& feeds) {
  auto session = Session::Create(g);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return Tensor();
  auto out = (*session)->Run(feeds, {g.outputs()[0]->name});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : Tensor();
}

// Random float inputs, dynamic dimensions 2.
std::map<std::string, Tensor> RandomInputs(const Graph& g) {
  std::map<std::string, Tensor> feeds;
  uint32_t seed = 11;
  for (const Value* in : g.inputs()) {
    if (in->is_initializer()) continue;
    std::vector<int64_t> dims;
    for (const Dim& d : in->shape.dims) dims.push_back(d.known() ? d.value : 2);
    feeds[in->name] = Tensor::FromVector<float>(DType::kF32, dims, gradcheck::Random(NumElements(dims), seed++));
  }
  return feeds;
}

// The Conv branch computes what its merge computes: on each model, every ungrouped Conv kernel
// gets an adapter with a random B; the step's forward with the branches equals the model with
// W + s·B·A folded in. Exporters: timm (dynamo), tf2onnx, torch.nn (both exporters), and two
// built here for what no zoo model has (dilations, strides and asymmetric pads; auto_pad).
TEST(LoraConv, BranchEqualsItsMerge) {
  std::vector<std::pair<std::string, std::unique_ptr<Graph>>> models;
  for (const char* name : {"resnet10t_timm", "keras_conv2d", "conv1d_pad", "unet_prelu_ts", "groupnorm_cnn", "vit_timm"})
    models.emplace_back(name, Prepared(name));
  {
    gradcheck::G b;
    Value* x = b.graph().AddValue("x", DType::kF32, Shape::Of({2, 3, 11, 9}));
    b.graph().AddInput(x);
    Value* y = b.Op1("Conv", {x, b.Param("w", {4, 3, 3, 3}, 1), b.Param("bias", {4}, 2)},
                     {Attribute::Ints("dilations", {2, 1}), Attribute::Ints("strides", {2, 1}),
                      Attribute::Ints("pads", {2, 1, 1, 0})});
    b.graph().AddOutput(y);
    ASSERT_TRUE(InferShapes(b.graph()).ok());
    models.emplace_back("dilated", b.graph().Clone());
  }
  {
    gradcheck::G b;
    Value* x = b.graph().AddValue("x", DType::kF32, Shape::Of({2, 5, 13}));
    b.graph().AddInput(x);
    Value* y = b.Op1("Conv", {x, b.Param("w", {6, 5, 4}, 3)},
                     {Attribute::String("auto_pad", "SAME_UPPER"), Attribute::Ints("strides", {2})});
    b.graph().AddOutput(y);
    ASSERT_TRUE(InferShapes(b.graph()).ok());
    models.emplace_back("auto_pad_1d", b.graph().Clone());
  }
  for (auto& [name, g] : models) {
    ASSERT_NE(g, nullptr) << name;
    std::string targets;
    std::set<std::string> kernels;
    for (const auto& n : g->nodes())
      if (n->op_type() == "Conv" && n->attr_int("group", 1) == 1 && n->input(1)->is_initializer() &&
          kernels.insert(n->input(1)->name).second)
        targets += (targets.empty() ? "" : "|") + RegexFor(n->input(1)->name);
    ASSERT_FALSE(kernels.empty()) << name;
    std::unique_ptr<Graph> branched = g->Clone();
    PassManager pm;
    pm.Add(MakeLoraPass(Rank(2, targets)));
    ASSERT_TRUE(pm.Run(*branched).ok()) << name;
    const std::vector<LoraAdapter> adapters = LoraAdapters(*branched);
    ASSERT_EQ(adapters.size(), kernels.size()) << name;
    std::unique_ptr<Graph> merged = g->Clone();
    uint32_t seed = 100;
    for (const LoraAdapter& ad : adapters) {
      Value* bv = branched->FindValue(ad.b);
      const Tensor& a = *branched->FindValue(ad.a)->initializer;
      ASSERT_EQ(a.rank(), bv->initializer->rank()) << ad.b;
      EXPECT_EQ(a.rank(), g->FindValue(ad.weight)->initializer->rank()) << "PEFT's Conv layout: " << ad.a;
      // PEFT's Kaiming-uniform bound over the fan-in in x kernel (A [rank, in, k...]).
      const double bound = 1.0 / std::sqrt(static_cast<double>(a.numel() / a.dims()[0]));
      double max_abs = 0;
      for (int64_t i = 0; i < a.numel(); ++i) max_abs = std::max(max_abs, std::fabs(double{a.data_as<float>()[i]}));
      EXPECT_LE(max_abs, bound) << ad.a;
      EXPECT_GT(max_abs, a.numel() >= 16 ? bound / 2 : 0) << ad.a;
      branched->SetInitializer(bv, Tensor::FromVector<float>(DType::kF32, bv->initializer->dims(),
                                                             gradcheck::Random(bv->initializer->numel(), seed++)));
      Value* w = merged->FindValue(ad.weight);
      auto m = MergeLoraDelta(*w->initializer, a, *bv->initializer, ad.scale, ad.transposed);
      ASSERT_TRUE(m.ok()) << m.status();
      merged->SetInitializer(w, *m);
    }
    const std::map<std::string, Tensor> feeds = RandomInputs(*g);
    const Tensor before = Forward(*g, feeds), with_branch = Forward(*branched, feeds), folded = Forward(*merged, feeds);
    ASSERT_EQ(with_branch.dims(), folded.dims()) << name;
    double diff = 0, scale = 0, moved = 0;
    for (int64_t i = 0; i < folded.numel(); ++i) {
      const double f = folded.data_as<float>()[i];
      diff = std::max(diff, std::fabs(with_branch.data_as<float>()[i] - f));
      moved = std::max(moved, std::fabs(before.data_as<float>()[i] - f));
      scale = std::max(scale, std::fabs(f));
    }
    std::printf("%s: %zu Conv kernels adapted, max |branch - merged| %.3g, the adapters moved the output by %.3g\n",
                name.c_str(), kernels.size(), diff, moved);
    EXPECT_LE(diff, 1e-4 * std::max(1.0, scale)) << name;
    EXPECT_GT(moved, 100 * diff) << name << ": the adapters must change the output for the check to mean anything";
  }
}

// An adapter file made for another model (the PEFT fixture's GPT-2 has d=64; gpt2_hf d=32).
TEST(LoraInit, AdapterFileForAnotherModelIsRefused) {
  auto g = ImportOnnxFile(kZoo + "gpt2_hf.onnx");
  ASSERT_TRUE(g.ok());
  pb::TrainConfig c;
  c.set_class_axis(-1);
  c.set_lora_rank(4);
  c.set_lora_init(kLoraDir + "gpt2_lora.adapter.onnx");
  auto recipe = ResolveTrainingRecipe(c, **g, Bf16Cpu());
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  ASSERT_TRUE(PrepareModel(**g, *recipe).ok());
  auto step = BuildTrainingStep(**g, *recipe);
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.status().message().find("an adapter file for another model"), std::string::npos) << step.status();
  EXPECT_NE(step.status().message().find("gpt2_lora.adapter.onnx"), std::string::npos) << step.status();

  pb::TrainConfig no_rank;
  no_rank.set_lora_targets("x");
  auto refused = ResolveTrainingRecipe(no_rank, **g, Bf16Cpu());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("lora_rank is 0"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace mixtrain
