// CUDA convolutions, pooling and normalization against the CPU kernels: cuDNN Conv, FusedConv,
// ConvGrad (symmetric and asymmetric pads) and ConvTranspose; MaxPool, AveragePool and their
// gradients, GlobalAveragePool; BatchNorm, GroupNorm, InstanceNorm and their gradients.
#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda/cuda_kernel_test_util.h"

namespace mixtrain::cuda_test {
namespace {

// Convolutions on cuDNN: 2-D with pads, strides, dilations and groups, 1-D (run as 2-D of height
// 1) and 3-D; FusedConv's bias, residual and activations; ConvGrad's three gradients.
TEST_F(CudaKernelTest, ConvForwardFusedAndGrad) {
  struct Case {
    std::vector<int64_t> x, w;
    std::vector<Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 8}, {8, 3, 3, 3}, {}},
      {{2, 4, 11, 10}, {6, 2, 3, 3},
       {Attribute::Ints("pads", {1, 1, 1, 1}), Attribute::Ints("strides", {2, 2}), Attribute::Int("group", 2)}},
      {{1, 3, 12, 12}, {4, 3, 3, 3}, {Attribute::Ints("dilations", {2, 2}), Attribute::Ints("pads", {2, 2, 2, 2})}},
      {{3, 2, 17}, {5, 2, 4}, {Attribute::Ints("strides", {2})}},
      {{1, 2, 5, 6, 7}, {3, 2, 2, 3, 3}, {Attribute::Ints("pads", {0, 1, 1, 0, 1, 1})}},
      // Asymmetric pads (a zero-padded copy of X for cuDNN): TF's SAME at stride 2, and 1-D.
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {Attribute::Ints("pads", {0, 0, 1, 1}), Attribute::Ints("strides", {2, 2})}},
      {{2, 3, 7, 9}, {4, 3, 3, 2}, {Attribute::String("auto_pad", "SAME_UPPER"), Attribute::Ints("strides", {2, 2})}},
      {{3, 2, 10}, {4, 2, 3}, {Attribute::Ints("pads", {0, 2})}}};
  int seed = 60;
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      Tensor x = Make(t, c.x, Uniform(ew_test::Count(c.x), -1, 1, ++seed));
      Tensor w = Make(t, c.w, Uniform(ew_test::Count(c.w), -0.5, 0.5, ++seed));
      Tensor b = Make(t, {c.w[0]}, Uniform(c.w[0], -1, 1, ++seed));
      Check("Conv", {x, w}, c.attrs);
      Check("Conv", {x, w, b}, c.attrs);
      // The output's shape, for Z and dY.
      auto probe = MakeNode("Conv", {x, w}, 1, c.attrs, "");
      auto y = testing_util::RunCpuKernel(*probe.node, {x, w}, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      Tensor z = Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, ++seed));
      for (const char* act : {"", "Relu", "Sigmoid", "Tanh"}) {
        std::vector<Attribute> fused = c.attrs;
        fused.push_back(Attribute::String("activation", act));
        Check("FusedConv", {x, w, b, z}, fused, 1, "ai.mixtrain");
        Check("FusedConv", {x, w, b}, fused, 1, "ai.mixtrain");
      }
      Tensor dy = Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, ++seed));
      Check("ConvGrad", {dy, x, w}, c.attrs, 3, "ai.mixtrain");
    }
}

// ConvTranspose: strides, pads (the crop), output_padding, groups, dilations, 1-D and 2-D, bias.
TEST_F(CudaKernelTest, ConvTranspose) {
  using A = Attribute;
  struct Case {
    std::vector<int64_t> x, w;
    std::vector<Attribute> attrs;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 4, 5, 6}, {4, 3, 3, 3}, {A::Ints("strides", {2, 2})}, true},
      {{2, 4, 5, 6}, {4, 3, 3, 3}, {A::Ints("strides", {2, 2}), A::Ints("pads", {1, 1, 1, 1}),
                                    A::Ints("output_padding", {1, 0})}, false},
      {{1, 4, 7, 5}, {4, 2, 2, 3}, {A::Int("group", 2), A::Ints("dilations", {2, 1}), A::Ints("pads", {0, 1, 1, 0})}, true},
      {{3, 2, 9}, {2, 5, 4}, {A::Ints("strides", {3})}, true},
  };
  int seed = 200;
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      std::vector<Tensor> in = {Make(t, c.x, Uniform(ew_test::Count(c.x), -1, 1, ++seed)),
                                Make(t, c.w, Uniform(ew_test::Count(c.w), -1, 1, ++seed))};
      const int64_t m = c.w[1] * (c.attrs.size() > 0 && c.attrs[0].name == "group" ? 2 : 1);
      if (c.bias) in.push_back(Make(t, {m}, Uniform(m, -1, 1, ++seed)));
      Check("ConvTranspose", in, c.attrs);
    }
}

// MaxPool and MaxPoolGrad: the 2x2/2 pool of every CNN, overlapping 3x3/2 windows with pads,
// ceil_mode, dilations and 1-D; ties (a Relu's zeros) go to the first maximum; relu = 1 drops
// windows whose maximum is not > 0.
TEST_F(CudaKernelTest, MaxPoolAndGrad) {
  struct Case {
    std::vector<int64_t> x;
    std::vector<Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 8, 10}, {Attribute::Ints("kernel_shape", {2, 2}), Attribute::Ints("strides", {2, 2})}},
      {{2, 2, 9, 9},
       {Attribute::Ints("kernel_shape", {3, 3}), Attribute::Ints("strides", {2, 2}), Attribute::Ints("pads", {1, 1, 1, 1})}},
      {{1, 2, 7, 8},
       {Attribute::Ints("kernel_shape", {2, 3}), Attribute::Ints("strides", {2, 2}), Attribute::Int("ceil_mode", 1)}},
      {{1, 2, 9, 9}, {Attribute::Ints("kernel_shape", {2, 2}), Attribute::Ints("dilations", {2, 2})}},
      {{3, 4, 13}, {Attribute::Ints("kernel_shape", {3}), Attribute::Ints("strides", {2})}}};
  int seed = 90;
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      std::vector<double> v = Uniform(ew_test::Count(c.x), -1, 1, ++seed);
      for (size_t i = 0; i < v.size(); i += 3) v[i] = 0;  // ties at zero, as after a Relu
      Tensor x = Make(t, c.x, v);
      Check("MaxPool", {x}, c.attrs);
      auto probe = MakeNode("MaxPool", {x}, 1, c.attrs, "");
      auto y = testing_util::RunCpuKernel(*probe.node, {x}, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      Tensor dy = Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, ++seed));
      Check("MaxPoolGrad", {dy, x}, c.attrs, 1, "ai.mixtrain");
      std::vector<Attribute> relu = c.attrs;
      relu.push_back(Attribute::Int("relu", 1));
      Check("MaxPoolGrad", {dy, x}, relu, 1, "ai.mixtrain");
    }
}

// AveragePool's divisors (pads counted or not, ceil_mode windows past the end pads) and their
// gradient; GlobalAveragePool.
TEST_F(CudaKernelTest, AveragePoolAndGrad) {
  using A = Attribute;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<Attribute>>> cases = {
      {{2, 3, 8, 10}, {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})}},
      {{2, 2, 9, 9}, {A::Ints("kernel_shape", {3, 3}), A::Ints("strides", {2, 2}), A::Ints("pads", {1, 1, 1, 1})}},
      {{2, 2, 9, 9},
       {A::Ints("kernel_shape", {3, 3}), A::Ints("strides", {2, 2}), A::Ints("pads", {1, 1, 1, 1}),
        A::Int("count_include_pad", 1)}},
      {{1, 2, 7, 8},
       {A::Ints("kernel_shape", {2, 3}), A::Ints("strides", {2, 2}), A::Int("ceil_mode", 1), A::Ints("pads", {0, 1, 0, 1}),
        A::Int("count_include_pad", 1)}},
      {{3, 4, 13}, {A::Ints("kernel_shape", {3}), A::Ints("strides", {2})}}};
  int seed = 130;
  for (DType t : kDtypes) {
    for (const auto& [xd, attrs] : cases) {
      Tensor x = Make(t, xd, Uniform(ew_test::Count(xd), -1, 1, ++seed));
      Check("AveragePool", {x}, attrs);
      auto probe = MakeNode("AveragePool", {x}, 1, attrs, "");
      auto y = testing_util::RunCpuKernel(*probe.node, {x}, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      Check("AveragePoolGrad", {Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, ++seed)), x}, attrs, 1, "ai.mixtrain");
    }
    Check("GlobalAveragePool", {Make(t, {3, 5, 7, 9}, Uniform(945, -1, 1, ++seed))});
    Check("GlobalAveragePool", {Make(t, {2, 4, 1000}, Uniform(8000, -1, 1, ++seed))});
  }
}

// BatchNormalization in training (opset 15's three outputs, opset 9's five) and inference, with
// parameters in the data's dtype or f32; its gradient in both modes.
TEST_F(CudaKernelTest, BatchNormAndGrad) {
  for (DType t : kDtypes)
    for (DType pt : {t, DType::kF32}) {
      const int64_t C = 6;
      Tensor x = Make(t, {4, C, 5, 7}, Uniform(4 * C * 35, -2, 3, 140));
      Tensor scale = Make(pt, {C}, Uniform(C, 0.5, 1.5, 141)), bias = Make(pt, {C}, Uniform(C, -1, 1, 142));
      Tensor mean = Make(pt, {C}, Uniform(C, -0.5, 0.5, 143)), var = Make(pt, {C}, Uniform(C, 0.5, 2, 144));
      const std::vector<Tensor> in = {x, scale, bias, mean, var};
      Check("BatchNormalization", in, {Attribute::Int("training_mode", 1), Attribute::Float("momentum", 0.8f)}, 3, "",
            15);
      Check("BatchNormalization", in, {}, 1, "", 15);  // inference
      Check("BatchNormalization", in, {Attribute::Float("epsilon", 1e-3f)}, 5, "", 9);
      Tensor dy = Make(t, {4, C, 5, 7}, Uniform(4 * C * 35, -1, 1, 145));
      for (int training = 0; training < 2; ++training)
        Check("BatchNormalizationGrad", {dy, x, scale, mean, var}, {Attribute::Int("training_mode", training)}, 3,
              "ai.mixtrain");
    }
}

// GroupNormalization with per-channel (opset 21) and per-group (opset 18) parameters, and its
// gradient; one group per channel is InstanceNormalization's.
TEST_F(CudaKernelTest, GroupNormAndGrad) {
  for (DType t : kDtypes)
    for (DType pt : {t, DType::kF32})
      for (int64_t groups : {1, 3, 6}) {
        const int64_t C = 6;
        Tensor x = Make(t, {3, C, 5, 4}, Uniform(3 * C * 20, -2, 3, 170));
        for (int64_t affine : {C, groups}) {
          Tensor scale = Make(pt, {affine}, Uniform(affine, 0.5, 1.5, 171));
          Tensor bias = Make(pt, {affine}, Uniform(affine, -1, 1, 172));
          const std::vector<Attribute> attrs = {Attribute::Int("num_groups", groups), Attribute::Float("epsilon", 1e-4f)};
          Check("GroupNormalization", {x, scale, bias}, attrs, 1, "", affine == C ? 21 : 18);
          Tensor dy = Make(t, {3, C, 5, 4}, Uniform(3 * C * 20, -1, 1, 173));
          Check("GroupNormalizationGrad", {dy, x, scale}, attrs, 3, "ai.mixtrain");
        }
      }
  for (DType t : kDtypes) {
    Tensor x = Make(t, {2, 5, 7, 3}, Uniform(210, -2, 3, 174));
    Check("InstanceNormalization", {x, Make(t, {5}, Uniform(5, 0.5, 1.5, 175)), Make(t, {5}, Uniform(5, -1, 1, 176))},
          {Attribute::Float("epsilon", 1e-4f)});
  }
}

}  // namespace
}  // namespace mixtrain::cuda_test
