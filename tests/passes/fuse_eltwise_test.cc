// The fuse_gelu and fuse_softmax inference passes: which subgraphs they fold (the GELU forms
// exporters emit; Where + Softmax with a constant or expanded fill and an optional scale) and
// which they must leave alone (shared intermediates, graph outputs, wrong constants, a softmax
// over another axis, a mask that does not broadcast), and that the rewritten graph computes what
// the original did, on small graphs (fp32 tight, bf16-lowered loose) and on gpt_mini after the
// whole inference pipeline.
#include <cmath>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "gtest/gtest.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "graph/verifier.h"
#include "kernels/cpu/simd_target.h"
#include "passes/inference.h"
#include "passes/pass_registry.h"
#include "passes/low_precision.h"
#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"
#include "tests/passes/inference_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::G;
using inference_test::Count;
using inference_test::ExpectClose;
using inference_test::Find;
using inference_test::RunGraph;

// Floats in [-3, 3] (GELU's curved part).
std::map<std::string, Tensor> Feeds(const Graph& g, int64_t batch) {
  return inference_test::Feeds(g, batch, -3, 3, 11);
}
using A = Attribute;

// Floats in [-3, 3] (GELU's curved part).
std::unique_ptr<Graph> PassAndCompare(Graph& g, const char* pass_name, DType dtype = DType::kF32,
                                      double tol = 1e-5) {
  return inference_test::PassAndCompare(g, pass_name, dtype, tol, -3, 3, 11);
}

Value* Input(G& b, const char* name, DType t, std::vector<Dim> dims) {
  Value* v = b.graph().AddValue(name, t, Shape(std::move(dims)));
  b.graph().AddInput(v);
  return v;
}

// ---- fuse_gelu -------------------------------------------------------------------------------

enum class GeluForm { kDynamo, kTorchOnnx, kHalfFirst };

// x * 0.5 * a (a = 1 + erf or 1 + tanh) in one of the exported orders.
Value* HalfXTimes(G& b, Value* x, Value* a, GeluForm form) {
  switch (form) {
    case GeluForm::kDynamo: return b.Op1("Mul", {b.Op1("Mul", {x, b.ConstF({}, {0.5f})}), a});
    case GeluForm::kTorchOnnx: return b.Op1("Mul", {b.Op1("Mul", {x, a}), b.ConstF({}, {0.5f})});
    case GeluForm::kHalfFirst: return b.Op1("Mul", {b.Op1("Mul", {a, b.ConstF({}, {0.5f})}), x});
  }
  return nullptr;
}

// x * 0.5 * (1 + erf(x / sqrt2)) on x[B, 7] in one of the exported orders; returns y.
Value* BuildGelu(G& b, Value* x, GeluForm form, float inv_sqrt2 = 0.70710678f) {
  Value* e;
  if (form == GeluForm::kTorchOnnx)
    e = b.Op1("Erf", {b.Op1("Div", {x, b.ConstF({}, {1.41421356f})})});
  else
    e = b.Op1("Erf", {b.Op1("Mul", {x, b.ConstF({}, {inv_sqrt2})})});
  Value* a = b.Op1("Add", {b.ConstF({}, {1.0f}), e});
  return HalfXTimes(b, x, a, form);
}

TEST(FuseGelu, EveryExportedFormBecomesOneGelu) {
  for (GeluForm form : {GeluForm::kDynamo, GeluForm::kTorchOnnx, GeluForm::kHalfFirst}) {
    SCOPED_TRACE(static_cast<int>(form));
    G b(18);
    Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
    b.graph().AddOutput(BuildGelu(b, x, form));
    auto out = PassAndCompare(b.graph(), "fuse_gelu");
    ASSERT_EQ(out->num_nodes(), 1u);
    const Node* gelu = Find(*out, "Gelu");
    ASSERT_NE(gelu, nullptr);
    EXPECT_EQ(gelu->domain(), "ai.mixtrain");  // opset 18 has no ONNX Gelu
    EXPECT_EQ(gelu->attr_string("approximate", ""), "none");
    EXPECT_EQ(gelu->input(0), out->FindValue("x"));
  }
}

TEST(FuseGelu, Opset20UsesOnnxGelu) {
  G b(20);
  Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
  b.graph().AddOutput(BuildGelu(b, x, GeluForm::kDynamo));
  ASSERT_TRUE(InferShapes(b.graph()).ok());
  auto pass = CreatePassByName("fuse_gelu");
  ASSERT_TRUE((*pass)->Run(b.graph()).ok());
  const Node* gelu = Find(b.graph(), "Gelu");
  ASSERT_NE(gelu, nullptr);
  EXPECT_EQ(gelu->domain(), "");
}

TEST(FuseGelu, Bf16LoweredGraphWithRoundedConstantsFuses) {
  G b(18);
  Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
  b.graph().AddOutput(BuildGelu(b, x, GeluForm::kDynamo));
  auto out = PassAndCompare(b.graph(), "fuse_gelu", DType::kBF16, 2e-2);
  EXPECT_EQ(Count(*out, "Gelu"), 1);
  EXPECT_EQ(Count(*out, "Erf"), 0);
}

TEST(FuseGelu, WrongConstantDoesNotFuse) {
  G b(18);
  Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
  b.graph().AddOutput(BuildGelu(b, x, GeluForm::kDynamo, 0.7f));
  auto out = PassAndCompare(b.graph(), "fuse_gelu");
  EXPECT_EQ(Count(*out, "Gelu"), 0);
  EXPECT_EQ(Count(*out, "Erf"), 1);
}

TEST(FuseGelu, SharedOrOutputIntermediateDoesNotFuse) {
  for (int variant = 0; variant < 2; ++variant) {
    G b(18);
    Graph& g = b.graph();
    Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
    g.AddOutput(BuildGelu(b, x, GeluForm::kDynamo));
    Value* erf = Find(g, "Erf")->output(0);
    if (variant == 0)
      g.AddOutput(b.Op1("Neg", {erf}));  // another consumer
    else
      g.AddOutput(erf);  // a graph output
    auto out = PassAndCompare(g, "fuse_gelu");
    EXPECT_EQ(Count(*out, "Gelu"), 0) << variant;
    EXPECT_EQ(Count(*out, "Erf"), 1) << variant;
  }
}

TEST(FuseGelu, ProductWithAnotherTensorDoesNotFuse) {
  G b(18);
  Graph& g = b.graph();
  Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
  Value* z = Input(b, "z", DType::kF32, {Dim::Symbol("B"), Dim(7)});
  Value* e = b.Op1("Erf", {b.Op1("Mul", {x, b.ConstF({}, {0.70710678f})})});
  Value* a = b.Op1("Add", {e, b.ConstF({}, {1.0f})});
  g.AddOutput(b.Op1("Mul", {b.Op1("Mul", {z, b.ConstF({}, {0.5f})}), a}));  // z, not x
  auto out = PassAndCompare(g, "fuse_gelu");
  EXPECT_EQ(Count(*out, "Gelu"), 0);
}

// The tanh approximation, x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), as GPT-2's
// gelu_new exports (dynamo: Pow, constants on the right) and with the other spellings: x^3 as
// Mul(x, Mul(x, x)) or Mul(Mul(x, x), x), the constants and x on the left.
enum class Cube { kPow, kXTimesSquare, kSquareTimesX };
Value* BuildGeluTanh(G& b, Value* x, GeluForm form, Cube cube, bool swap, float cubic = 0.044715f,
                     Value* sum_x = nullptr) {
  Value* x3 = nullptr;
  switch (cube) {
    case Cube::kPow: x3 = b.Op1("Pow", {x, b.ConstF({}, {3.0f})}); break;
    case Cube::kXTimesSquare: x3 = b.Op1("Mul", {x, b.Op1("Mul", {x, x})}); break;
    case Cube::kSquareTimesX: x3 = b.Op1("Mul", {b.Op1("Mul", {x, x}), x}); break;
  }
  Value* c = b.ConstF({}, {cubic});
  Value* scaled = b.Op1("Mul", swap ? std::vector<Value*>{c, x3} : std::vector<Value*>{x3, c});
  Value* xs = sum_x != nullptr ? sum_x : x;
  Value* sum = b.Op1("Add", swap ? std::vector<Value*>{scaled, xs} : std::vector<Value*>{xs, scaled});
  Value* k = b.ConstF({}, {0.7978845608f});
  Value* t = b.Op1("Tanh", {b.Op1("Mul", swap ? std::vector<Value*>{k, sum} : std::vector<Value*>{sum, k})});
  Value* a = b.Op1("Add", {t, b.ConstF({}, {1.0f})});
  return HalfXTimes(b, x, a, form);
}

TEST(FuseGelu, EveryTanhFormBecomesOneTanhGelu) {
  for (GeluForm form : {GeluForm::kDynamo, GeluForm::kTorchOnnx, GeluForm::kHalfFirst}) {
    for (Cube cube : {Cube::kPow, Cube::kXTimesSquare, Cube::kSquareTimesX}) {
      for (bool swap : {false, true}) {
        SCOPED_TRACE(absl::StrCat("form ", static_cast<int>(form), " cube ", static_cast<int>(cube), " swap ", swap));
        G b(18);
        Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
        b.graph().AddOutput(BuildGeluTanh(b, x, form, cube, swap));
        auto out = PassAndCompare(b.graph(), "fuse_gelu");
        ASSERT_EQ(out->num_nodes(), 1u);
        const Node* gelu = Find(*out, "Gelu");
        ASSERT_NE(gelu, nullptr);
        EXPECT_EQ(gelu->attr_string("approximate", ""), "tanh");
        EXPECT_EQ(gelu->input(0), out->FindValue("x"));
      }
    }
  }
}

TEST(FuseGelu, TanhFormInBf16Fuses) {
  G b(20);
  Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
  b.graph().AddOutput(BuildGeluTanh(b, x, GeluForm::kDynamo, Cube::kPow, false));
  auto out = PassAndCompare(b.graph(), "fuse_gelu", DType::kBF16, 2e-2);
  EXPECT_EQ(Count(*out, "Gelu"), 1);
  EXPECT_EQ(Count(*out, "Tanh"), 0);
  EXPECT_EQ(Find(*out, "Gelu")->domain(), "");
}

// A tanh form that is not GELU's: another cubic coefficient, another tensor in the sum, an
// intermediate read elsewhere, Pow with another exponent. Each computes what it did.
TEST(FuseGelu, TanhFormsThatAreNotGeluStay) {
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE(variant);
    G b(18);
    Graph& g = b.graph();
    Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(7)});
    Value* z = Input(b, "z", DType::kF32, {Dim::Symbol("B"), Dim(7)});
    switch (variant) {
      case 0: g.AddOutput(BuildGeluTanh(b, x, GeluForm::kDynamo, Cube::kPow, false, 0.05f)); break;
      case 1: g.AddOutput(BuildGeluTanh(b, x, GeluForm::kDynamo, Cube::kPow, false, 0.044715f, z)); break;
      case 2:
        g.AddOutput(BuildGeluTanh(b, x, GeluForm::kDynamo, Cube::kPow, false));
        g.AddOutput(b.Op1("Neg", {Find(g, "Pow")->output(0)}));
        break;
      case 3: {
        g.AddOutput(BuildGeluTanh(b, x, GeluForm::kDynamo, Cube::kPow, false));
        Node* pow = Find(g, "Pow");
        g.SetInput(pow, 1, b.ConstF({}, {2.0f}));
        break;
      }
    }
    if (variant != 1) g.AddOutput(b.Op1("Neg", {z}));  // z read in every variant
    auto out = PassAndCompare(g, "fuse_gelu");
    EXPECT_EQ(Count(*out, "Gelu"), 0);
    EXPECT_EQ(Count(*out, "Tanh"), 1);
  }
}

// ---- fuse_softmax ----------------------------------------------------------------------------

struct Attention {
  G b{18};
  Value *x, *mask, *scores, *where, *y;
};

// The 5 x 5 lower-triangular (causal) attention mask.
Value* CausalMask(G& b) {
  std::vector<uint8_t> tri(25);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) tri[i * 5 + j] = j <= i;
  return b.Bools({5, 5}, tri);
}

// Softmax(Where(mask[T, T], [x * 0.25], fill)) over x[B, 2, T, T], T = 5; fill a constant
// scalar or Expand(scalar, Shape(x)) like torch's full_like.
void BuildAttention(Attention& m, bool scale, bool expand_fill, float fill = -INFINITY,
                    int64_t axis = -1) {
  Graph& g = m.b.graph();
  m.x = Input(m.b, "x", DType::kF32, {Dim::Symbol("B"), Dim(2), Dim(5), Dim(5)});
  m.mask = CausalMask(m.b);
  m.scores = scale ? m.b.Op1("Mul", {m.x, m.b.ConstF({}, {0.25f})}) : m.x;
  Value* f = m.b.ConstF({}, {fill});
  if (expand_fill) f = m.b.Op1("Expand", {f, m.b.Op1("Shape", {m.x})});
  m.where = m.b.Op1("Where", {m.mask, m.scores, f});
  m.y = m.b.Op1("Softmax", {m.where}, {A::Int("axis", axis)});
  g.AddOutput(m.y);
}

TEST(FuseSoftmax, WhereSoftmaxBecomesMaskedSoftmax) {
  for (bool scale : {false, true}) {
    for (bool expand : {false, true}) {
      SCOPED_TRACE(absl::StrCat("scale ", scale, " expand ", expand));
      Attention m;
      BuildAttention(m, scale, expand);
      auto out = PassAndCompare(m.b.graph(), "fuse_softmax");
      ASSERT_EQ(out->num_nodes(), 1u);
      const Node* ms = Find(*out, "MaskedSoftmax");
      ASSERT_NE(ms, nullptr);
      EXPECT_EQ(ms->domain(), "ai.mixtrain");
      EXPECT_EQ(ms->attr_float("scale", 1.0f), scale ? 0.25f : 1.0f);
      EXPECT_EQ(ms->attr_float("fill", 0.0f), -INFINITY);
    }
  }
}

// torch's full_like(scores) reads the shape of the scaled scores: that Shape is no reader of
// their values, so the scale still folds and the Shape reads the unscaled scores instead.
TEST(FuseSoftmax, FullLikeOfTheScaledScoresStillFoldsTheScale) {
  Attention m;
  Graph& g = m.b.graph();
  m.x = Input(m.b, "x", DType::kF32, {Dim::Symbol("B"), Dim(2), Dim(5), Dim(5)});
  m.scores = m.b.Op1("Mul", {m.x, m.b.ConstF({}, {0.25f})});
  Value* f = m.b.Op1("Expand", {m.b.ConstF({}, {-1e4f}), m.b.Op1("Shape", {m.scores})});
  g.AddOutput(m.b.Op1("Softmax", {m.b.Op1("Where", {CausalMask(m.b), m.scores, f})}));
  auto out = PassAndCompare(g, "fuse_softmax");
  ASSERT_EQ(Count(*out, "MaskedSoftmax"), 1);
  EXPECT_EQ(Count(*out, "Mul"), 0);
  EXPECT_EQ(Find(*out, "MaskedSoftmax")->attr_float("scale", 1.0f), 0.25f);
}

TEST(FuseSoftmax, FiniteFillAndBf16) {
  Attention m;
  BuildAttention(m, true, true, -1e4f);
  auto out = PassAndCompare(m.b.graph(), "fuse_softmax", DType::kBF16, 1e-2);
  EXPECT_EQ(Count(*out, "MaskedSoftmax"), 1);
}

TEST(FuseSoftmax, OtherAxisDoesNotFuse) {
  Attention m;
  BuildAttention(m, false, false, -1e4f, 2);
  auto out = PassAndCompare(m.b.graph(), "fuse_softmax");
  EXPECT_EQ(Count(*out, "MaskedSoftmax"), 0);
}

TEST(FuseSoftmax, SharedWhereKeepsTheChainButScaleStaysWhenShared) {
  {
    Attention m;
    BuildAttention(m, false, false);
    m.b.graph().AddOutput(m.where);  // the masked scores are also a graph output
    auto out = PassAndCompare(m.b.graph(), "fuse_softmax");
    EXPECT_EQ(Count(*out, "MaskedSoftmax"), 0);
  }
  {
    Attention m;
    BuildAttention(m, true, false);
    m.b.graph().AddOutput(m.b.Op1("Neg", {m.scores}));  // the scaled scores have another use
    auto out = PassAndCompare(m.b.graph(), "fuse_softmax");
    ASSERT_EQ(Count(*out, "MaskedSoftmax"), 1);
    EXPECT_EQ(Count(*out, "Mul"), 1);
    EXPECT_EQ(Find(*out, "MaskedSoftmax")->attr_float("scale", 1.0f), 1.0f);
  }
}

TEST(FuseSoftmax, VariableFillOrMaskOnTheOtherBranchDoesNotFuse) {
  G b(18);
  Graph& g = b.graph();
  Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(5)});
  Value* f = Input(b, "f", DType::kF32, {});
  Value* mask = Input(b, "mask", DType::kBool, {Dim(5)});
  g.AddOutput(b.Op1("Softmax", {b.Op1("Where", {mask, x, f})}));                      // fill fed
  g.AddOutput(b.Op1("Softmax", {b.Op1("Where", {mask, b.ConstF({}, {-1e4f}), x})}));  // swapped
  auto out = PassAndCompare(g, "fuse_softmax");
  EXPECT_EQ(Count(*out, "MaskedSoftmax"), 0);
}

TEST(FuseSoftmax, FedMaskWithBroadcastRows) {
  G b(18);
  Graph& g = b.graph();
  Value* x = Input(b, "x", DType::kF32, {Dim::Symbol("B"), Dim(3), Dim(33)});
  Value* mask = Input(b, "mask", DType::kBool, {Dim(3), Dim(1)});  // one flag per row
  g.AddOutput(b.Op1("Softmax", {b.Op1("Where", {mask, x, b.ConstF({}, {-2.5f})})}));
  auto out = PassAndCompare(g, "fuse_softmax");
  EXPECT_EQ(Count(*out, "MaskedSoftmax"), 1);
}

// ---- gpt_mini: the whole inference pipeline vs the graph as imported -------------------------

void CheckGptMini(DType dtype, double tol) {
  SCOPED_TRACE(DTypeName(dtype));
  auto g = ImportOnnxFile(std::string(MT_SOURCE_DIR) + "/models/gpt_mini.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  if (dtype != DType::kF32) ASSERT_TRUE(LowerFloatModel(**g, dtype).ok());
  std::unique_ptr<Graph> opt = (*g)->Clone();
  absl::Status st = OptimizeForInference(*opt, CpuBackend().target());
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(Count(*opt, "Erf"), 0);  // both GELUs fused (and folded into their MatMuls)
  EXPECT_EQ(Count(*opt, "MaskedSoftmax"), 2);
  EXPECT_EQ(Count(*opt, "Softmax"), 0);
  EXPECT_EQ(Count(*opt, "Where"), 0);
  auto feeds = Feeds(**g, 4);
  ExpectClose(RunGraph(*opt, feeds), RunGraph(**g, feeds), tol);
}

TEST(FuseEltwiseModels, GptMini) {
  CheckGptMini(DType::kF32, 1e-5);
  CheckGptMini(DType::kBF16, 3e-2);
}

// The same on the AVX2 code paths (the kernels' generic rows, on an AVX-512 machine too).
TEST(FuseEltwiseModels, GptMiniBaselineIsa) {
  bool& avx512 = cpu::Avx512Enabled();
  const bool saved = avx512;
  avx512 = false;
  CheckGptMini(DType::kF32, 1e-5);
  CheckGptMini(DType::kBF16, 3e-2);
  avx512 = saved;
}

}  // namespace
}  // namespace mixtrain
