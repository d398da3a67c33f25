// CUDA data movement against the CPU kernels: Concat, Split, Transpose, Expand, Where,
// DepthToSpace and SpaceToDepth by element size; Slice, Pad and their gradients; Resize, Upsample and ResizeGrad.
#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda/cuda_kernel_test_util.h"

namespace mixtrain::cuda_test {
namespace {

// Data movement by element size: floats, int64 and bool through Concat/Split (strided 2-D copies
// at every axis), Transpose (attention's [B, T, H, D] -> [B, H, T, D], the default reversal),
// Expand and Where with broadcasting.
TEST_F(CudaKernelTest, MovementOps) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kI64}) {
    Tensor a = Make(t, {2, 3, 4}, Uniform(24, -9, 9, 120));
    Tensor b = Make(t, {2, 5, 4}, Uniform(40, -9, 9, 121));
    Tensor c = Make(t, {2, 1, 4}, Uniform(8, -9, 9, 122));
    Check("Concat", {a, b, c}, {Attribute::Int("axis", 1)});
    Check("Concat", {a, a}, {Attribute::Int("axis", 0)});
    Check("Concat", {a, a, a}, {Attribute::Int("axis", -1)});
    Tensor whole = Make(t, {4, 6, 3}, Uniform(72, -9, 9, 123));
    Check("Split", {whole}, {Attribute::Int("axis", 1), Attribute::Ints("split", {1, 2, 3})}, 3, "", 11);
    Check("Split", {whole}, {Attribute::Int("axis", 0), Attribute::Ints("split", {3, 1})}, 2, "", 11);
    Tensor x4 = Make(t, {2, 5, 3, 4}, Uniform(120, -9, 9, 124));
    Check("Transpose", {x4}, {Attribute::Ints("perm", {0, 2, 1, 3})});
    Check("Transpose", {x4});
    Check("Expand", {c, Make(DType::kI64, {4}, {3, 2, 5, 4})});
    Tensor cond = Make(DType::kBool, {5, 1}, {1, 0, 0, 1, 1});
    Check("Where", {cond, Make(t, {5, 4}, Uniform(20, -9, 9, 125)), Make(t, {4}, Uniform(4, -9, 9, 126))});
  }
}

// DepthToSpace in both modes (PixelShuffle exports CRD) and SpaceToDepth, blocks of 2 and 3, by
// element size.
TEST_F(CudaKernelTest, DepthToSpaceAndSpaceToDepth) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kI64}) {
    for (int64_t b : {2, 3}) {
      Tensor depth = Make(t, {2, 2 * b * b, 3, 4}, Uniform(2 * 2 * b * b * 12, -9, 9, 160));
      for (const char* mode : {"DCR", "CRD"})
        Check("DepthToSpace", {depth}, {Attribute::Int("blocksize", b), Attribute::String("mode", mode)});
      Tensor space = Make(t, {2, 3, 2 * b, 3 * b}, Uniform(2 * 3 * 6 * b * b, -9, 9, 161));
      Check("SpaceToDepth", {space}, {Attribute::Int("blocksize", b)});
    }
  }
}

// Slice (negative steps, axes, clamped ends) and Pad in every mode (negative pads crop), with
// their gradients; integer data for the forward ops.
TEST_F(CudaKernelTest, SliceAndPad) {
  using I = std::vector<double>;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI64}) {
    Tensor x = Make(t, {4, 6, 5}, Uniform(120, -9, 9, 150));
    const std::vector<std::vector<Tensor>> slices = {
        {Make(DType::kI64, {2}, I{1, 0}), Make(DType::kI64, {2}, I{3, 100}), Make(DType::kI64, {2}, I{0, 2})},
        {Make(DType::kI64, {2}, I{-1, 4}), Make(DType::kI64, {2}, I{-100, 0}), Make(DType::kI64, {2}, I{1, 2}),
         Make(DType::kI64, {2}, I{-2, -1})},
        {Make(DType::kI32, {1}, I{1}), Make(DType::kI32, {1}, I{6}), Make(DType::kI32, {1}, I{1}),
         Make(DType::kI32, {1}, I{2})}};
    for (const auto& p : slices) {
      std::vector<Tensor> in = {x};
      in.insert(in.end(), p.begin(), p.end());
      Check("Slice", in);
      if (t == DType::kI64) continue;
      auto y = testing_util::RunCpuKernel(*MakeNode("Slice", in, 1).node, in, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      std::vector<Tensor> g = {Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, 151)), Make(DType::kI64, {3}, I{4, 6, 5})};
      g.insert(g.end(), p.begin(), p.end());
      Check("SliceGrad", g, {}, 1, "ai.mixtrain");
    }
    for (const char* mode : {"constant", "edge", "reflect", "wrap"}) {
      for (const I& pads : {I{1, 0, 2, 0, 2, 1}, I{0, -1, 3, 1, 0, -2}}) {
        std::vector<Tensor> in = {x, Make(DType::kI64, {6}, pads)};
        if (std::string(mode) == "constant") in.push_back(Make(t, {}, I{2.5}));
        Check("Pad", in, {Attribute::String("mode", mode)});
        if (t == DType::kI64) continue;
        auto y = testing_util::RunCpuKernel(*MakeNode("Pad", in, 1, {Attribute::String("mode", mode)}).node, in, 17);
        ASSERT_TRUE(y.ok()) << y.status();
        const std::vector<int64_t> yd = (*y)[0].dims();
        Check("PadGrad", {Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, 152)), Make(DType::kI64, {6}, pads)},
              {Attribute::String("mode", mode)}, 1, "ai.mixtrain");
      }
    }
  }
}

// Resize in nearest, linear and cubic modes with scales or sizes (and a crop box), Upsample, and
// ResizeGrad's adjoint of the same taps.
TEST_F(CudaKernelTest, ResizeAndGrad) {
  using A = Attribute;
  using V = std::vector<double>;
  struct Case {
    std::vector<Attribute> attrs;
    std::vector<double> roi, scales, sizes;
  };
  const std::vector<Case> cases = {
      {{A::String("mode", "nearest")}, {}, {1, 1, 2, 1.5}, {}},
      {{A::String("mode", "linear")}, {}, {1, 1, 0.5, 1.75}, {}},
      {{A::String("mode", "linear"), A::String("coordinate_transformation_mode", "align_corners")}, {}, {}, {2, 3, 9, 4}},
      {{A::String("mode", "cubic"), A::Int("exclude_outside", 1)}, {}, {1, 1, 1.5, 2}, {}},
      {{A::String("mode", "linear"), A::String("coordinate_transformation_mode", "tf_crop_and_resize"),
        A::Float("extrapolation_value", -2)},
       {0, 0, -0.2, 0.1, 1, 1, 1.1, 0.9}, {}, {2, 3, 7, 6}},
  };
  for (DType t : kDtypes) {
    Tensor x = Make(t, {2, 3, 5, 4}, Uniform(120, -2, 2, 190));
    for (const Case& c : cases) {
      std::vector<Tensor> in = {x, c.roi.empty() ? Tensor() : Make(DType::kF32, {8}, c.roi),
                                c.scales.empty() ? Tensor() : Make(DType::kF32, {4}, c.scales),
                                c.sizes.empty() ? Tensor() : Make(DType::kI64, {4}, c.sizes)};
      if (c.sizes.empty()) in.pop_back();
      Check("Resize", in, c.attrs);
      auto y = testing_util::RunCpuKernel(*MakeNode("Resize", in, 1, c.attrs).node, in, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      Check("ResizeGrad",
            {Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, 191)), Make(DType::kI64, {4}, V{2, 3, 5, 4}),
             c.roi.empty() ? Tensor() : Make(DType::kF32, {8}, c.roi),
             c.scales.empty() ? Tensor() : Make(DType::kF32, {4}, c.scales)},
            c.attrs, 1, "ai.mixtrain");
    }
    Check("Upsample", {x, Make(DType::kF32, {4}, V{1, 1, 2, 2})}, {A::String("mode", "nearest")}, 1, "", 9);
  }
}

}  // namespace
}  // namespace mixtrain::cuda_test
