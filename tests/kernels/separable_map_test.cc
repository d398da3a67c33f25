// The adjoint tables the CUDA PadGrad and ResizeGrad kernels upload (kernels/common/separable_map.h,
// built from the same pad::Source and Resize taps as there) summed on the CPU with sep::AdjointAt,
// the function the GPU kernel calls per element, against the CPU kernels: every pad mode with
// positive and negative pads, and Resize's modes with scales, sizes and a crop box.
#include <cmath>
#include <string>
#include <vector>

#include "graph/ops/movement_params.h"
#include "gtest/gtest.h"
#include "kernels/common/separable_map.h"
#include "kernels/common/resize_taps.h"
#include "tests/kernels/elementwise_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain {
namespace {

using ew_test::Make;
using ew_test::Uniform;
using V = std::vector<double>;

void ExpectNear(const std::vector<float>& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel()) << what;
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i)
    if (!(std::fabs(got[i] - want.GetDouble(i)) <= 1e-5 * (1 + std::fabs(want.GetDouble(i))))) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": tables " << got[i] << ", CPU kernel " << want.GetDouble(i);
    }
}

TEST(SeparableMap, PadGradTablesMatchTheCpuKernel) {
  const std::vector<int64_t> dy_dims = {4, 9, 6};
  const std::vector<double> dyv = Uniform(4 * 9 * 6, -1, 1, 7);
  std::vector<float> dy(dyv.begin(), dyv.end());
  for (const char* mode : {"constant", "edge", "reflect", "wrap"})
    for (const std::vector<int64_t>& pads : {std::vector<int64_t>{1, 2, 0, 0, 3, 2}, {0, -1, 2, 1, 1, -1},
                                             std::vector<int64_t>{0, 4, 1, 0, 3, 0}}) {
      SCOPED_TRACE(std::string(mode) + " pads " + ::testing::PrintToString(pads));
      auto full = movement::ExpandPads(3, pads, {});
      ASSERT_TRUE(full.ok());
      const std::vector<sep::Axis> axes = sep::PadAxes(pad::ModeOf(mode), dy_dims, *full);
      std::vector<int64_t> dx_dims;
      for (const sep::Axis& a : axes) dx_dims.push_back(a.in_len);
      std::vector<float> dx(ew_test::Count(dx_dims));
      sep::ApplyAdjoint(sep::BuildAdjoint(axes), dy_dims, dx_dims, dy.data(), dx.data());
      std::vector<Tensor> in = {Make(DType::kF32, dy_dims, dyv),
                                Make(DType::kI64, {6}, V(pads.begin(), pads.end()))};
      auto want = testing_util::RunCpuKernel(
          *testing_util::MakeNode("PadGrad", in, 1, {Attribute::String("mode", mode)}, "ai.mixtrain").node, in, 17);
      ASSERT_TRUE(want.ok()) << want.status();
      ExpectNear(dx, (*want)[0], "PadGrad");
    }
}

TEST(SeparableMap, ResizeGradTablesMatchTheCpuKernel) {
  using A = Attribute;
  struct Case {
    std::vector<Attribute> attrs;
    V roi, scales;
    std::vector<int64_t> out;
  };
  const std::vector<int64_t> in_dims = {2, 3, 5, 4};
  const std::vector<Case> cases = {
      {{A::String("mode", "nearest")}, {}, {1, 1, 2, 1.5}, {2, 3, 10, 6}},
      {{A::String("mode", "linear")}, {}, {1, 1, 0.5, 1.75}, {2, 3, 2, 7}},
      {{A::String("mode", "linear"), A::String("coordinate_transformation_mode", "align_corners")}, {}, {}, {2, 3, 9, 4}},
      {{A::String("mode", "cubic"), A::Int("exclude_outside", 1)}, {}, {1, 1, 1.5, 2}, {2, 3, 7, 8}},
      {{A::String("mode", "linear"), A::String("coordinate_transformation_mode", "tf_crop_and_resize")},
       {0, 0, -0.2, 0.1, 1, 1, 1.1, 0.9}, {}, {2, 3, 7, 6}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.out));
    const std::vector<double> dyv = Uniform(ew_test::Count(c.out), -1, 1, 11);
    std::vector<float> dy(dyv.begin(), dyv.end());
    std::vector<Tensor> in = {Make(DType::kF32, c.out, dyv), Make(DType::kI64, {4}, V(in_dims.begin(), in_dims.end())),
                              c.roi.empty() ? Tensor() : Make(DType::kF32, {8}, c.roi),
                              c.scales.empty() ? Tensor() : Make(DType::kF32, {4}, c.scales)};
    auto node = testing_util::MakeNode("ResizeGrad", in, 1, c.attrs, "ai.mixtrain");
    auto want = testing_util::RunCpuKernel(*node.node, in, 17);
    ASSERT_TRUE(want.ok()) << want.status();
    // The taps as the CUDA kernel gets them (its parameters from the host copies).
    std::vector<TensorView> views(in.size());
    std::vector<const TensorView*> ptrs;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].defined()) views[i] = {in[i].dtype(), in[i].dims(), const_cast<void*>(in[i].data())};
      ptrs.push_back(in[i].defined() ? &views[i] : nullptr);
    }
    Tensor out(DType::kF32, in_dims);
    TensorView ov{DType::kF32, in_dims, out.data()};
    KernelContext ctx(*node.node, DeviceType::kCPU, ptrs, {&ov});
    auto p = resize::ParamsOf(ctx, false);
    ASSERT_TRUE(p.ok()) << p.status();
    auto taps = resize::AllTaps(ctx, *p, in_dims, c.out, ptrs[3], ptrs[2]);
    ASSERT_TRUE(taps.ok()) << taps.status();
    std::vector<float> dx(ew_test::Count(in_dims));
    sep::ApplyAdjoint(sep::BuildAdjoint(resize::AdjointAxes(*taps, in_dims)), c.out, in_dims, dy.data(), dx.data());
    ExpectNear(dx, (*want)[0], "ResizeGrad");
  }
}

}  // namespace
}  // namespace mixtrain
