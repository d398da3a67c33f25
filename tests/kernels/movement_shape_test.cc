// Shape-only movement ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity), the ops that build
// tensors from attributes, shapes and scalars (Constant, Shape, Size, ConstantOfShape, Range), and
// the shape rules on symbolic dims and unknown values, which the planner and importer depend on.
#include <gtest/gtest.h>

#include "graph/shape_inference.h"
#include "tests/kernels/movement_test_util.h"

namespace mixtrain {
namespace {

using movement_test::ExpectGathered;
using movement_test::I64;
using movement_test::Iota;
using movement_test::kAllTypes;
using movement_test::RunError;
using movement_test::RunOp;

std::vector<int64_t> IotaIdx(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(MovementShapeTest, ReshapeZeroMinusOneAndAllowzero) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {2, 3, 4});
    ExpectGathered(RunOp("Reshape", {x, I64({0, -1})})[0], {2, 12}, x, IotaIdx(24));
    ExpectGathered(RunOp("Reshape", {x, I64({-1})})[0], {24}, x, IotaIdx(24));
    ExpectGathered(RunOp("Reshape", {x, I64({4, 0, -1})})[0], {4, 3, 2}, x, IotaIdx(24));
    ExpectGathered(RunOp("Reshape", {x, I64({2, 1, 12, 1})})[0], {2, 1, 12, 1}, x, IotaIdx(24));
  }
  // allowzero: a 0 is a real zero-size dim, not "copy the input dim"
  Tensor empty = Iota(DType::kF32, {0, 3, 4});
  auto out = RunOp("Reshape", {empty, I64({3, 4, 0})}, {Attribute::Int("allowzero", 1)}, 1, 14);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 4, 0}));
  Tensor x = Iota(DType::kF32, {2, 3, 4});
  EXPECT_FALSE(RunError("Reshape", {x, I64({-1, -1})}).ok());
  EXPECT_FALSE(RunError("Reshape", {x, I64({5, -1})}).ok());
  EXPECT_FALSE(RunError("Reshape", {x, I64({2, 3})}).ok());
  EXPECT_FALSE(
      RunError("Reshape", {empty, I64({0, -1})}, {Attribute::Int("allowzero", 1)}, 1, 14).ok());
}

TEST(MovementShapeTest, FlattenAxes) {
  Tensor x = Iota(DType::kBF16, {2, 3, 4});
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> cases = {
      {0, {1, 24}}, {1, {2, 12}}, {2, {6, 4}}, {3, {24, 1}}, {-1, {6, 4}}, {-3, {1, 24}}};
  for (const auto& [axis, dims] : cases)
    ExpectGathered(RunOp("Flatten", {x}, {Attribute::Int("axis", axis)})[0], dims, x, IotaIdx(24));
  ExpectGathered(RunOp("Flatten", {x})[0], {2, 12}, x, IotaIdx(24));
  EXPECT_FALSE(RunError("Flatten", {x}, {Attribute::Int("axis", 4)}).ok());
}

TEST(MovementShapeTest, SqueezeUnsqueezeAttributeAndInputForms) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(DTypeName(t));
    Tensor x = Iota(t, {3, 4});
    // opset 11: axes attribute; opset 13: axes input; negative and unsorted axes
    ExpectGathered(RunOp("Unsqueeze", {x}, {Attribute::Ints("axes", {0, 3})}, 1, 11)[0],
                   {1, 3, 4, 1}, x, IotaIdx(12));
    ExpectGathered(RunOp("Unsqueeze", {x, I64({-1, 1, 0})}, {}, 1, 13)[0], {1, 1, 3, 4, 1}, x,
                   IotaIdx(12));
    Tensor y = Iota(t, {1, 3, 1, 4});
    ExpectGathered(RunOp("Squeeze", {y}, {Attribute::Ints("axes", {-2})}, 1, 11)[0], {1, 3, 4}, y,
                   IotaIdx(12));
    ExpectGathered(RunOp("Squeeze", {y, I64({0, 2})}, {}, 1, 13)[0], {3, 4}, y, IotaIdx(12));
    ExpectGathered(RunOp("Squeeze", {y}, {}, 1, 13)[0], {3, 4}, y, IotaIdx(12));
  }
  Tensor y = Iota(DType::kF32, {1, 3});
  EXPECT_FALSE(RunError("Squeeze", {y, I64({1})}, {}, 1, 13).ok());
  EXPECT_FALSE(RunError("Unsqueeze", {y, I64({0, 0})}, {}, 1, 13).ok());
  EXPECT_FALSE(RunError("Unsqueeze", {y, I64({4})}, {}, 1, 13).ok());
  ExpectGathered(RunOp("Unsqueeze", {Tensor::Scalar(5.0f), I64({0})}, {}, 1, 13)[0], {1},
                 Tensor::Scalar(5.0f), {0});
}

TEST(MovementShapeTest, IdentityCopiesEveryDtype) {
  for (DType t : kAllTypes) {
    Tensor x = Iota(t, {5, 7});
    ExpectGathered(RunOp("Identity", {x})[0], {5, 7}, x, IotaIdx(35));
  }
}

TEST(MovementShapeTest, ConstantEveryAttributeForm) {
  Tensor v = Iota(DType::kF16, {2, 2});
  auto out = RunOp("Constant", {}, {Attribute::TensorAttr("value", v)});
  EXPECT_TRUE(out[0].Identical(v));
  out = RunOp("Constant", {}, {Attribute::Float("value_float", 1.5f)});
  EXPECT_TRUE(out[0].Identical(Tensor::Scalar(1.5f)));
  out = RunOp("Constant", {}, {Attribute::Floats("value_floats", {1, 2, 3})});
  EXPECT_TRUE(out[0].Identical(Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 3})));
  out = RunOp("Constant", {}, {Attribute::Int("value_int", -7)});
  EXPECT_TRUE(out[0].Identical(Tensor::ScalarI64(-7)));
  out = RunOp("Constant", {}, {Attribute::Ints("value_ints", {4, 5})});
  EXPECT_TRUE(out[0].Identical(I64({4, 5})));
  EXPECT_FALSE(RunError("Constant", {}, {Attribute::String("value_string", "x")}).ok());
}

TEST(MovementShapeTest, ShapeWindowsAndSize) {
  Tensor x = Iota(DType::kBool, {2, 3, 4, 5});
  EXPECT_TRUE(RunOp("Shape", {x})[0].Identical(I64({2, 3, 4, 5})));
  // ONNX's test_shape_* cases: start/end clip and count from the end (opset 15)
  const std::vector<std::tuple<int64_t, int64_t, std::vector<int64_t>>> cases = {
      {1, 4, {3, 4, 5}}, {0, 1, {2}},    {1, 2, {3}},  {1, -1, {3, 4}},
      {-1, 4, {5}},      {-10, 4, {2, 3, 4, 5}}, {0, 10, {2, 3, 4, 5}}, {3, 1, {}}};
  for (const auto& [start, end, want] : cases) {
    auto out = RunOp("Shape", {x}, {Attribute::Int("start", start), Attribute::Int("end", end)},
                     1, 15);
    EXPECT_TRUE(out[0].Identical(I64(want))) << start << ":" << end;
  }
  EXPECT_TRUE(RunOp("Size", {x})[0].Identical(Tensor::ScalarI64(120)));
}

TEST(MovementShapeTest, ConstantOfShape) {
  auto out = RunOp("ConstantOfShape", {I64({2, 3})});
  EXPECT_TRUE(out[0].Identical(Tensor(DType::kF32, {2, 3})));
  Tensor seven = Tensor::FromVector<int32_t>(DType::kI32, {1}, {7});
  out = RunOp("ConstantOfShape", {I64({4})}, {Attribute::TensorAttr("value", seven)});
  EXPECT_TRUE(out[0].Identical(Tensor::FromVector<int32_t>(DType::kI32, {4}, {7, 7, 7, 7})));
  out = RunOp("ConstantOfShape", {I64({0})}, {Attribute::TensorAttr("value", seven)});
  EXPECT_EQ(out[0].dims(), std::vector<int64_t>{0});
  EXPECT_FALSE(RunError("ConstantOfShape", {I64({-1})}).ok());
}

TEST(MovementShapeTest, RangeFloatAndIntDeltas) {
  auto out = RunOp("Range", {Tensor::Scalar(1), Tensor::Scalar(5), Tensor::Scalar(2)});
  EXPECT_TRUE(out[0].Identical(Tensor::FromVector<float>(DType::kF32, {2}, {1, 3})));
  auto i32 = [](int32_t v) { return Tensor::FromVector<int32_t>(DType::kI32, {}, {v}); };
  out = RunOp("Range", {i32(10), i32(6), i32(-3)});
  EXPECT_TRUE(out[0].Identical(Tensor::FromVector<int32_t>(DType::kI32, {2}, {10, 7})));
  out = RunOp("Range", {Tensor::ScalarI64(3), Tensor::ScalarI64(3), Tensor::ScalarI64(1)});
  EXPECT_EQ(out[0].dims(), std::vector<int64_t>{0});
  EXPECT_FALSE(RunError("Range", {Tensor::Scalar(0), Tensor::Scalar(1), Tensor::Scalar(0)}).ok());
}

// --- shape rules on partial information -------------------------------------------------------

TypeInfo Sym(DType t, std::vector<Dim> dims) {
  TypeInfo ti;
  ti.dtype = t;
  ti.shape = Shape(std::move(dims));
  return ti;
}
TypeInfo Known(const Tensor& v) {
  TypeInfo ti;
  ti.dtype = v.dtype();
  ti.shape = Shape::Of(v.dims());
  ti.value = &v;
  return ti;
}
TypeInfo ShapeOnly(const Tensor& v) {
  TypeInfo ti = Known(v);
  ti.value = nullptr;
  return ti;
}

Shape Infer(const std::string& op, std::vector<TypeInfo> ins, std::vector<Attribute> attrs = {},
            int64_t opset = 17) {
  std::vector<Tensor> placeholders(ins.size(), Tensor(DType::kF32, {}));
  auto n = testing_util::MakeNode(op, placeholders, 1, std::move(attrs));
  std::vector<TypeInfo> outs;
  absl::Status st = InferNode(*n.node, opset, std::move(ins), &outs);
  EXPECT_TRUE(st.ok()) << st;
  return st.ok() ? outs[0].shape : Shape();
}

TEST(MovementShapeTest, RulesKeepSymbolsAndResolveFromValues) {
  const Dim N = Dim::Symbol("N"), T = Dim::Symbol("T");
  TypeInfo x = Sym(DType::kF32, {N, T, 64});
  Tensor heads = I64({0, 0, 4, -1});
  EXPECT_EQ(Infer("Reshape", {x, Known(heads)}), Shape({N, T, 4, 16}));
  EXPECT_EQ(Infer("Reshape", {x, ShapeOnly(heads)}), Shape({Dim(), Dim(), Dim(), Dim()}));
  Tensor merge = I64({-1, 64});
  // Symbols multiply and divide as monomials (graph/sym_dim.h): the -1 of [N, T, 64] -> [-1, 64]
  // is N*T, and [64, N, 256] -> [64, -1, 64] is 4*N, the spelling torch's exporters use.
  EXPECT_EQ(Infer("Reshape", {x, Known(merge)}), Shape({Dim::Symbol("N*T"), 64}));
  EXPECT_EQ(Infer("Reshape", {Sym(DType::kF32, {64, N, 256}), Known(I64({64, -1, 64}))}),
            Shape({64, Dim::Symbol("4*N"), 64}));
  EXPECT_EQ(Infer("Reshape", {Sym(DType::kF32, {64, Dim::Symbol("4*N"), 64}), Known(I64({-1, 4, 64, 64}))}),
            Shape({N, 4, 64, 64}));
  // ...but a -1 that is no monomial quotient stays unknown: [N, 3] -> [2, -1].
  EXPECT_EQ(Infer("Reshape", {Sym(DType::kF32, {N, 3}), Known(I64({2, -1}))}), Shape({2, Dim()}));
  EXPECT_EQ(Infer("Flatten", {x}, {Attribute::Int("axis", 2)}), Shape({Dim::Symbol("N*T"), 64}));
  EXPECT_EQ(Infer("Flatten", {Sym(DType::kF32, {N, 1, 28, 28})}), Shape({N, 784}));
  EXPECT_EQ(Infer("Transpose", {x}, {Attribute::Ints("perm", {0, 2, 1})}), Shape({N, 64, T}));
  EXPECT_EQ(Infer("Concat", {x, Sym(DType::kF32, {N, 3, 64})}, {Attribute::Int("axis", 1)}),
            Shape({N, Dim(), 64}));
  Tensor s0 = I64({0}), s1 = I64({8}), ax = I64({-1}), big = I64({1LL << 62});
  EXPECT_EQ(Infer("Slice", {x, Known(s0), Known(s1), Known(ax)}), Shape({N, T, 8}));
  EXPECT_EQ(Infer("Slice", {x, Known(s0), Known(big), Known(I64({1}))}), Shape({N, T, 64}));
  EXPECT_EQ(Infer("Slice", {x, Known(s0), Known(s1)}), Shape({Dim(), T, 64}));
  EXPECT_EQ(Infer("Slice", {x, ShapeOnly(s0), Known(s1)}), Shape({Dim(), Dim(), Dim()}));
  EXPECT_EQ(Infer("Gather", {Sym(DType::kF32, {1000, 64}), Sym(DType::kI64, {N, T})}),
            Shape({N, T, 64}));
  EXPECT_EQ(Infer("Unsqueeze", {x, Known(I64({1}))}, {}, 13), Shape({N, 1, T, 64}));
  EXPECT_EQ(Infer("Unsqueeze", {x, ShapeOnly(I64({1, 2}))}, {}, 13), Shape(std::vector<Dim>(5)));
  EXPECT_EQ(Infer("Squeeze", {Sym(DType::kF32, {N, 1})}, {}, 13), Shape());  // N may be 1
  EXPECT_EQ(Infer("Expand", {Sym(DType::kF32, {N, 1, 64}), Known(I64({1, 5, 1}))}),
            Shape({N, 5, 64}));
  EXPECT_EQ(Infer("Tile", {x, Known(I64({1, 2, 1}))}), Shape({N, Dim(), 64}));
  EXPECT_EQ(Infer("Pad", {x, Known(I64({0, 0, 1, 0, 0, 1}))}), Shape({N, T, 66}));
  EXPECT_EQ(Infer("Shape", {x}, {Attribute::Int("start", 1)}, 15), Shape({2}));
  EXPECT_EQ(Infer("ConstantOfShape", {ShapeOnly(I64({1, 2, 3}))}), Shape({Dim(), Dim(), Dim()}));
  EXPECT_EQ(Infer("Range", {ShapeOnly(Tensor::Scalar(0)), Known(Tensor::Scalar(1)),
                            Known(Tensor::Scalar(1))}),
            Shape({Dim()}));
}

}  // namespace
}  // namespace mixtrain
