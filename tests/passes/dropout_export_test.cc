// Dropout as torch's exporters write it in training mode (tests/data/zoo/, make_zoo.py's train=True
// exports): TorchScript's training=TRAINING Dropout nodes with Constant ratio and training_mode,
// the dynamo exporter's Dropout nodes (native_dropout) and its bernoulli mask for an in-place
// nn.Dropout (RandomUniformLike < q, cast, / q, * x), which canonicalization rewrites into
// Dropout. Each export's training graph is run many times with probes around every dropout: a
// zero parameter added to its input and one to its output, so autodiff hands back dL/dx and
// dL/dy. Checked, per dropout and run: every output is 0 or x / (1 - p); the gradient is
// dL/dy * mask / (1 - p); over the runs the dropped fraction is p within 5 binomial standard
// deviations; masks differ between runs and between two dropouts of one shape. The trainer then
// trains the export, and its evaluation and export run without dropout.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/host_evaluator.h"
#include "gtest/gtest.h"
#include "graph/onnx_import.h"
#include "passes/canonicalize.h"
#include "passes/passes.h"
#include "proto/mixtrain_pb.h"
#include "runtime/npy.h"
#include "runtime/session.h"
#include "runtime/trainer.h"

namespace mixtrain {
namespace {

const std::string kZoo = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/";

struct Export {
  const char* name;
  double p;         // the module's dropout rate (make_zoo.py)
  int dropouts;     // nn.Dropout modules on the path to the loss
  bool has_bn;      // train-mode BatchNorm: evaluation uses running statistics
};

const Export kExports[] = {
    {"dropout_mlp_ts", 0.3, 2, false},        // TorchScript: Dropout nodes
    {"dropout_mlp_dynamo", 0.3, 2, false},    // dynamo: Dropout nodes (native_dropout)
    {"mobilenetv3_tv_train", 0.2, 1, true},   // dynamo: bernoulli mask (in-place nn.Dropout)
    {"mobilenetv3_tv_train_ts", 0.2, 1, true},
};

std::unique_ptr<Graph> Canonicalized(const std::string& path) {
  auto g = ImportOnnxFile(path);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  PassManager pm;
  pm.Add(MakeCanonicalizePass({.evaluator = &EvaluateOnHost}));
  absl::Status st = pm.Run(**g);
  EXPECT_TRUE(st.ok()) << st;
  return *std::move(g);
}

Tensor Zeros(const Value& v) {
  std::vector<int64_t> dims;
  for (const Dim& d : v.shape.dims) dims.push_back(d.value);
  Tensor t(v.dtype, dims);
  std::memset(t.data_as<uint8_t>(), 0, t.nbytes());
  return t;
}

// What the probes around one dropout expose: its input and output, and the gradients of the zero
// parameters added to them (dL/dx and dL/dy).
struct Probe {
  std::string node, x, y, dx, dy;
  double p = 0;
};

// Adds the probes around every Dropout of `g` (fully known shapes).
std::vector<Probe> AddProbes(Graph& g) {
  std::vector<Node*> drops;
  for (const auto& n : g.nodes())
    if (n->op_type() == "Dropout") drops.push_back(n.get());
  std::vector<Probe> probes;
  for (Node* d : drops) {
    Probe pr;
    pr.node = d->name();
    EXPECT_TRUE(d->input(1) != nullptr && d->input(1)->is_initializer()) << d->name() << ": ratio not a constant";
    if (d->input(1) == nullptr || !d->input(1)->is_initializer()) continue;
    pr.p = d->input(1)->initializer->GetDouble(0);
    Value* x = d->input(0);
    Value* y = d->output(0);
    EXPECT_TRUE(x->shape.fully_known()) << d->name();
    Value* px = g.AddInitializer(g.UniqueName("probe/dx"), Zeros(*x));
    Node* in = g.AddNode("Add", {x, px}, 1, g.UniqueName("probe/in"));
    g.SetInput(d, 0, in->output(0));
    Value* py = g.AddInitializer(g.UniqueName("probe/dy"), Zeros(*y));
    const std::vector<Node*> readers = y->consumers;
    Node* out = g.AddNode("Add", {y, py}, 1, g.UniqueName("probe/out"));
    for (Node* r : readers)
      for (size_t i = 0; i < r->num_inputs(); ++i)
        if (r->input(i) == y) g.SetInput(r, i, out->output(0));
    g.AddOutput(in->output(0));
    g.AddOutput(y);
    pr.x = in->output(0)->name;
    pr.y = y->name;
    pr.dx = std::string(kGradPrefix) + px->name;
    pr.dy = std::string(kGradPrefix) + py->name;
    probes.push_back(pr);
  }
  return probes;
}

std::map<std::string, Tensor> Batch(const std::string& name) {
  auto z = ReadNpz(kZoo + name + ".npz");
  EXPECT_TRUE(z.ok()) << z.status();
  std::map<std::string, Tensor> batch;
  if (!z.ok()) return batch;
  for (auto& [k, v] : *z)
    if (k.rfind("grad/", 0) != 0 && k != "loss" && k != "adam_losses") batch.emplace(k, v);
  return batch;
}

class DropoutExport : public ::testing::TestWithParam<Export> {};

TEST_P(DropoutExport, DropsAtItsRateAndDifferentiatesThroughItsMask) {
  const Export& e = GetParam();
  std::unique_ptr<Graph> g = Canonicalized(kZoo + e.name + ".onnx");
  ASSERT_NE(g, nullptr);
  const std::string logits = g->outputs()[0]->name;
  std::vector<Probe> probes = AddProbes(*g);
  ASSERT_EQ(static_cast<int>(probes.size()), e.dropouts) << "Dropout nodes after canonicalization";
  GradientGraphOptions opt;
  opt.autodiff.evaluator = &EvaluateOnHost;
  opt.loss.output = logits;
  opt.autodiff.trainable = "probe/.*";
  auto grad = BuildGradientGraph(*g, opt);
  ASSERT_TRUE(grad.ok()) << grad.status();
  auto session = Session::Create(**grad);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<std::string> fetch;
  for (const Probe& pr : probes) fetch.insert(fetch.end(), {pr.x, pr.y, pr.dx, pr.dy});
  const std::map<std::string, Tensor> batch = Batch(e.name);

  // Runs until every dropout has seen kSamples non-zero inputs (5 sigma is then 0.045 at p = 0.3).
  constexpr int64_t kSamples = 2500;
  constexpr int kMaxRuns = 60;
  std::vector<int64_t> dropped(probes.size(), 0), seen(probes.size(), 0);
  std::vector<std::vector<uint8_t>> first_masks(probes.size());
  bool differs_between_runs = false;
  for (int run = 0; run < kMaxRuns && *std::min_element(seen.begin(), seen.end()) < kSamples; ++run) {
    auto out = (*session)->Run(batch, fetch);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<std::vector<uint8_t>> masks(probes.size());
    for (size_t k = 0; k < probes.size(); ++k) {
      const Probe& pr = probes[k];
      EXPECT_NEAR(pr.p, e.p, 1e-6) << pr.node << ": the ratio the exporter wrote";
      const Tensor &x = (*out)[4 * k], &y = (*out)[4 * k + 1], &dx = (*out)[4 * k + 2], &dy = (*out)[4 * k + 3];
      ASSERT_EQ(x.numel(), y.numel());
      const double scale = 1.0 / (1.0 - pr.p);
      int bad_value = 0, bad_grad = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double xi = x.GetDouble(i), yi = y.GetDouble(i);
        const bool kept = yi != 0;
        masks[k].push_back(kept);
        if (kept && std::fabs(yi - xi * scale) > 1e-6 * std::fabs(xi * scale)) ++bad_value;
        if (xi == 0) continue;  // dropped or not, the output is 0
        ++seen[k];
        dropped[k] += !kept;
        const double want = kept ? dy.GetDouble(i) * scale : 0.0;
        if (std::fabs(dx.GetDouble(i) - want) > 1e-6 * (std::fabs(want) + 1e-6)) ++bad_grad;
      }
      EXPECT_EQ(bad_value, 0) << pr.node << " run " << run << ": outputs neither 0 nor x / (1 - p)";
      EXPECT_EQ(bad_grad, 0) << pr.node << " run " << run << ": dL/dx is not dL/dy * mask / (1 - p)";
      if (run == 0) first_masks[k] = masks[k];
      else differs_between_runs |= masks[k] != first_masks[k];
    }
    // Two dropouts of one shape draw their own masks (each node has a seed of its own).
    for (size_t a = 0; a < probes.size(); ++a)
      for (size_t b = a + 1; b < probes.size(); ++b)
        if (masks[a].size() == masks[b].size())
          EXPECT_NE(masks[a], masks[b]) << probes[a].node << " and " << probes[b].node << " run " << run;
  }
  EXPECT_TRUE(differs_between_runs) << "every run drew the same masks";
  for (size_t k = 0; k < probes.size(); ++k) {
    ASSERT_GE(seen[k], kSamples) << probes[k].node << ": too few non-zero inputs to judge the rate";
    const double f = static_cast<double>(dropped[k]) / static_cast<double>(seen[k]);
    const double sigma = std::sqrt(e.p * (1 - e.p) / static_cast<double>(seen[k]));
    EXPECT_NEAR(f, e.p, 5 * sigma) << probes[k].node << ": dropped " << dropped[k] << " of " << seen[k];
  }
}

// The trainer trains the export with its dropout; evaluation and the exported model drop nothing:
// without BatchNorm, evaluation before any step is the framework's loss at p = 0 (make_zoo.py's
// reference), and every evaluation of the same weights gives the same loss.
TEST_P(DropoutExport, TrainsAndEvaluatesWithoutDropout) {
  const Export& e = GetParam();
  pb::TrainConfig c;
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::FP32);
  auto t = Trainer::Create(kZoo + e.name + ".onnx", c);
  ASSERT_TRUE(t.ok()) << t.status();
  std::map<std::string, Tensor> batch = Batch(e.name);
  auto ref = ReadNpz(kZoo + std::string(e.name) + ".npz");
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto before = (*t)->Evaluate(batch);
  ASSERT_TRUE(before.ok()) << before.status();
  auto again = (*t)->Evaluate(batch);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(before->loss_sum, again->loss_sum) << "evaluation drew dropout masks";
  if (!e.has_bn) {
    const double want = ref->at("loss").GetDouble(0);
    EXPECT_NEAR(before->loss_sum / before->examples, want, 1e-5 * std::max(1.0, std::fabs(want)));
  }
  std::set<float> losses;
  for (int step = 0; step < 3; ++step) {
    auto r = (*t)->Step(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(std::isfinite(r->loss));
    EXPECT_FALSE(r->skipped);
    losses.insert(r->loss);
  }
  EXPECT_GT(losses.size(), 1u);
  const std::string path = ::testing::TempDir() + "/" + e.name + "_trained.onnx";
  ASSERT_TRUE((*t)->ExportInferenceModel(path).ok());
  auto exported = ImportOnnxFile(path);
  ASSERT_TRUE(exported.ok()) << exported.status();
  for (const auto& n : (*exported)->nodes())
    if (n->op_type() == "Dropout") EXPECT_EQ(n->input(2), nullptr) << n->name() << " keeps training_mode";
  for (const auto& n : (*exported)->nodes()) EXPECT_NE(n->op_type(), "RandomUniformLike");
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Zoo, DropoutExport, ::testing::ValuesIn(kExports),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mixtrain
