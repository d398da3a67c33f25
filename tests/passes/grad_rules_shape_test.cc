// Gradient rules of the data-movement and normalization ops whose shape-like operands (pads,
// starts/ends/steps, repeats, axes, split sizes, Resize sizes) are computed by the graph or fed at
// run time, the Pad modes, Slice steps, Resize, ConvTranspose's geometry and Instance/Group
// normalization: finite-difference checks (autodiff_test_util.h), plus direct checks of the
// ai.mixtrain PadGrad, SliceGrad and ResizeGrad kernels as adjoints of their forward ops.
#include <map>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain::gradcheck {
namespace {

using A = Attribute;
using Vs = std::vector<Value*>;
using Feeds = std::map<std::string, Tensor>;

Tensor F32(std::vector<int64_t> dims, std::vector<float> v) {
  return Tensor::FromVector<float>(DType::kF32, std::move(dims), v);
}
Tensor I64(std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(v.size())}, v);
}

// A graph input of `dtype` whose dims are the symbols N0, N1, ... (known only at run time).
Value* DynInput(G& g, const std::string& name, DType dtype, int64_t rank) {
  std::vector<Dim> dims;
  for (int64_t i = 0; i < rank; ++i) dims.push_back(Dim::Symbol(name + std::to_string(i)));
  Value* v = g.graph().AddValue(name, dtype, Shape(std::move(dims)));
  g.graph().AddInput(v);
  return v;
}
// x reshaped to the shape of a fed tensor z of x's dims: x's values with dims the rules cannot
// see statically.
Value* Dynamic(G& g, Value* x, const std::string& z) {
  return g.Op1("Reshape", {x, g.Op1("Shape", {DynInput(g, z, DType::kF32, x->shape.rank())})});
}
// An ai.mixtrain op.
Value* MtOp(G& g, const std::string& op, const Vs& ins, std::vector<A> attrs = {}) {
  Node* n = g.graph().AddNode(op, ins, 1, g.graph().UniqueName(op), "ai.mixtrain");
  for (A& a : attrs) n->SetAttr(std::move(a));
  g.graph().opset_imports["ai.mixtrain"] = 1;
  return n->output(0);
}
// Entries [b, e) of Shape(v), a 1-D int64 tensor computed at run time.
Value* ShapeSlice(G& g, Value* v, int64_t b, int64_t e) {
  return g.Op1("Slice", {g.Op1("Shape", {v}), g.Ints({b}), g.Ints({e})});
}

// gradcheck::Check for graphs with run-time inputs: `build` may add graph inputs (fed from
// `feeds`), so outputs may have dims known only at run time. The loss weights R_i are then graph
// inputs too, shaped like the outputs of a first forward run.
void DynCheck(const std::function<Vs(G&)>& build, const Feeds& feeds, int64_t opset = 18,
              float h = 1e-2f, float tol = 5e-3f) {
  std::vector<std::vector<int64_t>> out_dims;
  {
    G b(opset);
    Vs outs = build(b);
    std::vector<std::string> names;
    for (Value* o : outs) names.push_back(o->name);
    auto s = Session::Create(b.graph());
    ASSERT_TRUE(s.ok()) << s.status().message();
    auto r = (*s)->Run(feeds, names);
    ASSERT_TRUE(r.ok()) << r.status().message();
    for (const Tensor& t : *r) out_dims.push_back(t.dims());
  }
  G b(opset);
  Vs outs = build(b);
  Graph& g = b.graph();
  Feeds all = feeds;
  Value* total = nullptr;
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string rn = "r" + std::to_string(i);
    all[rn] = F32(out_dims[i], Random(NumElements(out_dims[i]), 1000 + i));
    Value* w = DynInput(b, rn, DType::kF32, static_cast<int64_t>(out_dims[i].size()));
    Value* s = b.Op1("ReduceSum", {b.Op1("Mul", {outs[i], w})}, {A::Int("keepdims", 0)});
    total = total ? b.Op1("Add", {total, s}) : s;
  }
  Value* loss = g.AddValue("loss", DType::kF32, Shape(std::vector<Dim>{}));
  g.AddNode("Identity", {total}, {loss}, "loss_identity");
  g.AddOutput(loss);
  ASSERT_TRUE(InferShapes(g).ok()) << InferShapes(g).message();
  CheckGraph(g, all, h, tol);
}

// Whether the autodiff pass emitted an op of this type (which path a rule took).
bool Emits(const std::function<Vs(G&)>& build, const std::string& op, int64_t opset = 18) {
  G b(opset);
  AppendWeightedSumLoss(b, build(b));
  AutodiffOptions opt;
  opt.freeze = "c_.*";
  EXPECT_TRUE(MakeAutodiffPass(opt)->Run(b.graph()).ok());
  for (const auto& n : b.graph().nodes())
    if (n->op_type() == op) return true;
  return false;
}

// --- Pad -----------------------------------------------------------------------------------------

TEST(ShapeGradCheck, PadConstantFedPads) {
  DynCheck([](G& g) {
    Value* pads = DynInput(g, "pads", DType::kI64, 1);
    return Vs{g.Op1("Pad", {g.Param("x", {2, 3}, 1), pads})};
  }, {{"pads", I64({0, 1, 2, 0})}});
}

// Reflect-pad a dynamic-batch tensor along its last axis by (N, 1), N read from its shape.
TEST(ShapeGradCheck, PadReflectPadsFromShape) {
  DynCheck([](G& g) {
    Value* x = Dynamic(g, g.Param("x", {2, 3, 5}, 1), "z");
    Value* n = ShapeSlice(g, x, 0, 1);
    Value* pads = g.Op1("Concat", {g.Ints({0, 0}), n, g.Ints({0, 0, 1})}, {A::Int("axis", 0)});
    return Vs{g.Op1("Pad", {x, pads}, {A::String("mode", "reflect")})};
  }, {{"z", F32({2, 3, 5}, std::vector<float>(30, 0))}});
}

TEST(ShapeGradCheck, PadEdgeFedAxes) {
  DynCheck([](G& g) {
    Value* axes = DynInput(g, "axes", DType::kI64, 1);
    return Vs{g.Op1("Pad", {g.Param("x", {2, 3}, 1), g.Ints({2, 3}), nullptr, axes},
                    {A::String("mode", "edge")})};
  }, {{"axes", I64({-1})}});
}

// Pads wider than the dim wrap around more than once.
TEST(ShapeGradCheck, PadWrap) {
  DynCheck([](G& g) {
    return Vs{g.Op1("Pad", {g.Param("x", {2, 3}, 1), g.Ints({1, 4, 0, 5})},
                    {A::String("mode", "wrap")})};
  }, {}, 19);
}

TEST(ShapeGradCheck, PadNegativeCrops) {
  Check([](G& g) {
    return Vs{g.Op1("Pad", {g.Param("x", {3, 4}, 1), g.Ints({-1, 1, 0, -2})})};
  });
  Check([](G& g) {
    return Vs{g.Op1("Pad", {g.Param("x", {3, 5}, 1), g.Ints({0, 3, -1, -1})},
                    {A::String("mode", "reflect")})};
  });
}

TEST(ShapeGradCheck, PadReflectOpset2Attribute) {
  Check([](G& g) {
    return Vs{g.Op1("Pad", {g.Param("x", {2, 4}, 1)},
                    {A::Ints("pads", {1, 2, 0, 3}), A::String("mode", "reflect")})};
  }, 2);
}

// Constant pads stay a static Slice; run-time ones take the kernel.
TEST(ShapeGradCheck, PadPathChoice) {
  auto pad = [](bool runtime) {
    return [runtime](G& g) {
      Value* x = g.Param("x", {2, 3}, 1);
      Value* pads = g.Ints({0, 1, 2, 0});
      if (runtime) pads = g.Op1("Identity", {pads});
      return Vs{g.Op1("Pad", {x, pads})};
    };
  };
  EXPECT_FALSE(Emits(pad(false), "PadGrad"));
  EXPECT_TRUE(Emits(pad(true), "PadGrad"));
}

// --- Slice ---------------------------------------------------------------------------------------

TEST(ShapeGradCheck, SliceFedStartsEndsOnDynamicInput) {
  DynCheck([](G& g) {
    Value* x = Dynamic(g, g.Param("x", {3, 5}, 1), "z");
    return Vs{g.Op1("Slice", {x, DynInput(g, "starts", DType::kI64, 1),
                              DynInput(g, "ends", DType::kI64, 1), g.Ints({1, 0})})};
  }, {{"z", F32({3, 5}, std::vector<float>(15, 0))},
      {"starts", I64({1, -4})},
      {"ends", I64({3, 100})}});
}

TEST(ShapeGradCheck, SliceNegativeSteps) {
  Check([](G& g) {
    return Vs{g.Op1("Slice", {g.Param("x", {3, 6}, 1), g.Ints({-1, 10}), g.Ints({-100, 0}),
                              g.Ints({0, 1}), g.Ints({-1, -2})})};
  });
}

// Step 2 read from the batch size at run time; ends clamp past the dim.
TEST(ShapeGradCheck, SliceStepsFromShape) {
  DynCheck([](G& g) {
    Value* x = Dynamic(g, g.Param("x", {2, 7}, 1), "z");
    Value* step = ShapeSlice(g, x, 0, 1);
    return Vs{g.Op1("Slice", {x, g.Ints({1}), g.Ints({1000}), g.Ints({-1}), step})};
  }, {{"z", F32({2, 7}, std::vector<float>(14, 0))}});
}

TEST(ShapeGradCheck, SliceOpset9Attributes) {
  Check([](G& g) {
    return Vs{g.Op1("Slice", {g.Param("x", {3, 4}, 1)},
                    {A::Ints("starts", {1}), A::Ints("ends", {-1}), A::Ints("axes", {1})})};
  }, 9);
}

// --- Tile, Expand, Split, Concat -----------------------------------------------------------------

TEST(ShapeGradCheck, TileRepeatsFromShape) {
  DynCheck([](G& g) {
    Value* z = DynInput(g, "z", DType::kF32, 2);
    return Vs{g.Op1("Tile", {g.Param("x", {2, 3}, 1), g.Op1("Shape", {z})})};
  }, {{"z", F32({3, 2}, std::vector<float>(6, 0))}});
}

TEST(ShapeGradCheck, TileDynamicInputFedRepeats) {
  DynCheck([](G& g) {
    Value* x = Dynamic(g, g.Param("x", {2, 3}, 1), "z");
    return Vs{g.Op1("Tile", {x, DynInput(g, "repeats", DType::kI64, 1)})};
  }, {{"z", F32({2, 3}, std::vector<float>(6, 0))}, {"repeats", I64({2, 1})}});
}

TEST(ShapeGradCheck, ExpandShapeFromShape) {
  DynCheck([](G& g) {
    Value* z = DynInput(g, "z", DType::kF32, 3);
    return Vs{g.Op1("Expand", {g.Param("x", {3, 1}, 1), g.Op1("Shape", {z})})};
  }, {{"z", F32({2, 3, 4}, std::vector<float>(24, 0))}});
}

TEST(ShapeGradCheck, SplitFedSizesOneOutputUnused) {
  DynCheck([](G& g) {
    Vs parts = g.Op("Split", {g.Param("x", {2, 6}, 1), DynInput(g, "split", DType::kI64, 1)},
                    {A::Int("axis", 1)}, 3);
    return Vs{parts[0], parts[2]};
  }, {{"split", I64({1, 2, 3})}});
}

TEST(ShapeGradCheck, ConcatDynamicDims) {
  DynCheck([](G& g) {
    Value* a = Dynamic(g, g.Param("a", {2, 3}, 1), "za");
    Value* b = Dynamic(g, g.Param("b", {4, 3}, 2), "zb");
    return Vs{g.Op1("Concat", {a, b}, {A::Int("axis", 0)})};
  }, {{"za", F32({2, 3}, std::vector<float>(6, 0))},
      {"zb", F32({4, 3}, std::vector<float>(12, 0))}});
}

// --- Reduce* with run-time axes ------------------------------------------------------------------

void ReduceFedAxes(const std::string& op, int64_t keepdims, std::vector<int64_t> axes,
                   std::vector<float> x, int64_t noop = 0) {
  DynCheck([&](G& g) {
    return Vs{g.Op1(op, {g.Param("x", {2, 3, 4}, x), DynInput(g, "axes", DType::kI64, 1)},
                    {A::Int("keepdims", keepdims), A::Int("noop_with_empty_axes", noop)})};
  }, {{"axes", I64(axes)}});
}
TEST(ShapeGradCheck, ReduceSumFedAxes) {
  ReduceFedAxes("ReduceSum", 0, {-1, 0}, Random(24, 1));
  ReduceFedAxes("ReduceSum", 1, {1}, Random(24, 1));
  ReduceFedAxes("ReduceSum", 0, {}, Random(24, 1));  // empty: every axis
}
TEST(ShapeGradCheck, ReduceMeanFedAxes) {
  ReduceFedAxes("ReduceMean", 0, {0, 2}, Random(24, 2));
  ReduceFedAxes("ReduceMean", 1, {-2}, Random(24, 2));
  ReduceFedAxes("ReduceMean", 0, {}, Random(24, 2), 1);  // empty with noop: the identity
}
TEST(ShapeGradCheck, ReduceMaxFedAxes) { ReduceFedAxes("ReduceMax", 0, {1}, Distinct(24, 3)); }
TEST(ShapeGradCheck, ReduceSumSquareFedAxes) {
  ReduceFedAxes("ReduceSumSquare", 0, {2}, Random(24, 4));
}

// ReduceMean over axes read from a dynamic tensor's rank: Shape -> Size -> Sub gives [rank - 1].
TEST(ShapeGradCheck, ReduceMeanAxesComputed) {
  DynCheck([](G& g) {
    Value* x = Dynamic(g, g.Param("x", {2, 3}, 1), "z");
    Value* rank = g.Op1("Size", {g.Op1("Shape", {x})});
    Value* last = g.Op1("Unsqueeze", {g.Op1("Sub", {rank, g.IntsShaped({}, {1})}), g.Ints({0})});
    return Vs{g.Op1("ReduceMean", {x, last}, {A::Int("keepdims", 0)})};
  }, {{"z", F32({2, 3}, std::vector<float>(6, 0))}});
}

// --- Resize --------------------------------------------------------------------------------------

Value* Floats(G& g, std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return g.ConstF({n}, std::move(v));
}

void ResizeScales(std::vector<A> attrs, std::vector<float> scales, std::vector<int64_t> x_dims,
                  int64_t opset = 18) {
  Check([&](G& g) {
    Value* x = g.Param("x", x_dims, Random(NumElements(x_dims), 5));
    return Vs{g.Op1("Resize", {x, nullptr, Floats(g, scales)}, attrs)};
  }, opset);
}
TEST(ShapeGradCheck, ResizeNearestModes) {
  ResizeScales({A::String("mode", "nearest")}, {1, 1, 2, 1.5f}, {1, 2, 3, 4});
  ResizeScales({A::String("mode", "nearest"), A::String("nearest_mode", "ceil"),
                A::String("coordinate_transformation_mode", "align_corners")},
               {1, 1, 0.6f, 1.7f}, {1, 1, 5, 3});
  ResizeScales({A::String("mode", "nearest"), A::String("nearest_mode", "round_prefer_ceil"),
                A::String("coordinate_transformation_mode", "asymmetric")},
               {1, 1, 2.5f}, {1, 2, 3});
}
TEST(ShapeGradCheck, ResizeLinear) {
  ResizeScales({A::String("mode", "linear")}, {1, 1, 2, 0.5f}, {1, 2, 3, 4});
  ResizeScales({A::String("mode", "linear"),
                A::String("coordinate_transformation_mode", "align_corners")},
               {1, 1, 1.5f, 2}, {2, 1, 4, 3});
  ResizeScales({A::String("mode", "linear"),
                A::String("coordinate_transformation_mode", "pytorch_half_pixel")},
               {1, 1, 2, 2, 2}, {1, 1, 2, 2, 3});  // trilinear
}
TEST(ShapeGradCheck, ResizeCubicExcludeOutside) {
  ResizeScales({A::String("mode", "cubic"), A::Int("exclude_outside", 1),
                A::Float("cubic_coeff_a", -0.5f)},
               {1, 1, 1.5f, 0.75f}, {1, 1, 4, 4});
}
// Extrapolated elements read a constant, not the input: their gradient is zero.
TEST(ShapeGradCheck, ResizeTfCropAndResize) {
  Check([](G& g) {
    Value* x = g.Param("x", {1, 1, 3, 4}, 1);
    Value* roi = Floats(g, {0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f});
    return Vs{g.Op1("Resize", {x, roi, Floats(g, {1, 1, 1.7f, 1.3f})},
                    {A::String("mode", "linear"),
                     A::String("coordinate_transformation_mode", "tf_crop_and_resize"),
                     A::Float("extrapolation_value", 0.5f)})};
  });
}
// Output sizes fed at run time to a dynamic-batch input.
TEST(ShapeGradCheck, ResizeFedSizes) {
  DynCheck([](G& g) {
    Value* x = Dynamic(g, g.Param("x", {2, 1, 3, 3}, 1), "z");
    return Vs{g.Op1("Resize", {x, nullptr, nullptr, DynInput(g, "sizes", DType::kI64, 1)},
                    {A::String("mode", "linear")})};
  }, {{"z", F32({2, 1, 3, 3}, std::vector<float>(18, 0))}, {"sizes", I64({2, 1, 5, 2})}});
}
TEST(ShapeGradCheck, UpsampleOpset9) {
  Check([](G& g) {
    return Vs{g.Op1("Upsample", {g.Param("x", {1, 1, 2, 3}, 1), Floats(g, {1, 1, 2, 1.5f})},
                    {A::String("mode", "nearest")})};
  }, 9);
}

// --- ConvTranspose geometry ----------------------------------------------------------------------

TEST(ShapeGradCheck, ConvTransposeSameUpper) {
  Check([](G& g) {
    return Vs{g.Op1("ConvTranspose", {g.Param("x", {1, 2, 3, 3}, 1), g.Param("w", {2, 2, 3, 2}, 2)},
                    {A::String("auto_pad", "SAME_UPPER"), A::Ints("strides", {2, 2})})};
  });
}
// output_shape one short of the windows' reach (pads [1, 0] follow from it) and groups.
TEST(ShapeGradCheck, ConvTransposeOutputShapeGroups) {
  Check([](G& g) {
    return Vs{g.Op1("ConvTranspose", {g.Param("x", {1, 4, 3}, 1), g.Param("w", {4, 1, 3}, 2),
                                      g.Param("b", {2}, 3)},
                    {A::Int("group", 2), A::Ints("strides", {2}), A::Ints("output_shape", {6})})};
  });
}
// output_padding past the end pads: the end crop is negative, dY's last rows are sliced off.
TEST(ShapeGradCheck, ConvTransposeOutputPaddingDilation) {
  Check([](G& g) {
    return Vs{g.Op1("ConvTranspose", {g.Param("x", {1, 2, 3, 2}, 1), g.Param("w", {2, 3, 2, 2}, 2)},
                    {A::Ints("strides", {3, 2}), A::Ints("dilations", {2, 1}),
                     A::Ints("pads", {1, 0, 0, 1}), A::Ints("output_padding", {2, 1})})};
  });
}

// --- InstanceNormalization, GroupNormalization ---------------------------------------------------

TEST(ShapeGradCheck, InstanceNormalization) {
  Check([](G& g) {
    return Vs{g.Op1("InstanceNormalization",
                    {g.Param("x", {2, 3, 2, 3}, 1), g.Param("scale", {3}, 2), g.Param("bias", {3}, 3)},
                    {A::Float("epsilon", 1e-3f)})};
  });
}
TEST(ShapeGradCheck, InstanceNormalizationDynamicBatch) {
  DynCheck([](G& g) {
    Value* x = Dynamic(g, g.Param("x", {2, 2, 5}, 1), "z");
    return Vs{g.Op1("InstanceNormalization", {x, g.Param("scale", {2}, 2), g.Param("bias", {2}, 3)})};
  }, {{"z", F32({2, 2, 5}, std::vector<float>(20, 0))}});
}
TEST(ShapeGradCheck, GroupNormalizationOpset21PerChannel) {
  Check([](G& g) {
    return Vs{g.Op1("GroupNormalization",
                    {g.Param("x", {2, 4, 2, 2}, 1), g.Param("scale", {4}, 2), g.Param("bias", {4}, 3)},
                    {A::Int("num_groups", 2), A::Float("epsilon", 1e-2f)})};
  }, 21);
}
TEST(ShapeGradCheck, GroupNormalizationOpset18PerGroup) {
  Check([](G& g) {
    return Vs{g.Op1("GroupNormalization",
                    {g.Param("x", {2, 6, 3}, 1), g.Param("scale", {3}, 2), g.Param("bias", {3}, 3)},
                    {A::Int("num_groups", 3)})};
  }, 18);
}
TEST(ShapeGradCheck, GroupNormalizationOneGroup) {
  Check([](G& g) {
    return Vs{g.Op1("GroupNormalization",
                    {g.Param("x", {2, 3, 4}, 1), g.Param("scale", {3}, 2), g.Param("bias", {3}, 3)},
                    {A::Int("num_groups", 1)})};
  }, 21);
}

// --- the kernels as adjoints ---------------------------------------------------------------------

// <op(x), dy> == <x, grad(dy)> for random x and dy: the backward kernel is the forward's adjoint.
// `forward` and `backward` are one-node graphs over inputs "x" / "dy" (fed) and constants.
double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.GetDouble(i) * b.GetDouble(i);
  return s;
}
Tensor RunOne(Graph& g, const Feeds& feeds, const std::string& out) {
  auto s = Session::Create(g);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return Tensor();
  auto r = (*s)->Run(feeds, {out});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? (*r)[0] : Tensor();
}

// The gradient kernel scattering by hand-computed indices: Pad(reflect) of [a b c] by (2, 1) is
// [c b a b c b], so a gets dy[2], b gets dy[1] + dy[3] + dy[5], c gets dy[0] + dy[4].
TEST(ShapeGradKernels, PadGradReflectByHand) {
  G g;
  Value* dy = DynInput(g, "dy", DType::kF32, 2);
  Value* dx = MtOp(g, "PadGrad", {dy, DynInput(g, "pads", DType::kI64, 1)},
                   {A::String("mode", "reflect")});
  Tensor out = RunOne(g.graph(), {{"dy", F32({1, 6}, {1, 2, 4, 8, 16, 32})},
                                  {"pads", I64({0, 2, 0, 1})}},
                      dx->name);
  ASSERT_EQ(out.dims(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(out.GetDouble(0), 4);
  EXPECT_EQ(out.GetDouble(1), 2 + 8 + 32);
  EXPECT_EQ(out.GetDouble(2), 1 + 16);
}

// SliceGrad with a negative step: x[4:0:-2] of 6 elements reads 4 and 2.
TEST(ShapeGradKernels, SliceGradNegativeStepByHand) {
  G g;
  Value* dy = DynInput(g, "dy", DType::kF32, 1);
  Value* dx = MtOp(g, "SliceGrad", {dy, g.Ints({6}), g.Ints({4}), g.Ints({0}), g.Ints({0}),
                                   g.Ints({-2})});
  Tensor out = RunOne(g.graph(), {{"dy", F32({2}, {3, 5})}}, dx->name);
  ASSERT_EQ(out.numel(), 6);
  const std::vector<double> want{0, 0, 5, 0, 3, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.GetDouble(i), want[i]) << i;
}

// ResizeGrad against the forward Resize kernel: <Resize(x), dy> == <x, ResizeGrad(dy)>.
void ResizeAdjoint(std::vector<A> attrs, std::vector<int64_t> x_dims, std::vector<float> scales) {
  const Tensor x = F32(x_dims, Random(NumElements(x_dims), 7));
  G fwd;
  Value* xin = DynInput(fwd, "x", DType::kF32, static_cast<int64_t>(x_dims.size()));
  Value* y = fwd.Op1("Resize", {xin, nullptr, Floats(fwd, scales)}, attrs);
  const Tensor yt = RunOne(fwd.graph(), {{"x", x}}, y->name);
  ASSERT_TRUE(yt.defined());
  const Tensor dy = F32(yt.dims(), Random(yt.numel(), 8));
  G bwd;
  Value* dyin = DynInput(bwd, "dy", DType::kF32, static_cast<int64_t>(x_dims.size()));
  Value* dx = MtOp(bwd, "ResizeGrad", {dyin, bwd.Ints(x_dims), nullptr, Floats(bwd, scales)},
                   attrs);
  const Tensor dxt = RunOne(bwd.graph(), {{"dy", dy}}, dx->name);
  ASSERT_EQ(dxt.dims(), x_dims);
  EXPECT_NEAR(Dot(yt, dy), Dot(x, dxt), 1e-4 * (1 + std::abs(Dot(yt, dy))));
}
TEST(ShapeGradKernels, ResizeGradIsTheAdjoint) {
  ResizeAdjoint({A::String("mode", "nearest")}, {1, 2, 5, 4}, {1, 1, 1.6f, 0.75f});
  ResizeAdjoint({A::String("mode", "linear")}, {2, 1, 4, 6}, {1, 1, 2.5f, 0.5f});
  ResizeAdjoint({A::String("mode", "cubic"),
                 A::String("coordinate_transformation_mode", "align_corners")},
                {1, 1, 5, 3}, {1, 1, 1.4f, 3});
}

}  // namespace
}  // namespace mixtrain::gradcheck
