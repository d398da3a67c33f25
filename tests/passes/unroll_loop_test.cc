// The unroll_loop pass: ONNX Loop and Scan nodes written out iteration by iteration compute what
// ONNX's own backend cases say they compute (libonnx-testdata: Loop, Scan, Range expanded into a
// Loop that reads the enclosing graph), and what hand-written references compute for a
// tf2onnx-style RNN loop (condition from counters, outer-scope reads, a symbolic batch), Scan's
// axes and directions, and a loop nested in a loop; gradients through the unrolled graph match
// central differences. Loops it cannot unroll stay, and the reason is named. Import makes a
// body's outer-scope reads inputs of the node, so canonicalization keeps what they read and the
// exported model still passes ONNX's checker; a Trainer's exported model keeps its Loop.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/host_evaluator.h"
#include "kernels/backend.h"
#include "gtest/gtest.h"
#include "graph/external_data.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "onnx/defs/parser.h"
#include "passes/canonicalize.h"
#include "passes/inference.h"
#include "passes/unroll_loop.h"
#include "proto/mixtrain_pb.h"
#include "runtime/npy.h"
#include "runtime/trainer.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using inference_test::Count;
using inference_test::RunGraph;

onnx::ModelProto ParseModel(const std::string& text) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text.c_str());
  EXPECT_TRUE(st.IsOK()) << st.ErrorMessage();
  return m;
}

std::unique_ptr<Graph> Import(const onnx::ModelProto& m) {
  auto g = ImportOnnxModel(m, "");
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : std::make_unique<Graph>();
}

// Canonicalization, then unroll_loop, as the pipeline runs them; returns whether a loop went.
bool Unroll(Graph& g, const TrainableSelection& params = {}) {
  CanonicalizeOptions co;
  co.evaluator = &EvaluateOnHost;
  co.params = params;
  auto c = MakeCanonicalizePass(co)->Run(g);
  EXPECT_TRUE(c.ok()) << c.status();
  auto u = MakeUnrollLoopPass(params, &EvaluateOnHost)->Run(g);
  EXPECT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(Verify(g).ok()) << Verify(g);
  return u.ok() && *u;
}

int Loops(const Graph& g) { return Count(g, "Loop") + Count(g, "Scan"); }

Tensor Floats(std::vector<int64_t> dims, const std::vector<float>& v) {
  return Tensor::FromVector<float>(DType::kF32, std::move(dims), v);
}

void ExpectNear(const Tensor& got, const std::vector<int64_t>& dims, const std::vector<float>& want, double tol = 1e-5) {
  ASSERT_EQ(got.dims(), dims);
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(got.GetDouble(i), want[i], tol) << "element " << i;
}

// --- ONNX's backend cases ------------------------------------------------------------------------

const char kNodeDir[] = "/usr/share/libonnx-testdata/data/node/";

Tensor ReadPb(const fs::path& p, std::string* name) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::TensorProto t;
  EXPECT_TRUE(t.ParseFromString(bytes.str())) << p;
  *name = t.name();
  auto r = TensorFromProto(t, "", p.string());
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Tensor();
}

// Case `name`: the graph inputs listed in `constant` become initializers holding the case's
// values (a trip count known after canonicalization), the rest are fed; every value is a constant
// (freeze all), the loop is unrolled and the outputs must be the case's.
void RunBackendCase(const std::string& name, const std::vector<std::string>& constant) {
  SCOPED_TRACE(name);
  const fs::path dir = fs::path(kNodeDir) / name;
  ASSERT_TRUE(fs::exists(dir / "model.onnx")) << dir << " (install libonnx-testdata)";
  onnx::ModelProto m;
  {
    std::ifstream in(dir / "model.onnx", std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    ASSERT_TRUE(m.ParseFromString(bytes.str()));
  }
  std::map<std::string, Tensor> feeds;
  for (int i = 0; fs::exists(dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb")); ++i) {
    std::string pb_name;
    Tensor t = ReadPb(dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb"), &pb_name);
    const std::string input = m.graph().input(i).name();
    if (std::find(constant.begin(), constant.end(), input) == constant.end()) {
      feeds[input] = t;
      continue;
    }
    onnx::TensorProto* init = m.mutable_graph()->add_initializer();
    TensorToProto(t, init);
    init->set_name(input);
  }
  auto* inputs = m.mutable_graph()->mutable_input();
  for (int i = inputs->size() - 1; i >= 0; --i)
    if (std::find(constant.begin(), constant.end(), inputs->Get(i).name()) != constant.end()) inputs->DeleteSubrange(i, 1);
  std::unique_ptr<Graph> g = Import(m);
  ASSERT_EQ(Loops(*g), 1);
  ASSERT_TRUE(Unroll(*g, {"", ".*"}));
  EXPECT_EQ(Loops(*g), 0);
  std::vector<Tensor> got = RunGraph(*g, feeds);
  ASSERT_EQ(got.size(), static_cast<size_t>(m.graph().output_size()));
  for (size_t k = 0; k < got.size(); ++k) {
    std::string pb_name;
    Tensor want = ReadPb(dir / "test_data_set_0" / ("output_" + std::to_string(k) + ".pb"), &pb_name);
    ASSERT_EQ(got[k].dims(), want.dims()) << "output " << k;
    for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got[k].GetDouble(i), want.GetDouble(i), 1e-6) << k;
  }
}

TEST(UnrollLoop, OnnxBackendCases) {
  RunBackendCase("test_loop11", {"trip_count", "cond"});  // scan output of a Slice per iteration
  RunBackendCase("test_scan9_sum", {});                   // states and scan outputs, fed inputs
  // Range written as a Loop whose body reads `delta` from the enclosing graph; its trip count is
  // Ceil((limit - start) / delta), folded by canonicalization.
  RunBackendCase("test_range_float_type_positive_delta_expanded", {"start", "limit", "delta"});
  RunBackendCase("test_range_int32_type_negative_delta_expanded", {"start", "limit", "delta"});
}

// --- a Keras RNN as tf2onnx writes it --------------------------------------------------------------

// tf2onnx's form of keras.layers.SimpleRNN: the time-major input, a zero state shaped to the
// batch, and a while loop over (time, state, kernel) whose condition is `i < T && t + 1 < T`
// (floats, as tf2onnx casts them), reading the input, the recurrent kernel and the bias from the
// enclosing graph; every state is a scan output. x: [N, T, 3], H = 2.
const char kRnnLoop[] = R"(
<ir_version: 8, opset_import: ["" : 13]>
rnn (float[N,4,3] x) => (float[N,2] h, float[4,N,2] hs)
<float[3,2] w = {0.5, -0.3, 0.2, 0.8, -0.6, 0.1}, float[2,2] r = {0.4, -0.2, 0.3, 0.6},
 float[2] b = {0.1, -0.2}, int64 m = {4}, int64 t0 = {0}, bool c0 = {1},
 int64[1] hidden = {2}, int64[1] s0 = {0}, int64[1] s1 = {1}>
{
  xt = Transpose <perm = [1, 0, 2]> (x)
  shape = Shape (x)
  n = Slice (shape, s0, s1)
  hshape = Concat <axis = 0> (n, hidden)
  h0 = ConstantOfShape (hshape)
  tf, h, wf, hs = Loop (m, c0, t0, h0, w) <body = while (int64 i, bool cin, int64 t, float[N,2] hin, float[3,2] kin) => (bool cout, int64 t1, float[N,2] hout, float[3,2] kout, float[N,2] s) {
    one = Constant <value = int64 {1}> ()
    limit = Constant <value = float {4}> ()
    t1 = Add (t, one)
    fi = Cast <to = 1> (i)
    ft = Cast <to = 1> (t1)
    ci = Less (fi, limit)
    ct = Less (ft, limit)
    cout = And (ci, ct)
    xi = Gather (xt, t)
    a = MatMul (xi, kin)
    c = MatMul (hin, r)
    d = Add (a, c)
    e = Add (d, b)
    hout = Tanh (e)
    kout = Identity (kin)
    s = Identity (hout)
  }>
}
)";

// h_t = tanh(x_t W + h_{t-1} R + b) over the 4 steps of x [n, 4, 3]; returns every state.
std::vector<std::vector<float>> RnnReference(const std::vector<float>& x, int64_t n) {
  const float w[3][2] = {{0.5f, -0.3f}, {0.2f, 0.8f}, {-0.6f, 0.1f}}, r[2][2] = {{0.4f, -0.2f}, {0.3f, 0.6f}};
  const float b[2] = {0.1f, -0.2f};
  std::vector<float> h(n * 2, 0.0f);
  std::vector<std::vector<float>> states;
  for (int64_t t = 0; t < 4; ++t) {
    std::vector<float> next(n * 2);
    for (int64_t k = 0; k < n; ++k)
      for (int j = 0; j < 2; ++j) {
        double a = b[j];
        for (int i = 0; i < 3; ++i) a += x[(k * 4 + t) * 3 + i] * w[i][j];
        for (int i = 0; i < 2; ++i) a += h[k * 2 + i] * r[i][j];
        next[k * 2 + j] = static_cast<float>(std::tanh(a));
      }
    h = next;
    states.push_back(h);
  }
  return states;
}

TEST(UnrollLoop, Tf2OnnxRnnLoopComputesTheRecurrence) {
  std::unique_ptr<Graph> g = Import(ParseModel(kRnnLoop));
  // The body's reads of xt, r and b are inputs of the node now.
  Node* loop = inference_test::Find(*g, "Loop");
  ASSERT_NE(loop, nullptr);
  ASSERT_EQ(loop->num_inputs(), 8u);
  ASSERT_TRUE(Unroll(*g));
  EXPECT_EQ(Loops(*g), 0);
  // Counters and the condition were evaluated away; what is left computes on data, and the
  // per-step Gathers of the sequence at the now constant time indices became one Split.
  EXPECT_EQ(Count(*g, "Less") + Count(*g, "And") + Count(*g, "Cast"), 0);
  EXPECT_EQ(Count(*g, "Gather"), 0);
  EXPECT_EQ(Count(*g, "Split"), 1);
  EXPECT_EQ(Count(*g, "Tanh"), 4);
  // w, r and b still train: nothing read them into a constant.
  for (const char* p : {"w", "r", "b"}) EXPECT_NE(g->FindValue(p), nullptr) << p;
  for (int64_t n : {1, 3}) {
    SCOPED_TRACE(n);
    std::vector<float> x = gradcheck::Random(n * 12, 5);
    std::vector<Tensor> got = RunGraph(*g, {{"x", Floats({n, 4, 3}, x)}});
    ASSERT_EQ(got.size(), 2u);
    std::vector<std::vector<float>> want = RnnReference(x, n);
    ExpectNear(got[0], {n, 2}, want.back());
    std::vector<float> stacked;
    for (const auto& s : want) stacked.insert(stacked.end(), s.begin(), s.end());
    ExpectNear(got[1], {4, n, 2}, stacked);
  }
}

TEST(UnrollLoop, GradientsMatchCentralDifferences) {
  std::unique_ptr<Graph> imported = Import(ParseModel(kRnnLoop));
  ASSERT_TRUE(Unroll(*imported));
  gradcheck::G b;
  b.graph() = std::move(*imported);
  Graph& g = b.graph();
  // A fixed batch for the weighted-sum loss; every state and the final one reach it.
  Value* x = g.FindValue("x");
  x->shape = Shape({Dim(2), Dim(4), Dim(3)});
  ASSERT_TRUE(InferShapes(g).ok());
  std::vector<Value*> outs = g.outputs();
  g.mutable_outputs().clear();
  gradcheck::AppendWeightedSumLoss(b, outs);
  if (HasFatalFailure()) return;
  gradcheck::CheckGraph(g, {{"x", Floats({2, 4, 3}, gradcheck::Random(24, 9))}}, 1e-2f, 2e-3f);
}

// --- Scan ----------------------------------------------------------------------------------------

// a [2, 4, 3] scanned along axis 1 forward, b [4, 2] along axis 0 backwards; state s [2, 3]:
// s += a_t * b_t[:, None]; y_t = tanh(s) stacked along axis 1, z_t = sum(s, 1) + b_t stacked along
// axis 0 by prepending.
const char kScan[] = R"(
<ir_version: 8, opset_import: ["" : 13]>
scan (float[2,4,3] a, float[4,2] bseq) => (float[2,3] s, float[2,4,3] ys, float[4,2] zs)
<float[2,3] s0 = {0, 0, 0, 0, 0, 0}>
{
  s, ys, zs = Scan (s0, a, bseq) <num_scan_inputs = 2, scan_input_axes = [1, 0], scan_input_directions = [0, 1], scan_output_axes = [1, 0], scan_output_directions = [0, 1], body = step (float[2,3] sin, float[2,3] at, float[2] bt) => (float[2,3] sout, float[2,3] y, float[2] z) {
    ax = Constant <value = int64[1] {1}> ()
    bu = Unsqueeze (bt, ax)
    p = Mul (at, bu)
    sout = Add (sin, p)
    y = Tanh (sout)
    rs = ReduceSum <keepdims = 0> (sout, ax)
    z = Add (rs, bt)
  }>
}
)";

TEST(UnrollLoop, ScanAxesAndDirections) {
  std::unique_ptr<Graph> g = Import(ParseModel(kScan));
  ASSERT_TRUE(Unroll(*g));
  EXPECT_EQ(Loops(*g), 0);
  const std::vector<float> a = gradcheck::Random(24, 3), bs = gradcheck::Random(8, 4);
  std::vector<Tensor> got = RunGraph(*g, {{"a", Floats({2, 4, 3}, a)}, {"bseq", Floats({4, 2}, bs)}});
  ASSERT_EQ(got.size(), 3u);
  std::vector<float> s(6, 0.0f), ys(24), zs(8);
  for (int t = 0; t < 4; ++t) {
    const float* bt = &bs[(3 - t) * 2];  // reversed
    for (int k = 0; k < 2; ++k) {
      float sum = 0;
      for (int j = 0; j < 3; ++j) {
        s[k * 3 + j] += a[(k * 4 + t) * 3 + j] * bt[k];
        ys[(k * 4 + t) * 3 + j] = std::tanh(s[k * 3 + j]);
        sum += s[k * 3 + j];
      }
      zs[(3 - t) * 2 + k] = sum + bt[k];  // prepended
    }
  }
  ExpectNear(got[0], {2, 3}, s);
  ExpectNear(got[1], {2, 4, 3}, ys);
  ExpectNear(got[2], {4, 2}, zs);
}

// --- a loop in a loop ----------------------------------------------------------------------------

// acc <- f(acc) three times, f(a) = v after v <- v * x + a twice from v = a: the inner loop reads
// the outer body's `acc` and the graph's `x`.
const char kNested[] = R"(
<ir_version: 8, opset_import: ["" : 13]>
nested (float[2] x) => (float[2] out)
<int64 m = {3}>
{
  out = Loop (m, , x) <body = outer (int64 i, bool c, float[2] acc) => (bool cout, float[2] next) {
    cout = Identity (c)
    m2 = Constant <value = int64 {2}> ()
    next = Loop (m2, , acc) <body = inner (int64 j, bool c2, float[2] v) => (bool c2out, float[2] vout) {
      c2out = Identity (c2)
      p = Mul (v, x)
      vout = Add (p, acc)
    }>
  }>
}
)";

TEST(UnrollLoop, LoopInALoop) {
  std::unique_ptr<Graph> g = Import(ParseModel(kNested));
  ASSERT_TRUE(Unroll(*g));
  EXPECT_EQ(Loops(*g), 0);
  EXPECT_EQ(Count(*g, "Mul"), 6);
  const std::vector<float> x = {0.7f, -1.3f};
  std::vector<Tensor> got = RunGraph(*g, {{"x", Floats({2}, x)}});
  ASSERT_EQ(got.size(), 1u);
  std::vector<float> acc = x;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> v = acc;
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) v[k] = v[k] * x[k] + acc[k];
    acc = v;
  }
  ExpectNear(got[0], {2}, acc);
}

// --- import, canonicalization, export --------------------------------------------------------------

// The body's read of xt is the only use of the Transpose: canonicalization's dead-code removal
// must keep it, and the exported model must pass ONNX's checker and import again.
TEST(UnrollLoop, OuterReadsAreInputsOfTheNode) {
  std::unique_ptr<Graph> g = Import(ParseModel(kRnnLoop));
  auto c = MakeCanonicalizePass({.evaluator = &EvaluateOnHost})->Run(*g);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(Count(*g, "Transpose"), 1);
  Node* loop = inference_test::Find(*g, "Loop");
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->input(5), inference_test::Find(*g, "Transpose")->output(0));
  onnx::ModelProto out = ExportOnnx(*g);
  absl::Status checked = CheckOnnxModel(out);
  EXPECT_TRUE(checked.ok()) << checked;
  std::unique_ptr<Graph> again = Import(out);
  ASSERT_EQ(Loops(*again), 1);
  ASSERT_TRUE(Unroll(*again));
  const std::vector<float> x = gradcheck::Random(12, 5);
  std::vector<Tensor> got = RunGraph(*again, {{"x", Floats({1, 4, 3}, x)}});
  ASSERT_EQ(got.size(), 2u);
  ExpectNear(got[0], {1, 2}, RnnReference(x, 1).back());
}

// `run` and InferenceSession: the inference pipeline unrolls what no kernel runs.
TEST(UnrollLoop, InferencePipelineUnrolls) {
  std::unique_ptr<Graph> g = Import(ParseModel(kRnnLoop));
  ASSERT_TRUE(OptimizeForInference(*g, CpuBackend().target()).ok());
  EXPECT_EQ(Loops(*g), 0);
  const std::vector<float> x = gradcheck::Random(24, 6);
  std::vector<Tensor> got = RunGraph(*g, {{"x", Floats({2, 4, 3}, x)}});
  ASSERT_EQ(got.size(), 2u);
  ExpectNear(got[0], {2, 2}, RnnReference(x, 2).back());
  // optimize=false (`run --no-optimize`) and check's plan of an exported file import the same way.
  std::unique_ptr<Graph> plain = Import(ParseModel(kRnnLoop));
  ASSERT_TRUE(ImportForInference(*plain, CpuBackend().target()).ok());
  EXPECT_EQ(Loops(*plain), 0);
  got = RunGraph(*plain, {{"x", Floats({2, 4, 3}, x)}});
  ASSERT_EQ(got.size(), 2u);
  ExpectNear(got[0], {2, 2}, RnnReference(x, 2).back());
}

// --- through the Trainer ---------------------------------------------------------------------------

double MeanCrossEntropy(const Tensor& logits, const Tensor& labels) {
  const int64_t n = logits.dims()[0], k = logits.dims()[1];
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, z = 0;
    for (int64_t j = 0; j < k; ++j) mx = std::max(mx, logits.GetDouble(i * k + j));
    for (int64_t j = 0; j < k; ++j) z += std::exp(logits.GetDouble(i * k + j) - mx);
    sum += std::log(z) + mx - logits.GetDouble(i * k + labels.GetInt(i));
  }
  return sum / n;
}

// tf2onnx's Keras GRU (a Loop): the step and the evaluation unroll it; the exported model keeps
// the Loop with the trained weights, passes ONNX's checker, and gives the loss Evaluate reports.
TEST(UnrollLoop, TrainerTrainsAndExportsALoopModel) {
  const std::string zoo = std::string(MT_SOURCE_DIR) + "/tests/data/zoo/";
  auto arrays = ReadNpz(zoo + "keras_gru.npz");
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  const std::map<std::string, Tensor> batch = {{"x", arrays->at("x")}, {"labels", arrays->at("labels")}};
  pb::TrainConfig c;
  c.set_loss("cross_entropy");
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::FP32);
  auto t = Trainer::Create(zoo + "keras_gru.onnx", c);
  ASSERT_TRUE(t.ok()) << t.status();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*t)->Step(batch).ok());
  auto eval = (*t)->Evaluate(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  const std::string path = testing::TempDir() + "/keras_gru_trained.onnx";
  ASSERT_TRUE((*t)->ExportInferenceModel(path, DType::kF32).ok());
  auto exported = ImportOnnxFile(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(Loops(**exported), 1);
  absl::Status checked = CheckOnnxModel(ExportOnnx(**exported));
  EXPECT_TRUE(checked.ok()) << checked;
  ASSERT_TRUE(OptimizeForInference(**exported, CpuBackend().target()).ok());
  std::vector<Tensor> logits = RunGraph(**exported, {{"x", batch.at("x")}});
  ASSERT_EQ(logits.size(), 1u);
  EXPECT_NEAR(MeanCrossEntropy(logits[0], batch.at("labels")), eval->loss_sum / eval->examples, 1e-5);
  // Trained: not the initial loss.
  EXPECT_LT(eval->loss_sum / eval->examples, arrays->at("loss").GetDouble(0) - 1e-3);
}

// --- what stays --------------------------------------------------------------------------------

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

// Loops whose iterations are not known here stay; WhyLoopNotUnrolled and autodiff's error say why.
TEST(UnrollLoop, LeavesWhatItCannotUnrollAndSaysWhy) {
  struct Case {
    std::string text, why;
  };
  const std::vector<Case> cases = {
      // The condition depends on the state (data).
      {Replace(kRnnLoop, "cout = And (ci, ct)", "hs0 = ReduceSum <keepdims = 0> (hin)\n    cout = Less (hs0, limit)"),
       "condition ('cout') depends on values computed at run time"},
      // The trip count is fed.
      {Replace(Replace(kRnnLoop, "(float[N,4,3] x)", "(float[N,4,3] x, int64 m)"), "int64 m = {4}, ", ""),
       "trip count M ('m') is not a constant here"},
      // A symbolic sequence length for Scan.
      {Replace(Replace(kScan, "float[2,4,3] a", "float[2,T,3] a"), "float[4,2] bseq", "float[T,2] bseq"),
       "is not static"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    std::unique_ptr<Graph> g = Import(ParseModel(c.text));
    EXPECT_FALSE(Unroll(*g));
    ASSERT_EQ(Loops(*g), 1);
    Node* n = nullptr;
    for (const auto& up : g->nodes())
      if (IsLoopOp(*up)) n = up.get();
    ASSERT_TRUE(InferShapes(*g).ok());
    EXPECT_NE(WhyLoopNotUnrolled(*g, *n, &EvaluateOnHost).find(c.why), std::string::npos)
        << WhyLoopNotUnrolled(*g, *n, &EvaluateOnHost);
  }
  // Autodiff names the reason when such a loop needs a gradient.
  gradcheck::G b;
  b.graph() = std::move(*Import(ParseModel(cases[0].text)));
  Graph& g = b.graph();
  g.FindValue("x")->shape = Shape({Dim(2), Dim(4), Dim(3)});
  g.outputs()[0]->shape = Shape({Dim(2), Dim(2)});  // Loop has no shape rule
  std::vector<Value*> outs = {g.outputs()[0]};
  g.mutable_outputs().clear();
  gradcheck::AppendWeightedSumLoss(b, outs);
  if (HasFatalFailure()) return;
  auto st = MakeAutodiffPass({})->Run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("unroll_loop"), std::string::npos) << st.status().message();
  EXPECT_NE(st.status().message().find("depends on values computed at run time"), std::string::npos)
      << st.status().message();
}

}  // namespace
}  // namespace mixtrain
