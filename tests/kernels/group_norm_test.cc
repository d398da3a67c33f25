// GroupNormalization's CPU kernel and schema: against values from ONNX's reference implementation
// (onnx.reference, opset 21 per-channel and opset 18 per-group forms), against a plain-loop
// reference on a larger shape in every float storage type, and the schema's checks. Its gradient
// is checked by finite differences in tests/passes/grad_rules_shape_test.cc; here its dScale and
// dBias are checked against the plain-loop definition.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "graph/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain {
namespace {

using testing_util::MakeNode;
using testing_util::RunCpuKernel;

Tensor F32(std::vector<int64_t> dims, const std::vector<float>& v) {
  return Tensor::FromVector<float>(DType::kF32, std::move(dims), v);
}

absl::StatusOr<std::vector<Tensor>> GroupNorm(const Tensor& x, const Tensor& s, const Tensor& b,
                                              int64_t groups, float eps, int64_t opset) {
  auto n = MakeNode("GroupNormalization", {x, s, b}, 1,
                    {Attribute::Int("num_groups", groups), Attribute::Float("epsilon", eps)});
  return RunCpuKernel(*n.node, {x, s, b}, opset);
}

void ExpectNear(const Tensor& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.GetDouble(i), want[i], tol) << i;
}

// Values from onnx.reference.ReferenceEvaluator (onnx 1.17), GroupNormalization-21.
TEST(GroupNormKernel, MatchesOnnxReferenceOpset21) {
  const Tensor x = F32({2, 4, 2, 1}, {1.764f, 0.4f, 0.979f, 2.241f, 1.868f, -0.977f, 0.95f, -0.151f,
                                      -0.103f, 0.411f, 0.144f, 1.454f, 0.761f, 0.122f, 0.444f,
                                      0.334f});
  const Tensor s = F32({4}, {1.494f, -0.205f, 0.313f, -0.854f});
  const Tensor b = F32({4}, {-2.553f, 0.654f, 0.864f, -0.742f});
  auto y = GroupNorm(x, s, b, 2, 1e-5f, 21);
  ASSERT_TRUE(y.ok()) << y.status().message();
  ExpectNear((*y)[0], {-1.671023f, -4.549051f, 0.7602551f, 0.3948764f, 1.283392f, 0.4579544f,
                       -1.159578f, -0.2880072f, -4.013187f, -2.718043f, 0.7689608f, 0.3160324f,
                       1.332964f, 0.4662451f, -0.848397f, -0.4413132f},
             2e-5);
}

// GroupNormalization-18: scale and bias per group.
TEST(GroupNormKernel, MatchesOnnxReferenceOpset18PerGroup) {
  const Tensor x = F32({1, 4, 3}, {2.27f, -1.454f, 0.046f, -0.187f, 1.533f, 1.469f, 0.155f, 0.378f,
                                   -0.888f, -1.981f, -0.348f, 0.156f});
  const Tensor s = F32({2}, {1.23f, 1.202f});
  const Tensor b = F32({2}, {-0.387f, -0.302f});
  auto y = GroupNorm(x, s, b, 2, 1e-2f, 18);
  ASSERT_TRUE(y.ok()) << y.status().message();
  ExpectNear((*y)[0], {1.222857f, -2.394828f, -0.937651f, -1.163999f, 0.5068973f, 0.4447245f,
                       0.5443192f, 0.8717845f, -0.9872787f, -2.592299f, -0.1943133f, 0.5457876f},
             2e-5);
}

// y[n, c, s] = scale[c] * (x - mean) / sqrt(var + eps) + bias[c] with the statistics over the
// group of channel c in sample n, written out as loops.
std::vector<double> Reference(const std::vector<float>& x, const std::vector<float>& s,
                              const std::vector<float>& b, int64_t n, int64_t c, int64_t sp,
                              int64_t groups, double eps) {
  std::vector<double> y(x.size());
  const int64_t k = c / groups;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      double sum = 0, sq = 0;
      for (int64_t ch = g * k; ch < (g + 1) * k; ++ch)
        for (int64_t p = 0; p < sp; ++p) sum += x[(i * c + ch) * sp + p];
      const double mean = sum / (k * sp);
      for (int64_t ch = g * k; ch < (g + 1) * k; ++ch)
        for (int64_t p = 0; p < sp; ++p) {
          const double d = x[(i * c + ch) * sp + p] - mean;
          sq += d * d;
        }
      const double rstd = 1 / std::sqrt(sq / (k * sp) + eps);
      for (int64_t ch = g * k; ch < (g + 1) * k; ++ch)
        for (int64_t p = 0; p < sp; ++p) {
          const int64_t at = (i * c + ch) * sp + p;
          y[at] = (x[at] - mean) * rstd * s[ch] + b[ch];
        }
    }
  return y;
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// Rounds through the storage type, so the reference sees what the kernel reads.
Tensor Stored(DType t, std::vector<int64_t> dims, std::vector<float>& v) {
  Tensor out(t, dims);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF16) {
      out.data_as<uint16_t>()[i] = FloatToHalf(v[i]);
      v[i] = HalfToFloat(out.data_as<uint16_t>()[i]);
    } else if (t == DType::kBF16) {
      out.data_as<uint16_t>()[i] = FloatToBFloat16(v[i]);
      v[i] = BFloat16ToFloat(out.data_as<uint16_t>()[i]);
    } else {
      out.data_as<float>()[i] = v[i];
    }
  }
  return out;
}

TEST(GroupNormKernel, MatchesLoopsInEveryFloatType) {
  const int64_t n = 3, c = 6, sp = 35, groups = 3;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<float> x = RandomFloats(n * c * sp, 1), s = RandomFloats(c, 2), b = RandomFloats(c, 3);
    for (int64_t i = 0; i < n * c * sp; ++i) x[i] += 0.5f * static_cast<float>(i % 7);
    const Tensor xt = Stored(t, {n, c, 5, 7}, x), st = Stored(t, {c}, s), bt = Stored(t, {c}, b);
    auto y = GroupNorm(xt, st, bt, groups, 1e-5f, 21);
    ASSERT_TRUE(y.ok()) << y.status().message();
    const std::vector<double> want = Reference(x, s, b, n, c, sp, groups, 1e-5);
    const double tol = t == DType::kF32 ? 1e-5 : t == DType::kF16 ? 4e-3 : 3e-2;
    ASSERT_EQ((*y)[0].dtype(), t);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR((*y)[0].GetDouble(i), want[i], tol * (1 + std::abs(want[i])))
          << DTypeName(t) << " element " << i;
  }
}

// dScale[c] = sum over n, spatial of dY * xhat and dBias[c] = sum of dY, xhat from the forward
// with scale 1 and bias 0.
TEST(GroupNormGradKernel, ScaleAndBiasGradientsAreSums) {
  const int64_t n = 2, c = 4, sp = 6, groups = 2;
  const std::vector<float> x = RandomFloats(n * c * sp, 4), dy = RandomFloats(n * c * sp, 5),
                           s = RandomFloats(c, 6);
  const std::vector<double> xhat =
      Reference(x, std::vector<float>(c, 1), std::vector<float>(c, 0), n, c, sp, groups, 1e-5);
  const Tensor dyt = F32({n, c, sp}, dy), xt = F32({n, c, sp}, x), st = F32({c}, s);
  auto node = MakeNode("GroupNormalizationGrad", {dyt, xt, st}, 3,
                       {Attribute::Int("num_groups", groups), Attribute::Float("epsilon", 1e-5f)},
                       "ai.mixtrain");
  auto g = RunCpuKernel(*node.node, {dyt, xt, st}, 1);
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (int64_t ch = 0; ch < c; ++ch) {
    double ds = 0, db = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < sp; ++p) {
        const int64_t at = (i * c + ch) * sp + p;
        ds += dy[at] * xhat[at];
        db += dy[at];
      }
    EXPECT_NEAR((*g)[1].GetDouble(ch), ds, 1e-4) << "dScale " << ch;
    EXPECT_NEAR((*g)[2].GetDouble(ch), db, 1e-4) << "dBias " << ch;
  }
  // dX of a normalization sums to zero over each group (shifting a group's X changes nothing).
  for (int64_t i = 0; i < n; ++i)
    for (int64_t gi = 0; gi < groups; ++gi) {
      double sum = 0;
      for (int64_t at = (i * c + gi * 2) * sp; at < (i * c + gi * 2 + 2) * sp; ++at)
        sum += (*g)[0].GetDouble(at);
      EXPECT_NEAR(sum, 0, 1e-4) << "sample " << i << " group " << gi;
    }
}

TEST(GroupNormSchema, RejectsBadGroupsAndScaleSizes) {
  const Tensor x = F32({1, 6, 2}, std::vector<float>(12, 1));
  const Tensor s6 = F32({6}, std::vector<float>(6, 1)), s3 = F32({3}, std::vector<float>(3, 1)),
               s4 = F32({4}, std::vector<float>(4, 1));
  EXPECT_FALSE(GroupNorm(x, s6, s6, 4, 1e-5f, 21).ok());  // 4 does not divide 6
  EXPECT_FALSE(GroupNorm(x, s3, s3, 3, 1e-5f, 21).ok());  // per group is opset 18's form
  EXPECT_TRUE(GroupNorm(x, s3, s3, 3, 1e-5f, 18).ok());
  EXPECT_FALSE(GroupNorm(x, s4, s4, 3, 1e-5f, 18).ok());  // neither per group nor per channel
  auto missing = MakeNode("GroupNormalization", {x, s6, s6}, 1);
  EXPECT_FALSE(RunCpuKernel(*missing.node, {x, s6, s6}, 21).ok());  // no num_groups
}

}  // namespace
}  // namespace mixtrain
