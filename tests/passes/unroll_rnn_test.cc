// The unroll_rnn pass: RNN, GRU and LSTM nodes written out step by step compute what the
// recurrent kernels compute (Y, Y_h, Y_c; forward, reverse, bidirectional; both layouts; biases,
// initial states, peepholes, clip, GRU's linear_before_reset both ways; a symbolic batch), and
// autodiff's gradients through the unrolled graph match central differences. Nodes it cannot
// unroll stay, and autodiff's error then says why.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/shape_inference.h"
#include "passes/parameters.h"
#include "passes/pass_registry.h"
#include "passes/training.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using inference_test::Count;
using A = Attribute;

constexpr int64_t kT = 4, kI = 3, kH = 2;

struct Case {
  std::string op = "LSTM";
  std::string direction = "forward";
  bool bias = true, initial = false, peepholes = false, clip = false, batch_major = false;
  bool linear_before_reset = false;
  std::string activation;  // RNN only: "" = default Tanh
  Dim batch = Dim::Symbol("N");
  int64_t seq = kT;
};

std::string Name(const Case& c) {
  return c.op + "/" + c.direction + (c.bias ? "/bias" : "") + (c.initial ? "/initial" : "") +
         (c.peepholes ? "/peepholes" : "") + (c.clip ? "/clip" : "") + (c.batch_major ? "/layout1" : "") +
         (c.linear_before_reset ? "/lbr" : "") + (c.activation.empty() ? "" : "/" + c.activation);
}

// X [T, N, I] (or [N, T, I]) through one recurrent node with every output a graph output.
// Weights are parameters ("w", "r", "b", "h0", "c0", "p"), so the gradient checks cover them.
std::vector<Value*> Build(G& b, const Case& c) {
  Graph& g = b.graph();
  const int gates = c.op == "LSTM" ? 4 : c.op == "GRU" ? 3 : 1;
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1;
  const Dim n = c.batch;
  Value* x = g.AddValue("x", DType::kF32, c.batch_major ? Shape({n, Dim(c.seq), Dim(kI)}) : Shape({Dim(c.seq), n, Dim(kI)}));
  g.AddInput(x);
  std::vector<Value*> ins = {x, b.Param("w", {dirs, gates * kH, kI}, 11), b.Param("r", {dirs, gates * kH, kH}, 12)};
  ins.push_back(c.bias ? b.Param("b", {dirs, 2 * gates * kH}, 13) : nullptr);
  ins.push_back(nullptr);  // sequence_lens
  if (c.initial) {
    // With a symbolic batch the states are graph inputs; with a number, parameters (the
    // gradient checks cover them).
    const Shape s = c.batch_major ? Shape({n, Dim(dirs), Dim(kH)}) : Shape({Dim(dirs), n, Dim(kH)});
    for (const char* name : {"h0", "c0"}) {
      if (std::string(name) == "c0" && c.op != "LSTM") break;
      if (n.known()) {
        ins.push_back(b.Param(name, s.sizes(), name[0] == 'h' ? 15 : 16));
      } else {
        Value* v = g.AddValue(name, DType::kF32, s);
        g.AddInput(v);
        ins.push_back(v);
      }
    }
  } else {
    ins.push_back(nullptr);
    if (c.op == "LSTM") ins.push_back(nullptr);
  }
  if (c.op == "LSTM" && c.peepholes) ins.push_back(b.Param("p", {dirs, 3 * kH}, 14));
  while (ins.back() == nullptr) ins.pop_back();
  std::vector<A> attrs = {A::Int("hidden_size", kH), A::String("direction", c.direction)};
  if (c.clip) attrs.push_back(A::Float("clip", 0.6f));
  if (c.batch_major) attrs.push_back(A::Int("layout", 1));
  if (c.linear_before_reset) attrs.push_back(A::Int("linear_before_reset", 1));
  if (!c.activation.empty()) {
    A acts;
    acts.name = "activations";
    acts.kind = A::Kind::kStrings;
    acts.strings.assign(dirs, c.activation);
    attrs.push_back(acts);
  }
  std::vector<Value*> outs = b.Op(c.op, ins, attrs, c.op == "LSTM" ? 3 : 2);
  for (Value* o : outs) g.AddOutput(o);
  return outs;
}

std::vector<Case> Cases() {
  std::vector<Case> cs;
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      Case c;
      c.op = op;
      c.direction = dir;
      cs.push_back(c);
      c.initial = true;
      c.batch_major = true;
      cs.push_back(c);
      c.bias = false;
      c.batch_major = false;
      c.clip = true;
      c.peepholes = c.op == "LSTM";
      c.linear_before_reset = c.op == "GRU";
      c.activation = c.op == "RNN" ? "Relu" : "";
      cs.push_back(c);
    }
  Case lbr;  // torch's GRU: linear_before_reset, biases, no initial state
  lbr.op = "GRU";
  lbr.linear_before_reset = true;
  cs.push_back(lbr);
  lbr.direction = "bidirectional";
  lbr.initial = true;
  cs.push_back(lbr);
  return cs;
}

std::unique_ptr<Graph> Unrolled(Graph& g, const Case& c, int64_t opset) {
  EXPECT_TRUE(InferShapes(g).ok());
  auto out = inference_test::PassAndCompare(g, "unroll_rnn", DType::kF32, 1e-5);
  EXPECT_EQ(Count(*out, c.op), 0) << Name(c) << " opset " << opset;
  return out;
}

// Every output of every case, at opset 17 (Split's sizes an input) and 12 (an attribute; layout
// needs opset 14), with a symbolic batch run at 3.
TEST(UnrollRnn, ComputesWhatTheKernelsCompute) {
  for (int64_t opset : {17, 12})
    for (const Case& c : Cases()) {
      if (c.batch_major && opset < 14) continue;
      SCOPED_TRACE(Name(c) + " opset " + std::to_string(opset));
      G b(opset);
      Build(b, c);
      auto out = Unrolled(b.graph(), c, opset);
      const int64_t recurrent = (c.initial ? kT : kT - 1) * (c.op == "GRU" && !c.linear_before_reset ? 2 : 1);
      EXPECT_EQ(Count(*out, "MatMul"), (c.direction == "bidirectional" ? 2 : 1) * (1 + recurrent))
          << "one product of the whole sequence with W per direction, one with R per step "
             "(none at a zero initial state), and GRU's reset-gated second one";
    }
}

// Builds case c at batch 2, unrolls it, puts the weighted-sum loss on the outputs `which` picks
// (all when empty) and checks every parameter's gradient against central differences with step h.
void CheckUnrolledGradients(const Case& base, std::vector<int> which, float h) {
  Case c = base;
  c.batch = Dim(2);
  G b(17);
  std::vector<Value*> outs = Build(b, c);
  Graph& g = b.graph();
  ASSERT_TRUE(InferShapes(g).ok());
  auto pass = CreatePassByName("unroll_rnn");
  ASSERT_TRUE(pass.ok());
  auto changed = (*pass)->Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_TRUE(*changed);
  auto feeds = inference_test::Feeds(g, 2, -1, 1, 5);
  g.mutable_outputs().clear();
  std::vector<Value*> picked;
  for (int k : which) picked.push_back(outs[k]);
  gradcheck::AppendWeightedSumLoss(b, which.empty() ? outs : picked);
  if (::testing::Test::HasFatalFailure()) return;
  gradcheck::CheckGraph(g, feeds, h, 2e-3f);
}

// Gradients of every parameter (W, R, B, peepholes) and of the initial states, through the
// unrolled graph, against central differences of its loss.
TEST(UnrollRnn, GradientsMatchCentralDifferences) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Name(c));
    // Clip has corners at +-0.6 (Relu one at 0): a step of 1e-2 straddles some of them and its
    // difference quotient is off by up to 0.08 there; 1e-3 straddles none of these inputs.
    CheckUnrolledGradients(c, {}, c.clip ? 1e-3f : 1e-2f);
  }
}

// 40 steps: the gradient reaches every step (the Concat of Y and the Split of the input product
// have more than 32 operands, past which autodiff once cut the gradient).
TEST(UnrollRnn, GradientsThroughFortySteps) {
  for (const char* op : {"LSTM", "GRU"}) {
    Case c;
    c.op = op;
    c.seq = 40;
    c.linear_before_reset = c.op == "GRU";
    SCOPED_TRACE(Name(c));
    CheckUnrolledGradients(c, {0}, 1e-2f);  // Y alone: every step's state
  }
}

// tf2onnx folds a Keras LSTM's weights into the node's W, R, B (no ReadVariableOp in their
// names, which is how tf2onnx models mark variables): they train, before and after unrolling.
TEST(UnrollRnn, Tf2OnnxRecurrentWeightsTrain) {
  G b(13);
  Graph& g = b.graph();
  g.producer_name = "tf2onnx";
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim(kT), Dim(2), Dim(kI)}));
  g.AddInput(x);
  std::vector<Value*> outs = b.Op("LSTM", {x, b.Param("W0__30", {1, 4 * kH, kI}, 1), b.Param("R0__31", {1, 4 * kH, kH}, 2),
                                           b.Param("B0__32", {1, 8 * kH}, 3)},
                                  {A::Int("hidden_size", kH)}, 3);
  Value* k = b.Param("sequential/dense/Cast/ReadVariableOp:0", {kH, 3}, 4);
  Value* y = b.Op1("MatMul", {b.Op1("Reshape", {outs[1], b.Ints({2, kH})}), k});
  Value* folded = b.Param("const_fold_opt__7", {1}, 5);  // an exporter's scalar factor: stays frozen
  g.AddOutput(b.Op1("Mul", {y, folded}));
  ASSERT_TRUE(InferShapes(g).ok());
  auto roles = [&] {
    std::map<std::string, InitializerRole> out;
    for (const auto& [v, c] : ClassifyInitializers(g)) out[v->name] = c.role;
    return out;
  };
  for (bool unrolled : {false, true}) {
    if (unrolled) {
      auto pass = CreatePassByName("unroll_rnn");
      ASSERT_TRUE(pass.ok());
      ASSERT_TRUE((*pass)->Run(g).ok());
      ASSERT_EQ(Count(g, "LSTM"), 0);
    }
    auto r = roles();
    for (const char* w : {"W0__30", "R0__31", "B0__32", "sequential/dense/Cast/ReadVariableOp:0"})
      EXPECT_EQ(r[w], InitializerRole::kParameter) << w << (unrolled ? " after unrolling" : "");
    EXPECT_EQ(r["const_fold_opt__7"], InitializerRole::kConstant);
  }
}

// Case c at batch 2 with B's recurrent half (Rb) zero and `producer` as the exporter, unrolled, with
// the weighted-sum loss on Y_h; returns d loss / d B after checking the unrolled forward against
// the kernel.
std::vector<float> BiasGradient(const Case& base, const std::string& producer) {
  Case c = base;
  c.batch = Dim(2);
  G b(17);
  std::vector<Value*> outs = Build(b, c);
  Graph& g = b.graph();
  g.producer_name = producer;
  Value* bias = g.FindValue("b");
  Tensor t = bias->initializer->Clone();
  const int64_t half = t.numel() / 2;  // one direction
  for (int64_t i = half; i < t.numel(); ++i) t.data_as<float>()[i] = 0.0f;
  g.SetInitializer(bias, t);
  auto unrolled = Unrolled(g, c, 17);  // the forward equals the kernel's (which adds the zero Rb)
  auto feeds = inference_test::Feeds(*unrolled, 2, -1, 1, 5);
  gradcheck::G lb(17);
  lb.graph() = std::move(*unrolled);
  lb.graph().mutable_outputs().clear();
  gradcheck::AppendWeightedSumLoss(lb, {lb.graph().FindValue(outs[1]->name)});
  AutodiffOptions opt;
  opt.freeze = "c_.*";
  auto st = MakeAutodiffPass(opt)->Run(lb.graph());
  EXPECT_TRUE(st.ok()) << st.status();
  auto session = Session::Create(lb.graph());
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  auto r = (*session)->Run(feeds, {std::string(kGradPrefix) + "b"});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  const Tensor& grad = (*r)[0];
  return std::vector<float>(grad.data_as<float>(), grad.data_as<float>() + grad.numel());
}

// tf2onnx gives B Keras's one bias in its first half and zeros in the second. Where the cell only
// adds the halves (LSTM, RNN, GRU without linear_before_reset) that zero half is no parameter of
// Keras's cell: it gets no gradient (it stays zero) and the first half gets the gradient of the
// sum, as Keras's bias does. GRU with linear_before_reset (Keras's reset_after=True) has both
// halves genuinely, and so do other exporters' models (torch trains b_ih and b_hh).
TEST(UnrollRnn, Tf2OnnxZeroRecurrentBiasStaysZero) {
  struct Want {
    std::string op;
    bool lbr;
  };
  for (const Want& w : std::vector<Want>{{"LSTM", false}, {"RNN", false}, {"GRU", false}, {"GRU", true}}) {
    Case c;
    c.op = w.op;
    c.linear_before_reset = w.lbr;
    SCOPED_TRACE(Name(c));
    const std::vector<float> keras = BiasGradient(c, "tf2onnx"), torch = BiasGradient(c, "pytorch");
    ASSERT_EQ(keras.size(), torch.size());
    ASSERT_FALSE(keras.empty());
    const size_t half = keras.size() / 2;
    bool rb_moves = false;
    for (size_t i = 0; i < half; ++i) {
      EXPECT_NEAR(keras[i], torch[i], 1e-6) << "Wb " << i;  // the same loss, the same Wb gradient
      rb_moves |= torch[half + i] != 0.0f;
    }
    EXPECT_TRUE(rb_moves) << "torch's Rb trains";
    for (size_t i = half; i < keras.size(); ++i) {
      if (w.op == "GRU" && w.lbr) {
        EXPECT_NEAR(keras[i], torch[i], 1e-6) << "Rb " << i - half << " is genuine with linear_before_reset";
      } else {
        EXPECT_EQ(keras[i], 0.0f) << "Rb " << i - half << ": tf2onnx's zero, no Keras parameter";
      }
    }
  }
}

// A symbolic sequence length or a sequence_lens input: the node stays, and autodiff names why.
TEST(UnrollRnn, LeavesWhatItCannotUnrollAndAutodiffSaysWhy) {
  for (bool lens : {false, true}) {
    G b(17);
    Graph& g = b.graph();
    Value* x = g.AddValue("x", DType::kF32, Shape({lens ? Dim(kT) : Dim::Symbol("T"), Dim(2), Dim(kI)}));
    g.AddInput(x);
    std::vector<Value*> ins = {x, b.Param("w", {1, 4 * kH, kI}, 1), b.Param("r", {1, 4 * kH, kH}, 2)};
    if (lens) {
      ins.push_back(nullptr);
      Value* l = g.AddInitializer("c_lens", Tensor::FromVector<int32_t>(DType::kI32, {2}, {4, 2}));
      ins.push_back(l);
    }
    std::vector<Value*> outs = b.Op("LSTM", ins, {A::Int("hidden_size", kH)}, 3);
    g.AddOutput(outs[1]);
    ASSERT_TRUE(InferShapes(g).ok());
    auto pass = CreatePassByName("unroll_rnn");
    ASSERT_TRUE(pass.ok());
    auto changed = (*pass)->Run(g);
    ASSERT_TRUE(changed.ok());
    EXPECT_FALSE(*changed);
    EXPECT_EQ(Count(g, "LSTM"), 1);
    g.mutable_outputs().clear();
    Value* s = b.Op1("ReduceSum", {outs[1]}, {A::Int("keepdims", 0)});
    Value* loss = g.AddValue("loss", DType::kF32, Shape(std::vector<Dim>{}));
    g.AddNode("Identity", {s}, {loss}, "loss_identity");
    g.AddOutput(loss);
    ASSERT_TRUE(InferShapes(g).ok());
    auto st = MakeAutodiffPass({})->Run(g);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.status().message().find(lens ? "sequence_lens" : "sequence length is not static"),
              std::string::npos)
        << st.status().message();
  }
}

}  // namespace
}  // namespace mixtrain
