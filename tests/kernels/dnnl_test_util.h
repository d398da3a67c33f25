// Helpers of the oneDNN kernel tests (dnnl_test.cc, dnnl_conv_test.cc): random tensors,
// dtype rounding, and a runner comparing a kernel with a reference loop.
#pragma once

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "graph/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain::dnnl_testing {

using testing_util::MakeNode;
using testing_util::RunCpuKernel;

// ---- tensors ------------------------------------------------------------------------------

inline Tensor Random(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
  return t;
}

inline Tensor ToType(const Tensor& f, DType dt) {
  if (dt == DType::kF32) return f;
  Tensor t(dt, f.dims());
  for (int64_t i = 0; i < f.numel(); ++i) {
    float v = f.data_as<float>()[i];
    t.data_as<uint16_t>()[i] = dt == DType::kBF16 ? FloatToBFloat16(v) : FloatToHalf(v);
  }
  return t;
}

inline Tensor ToF32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  Tensor f(DType::kF32, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) f.data_as<float>()[i] = static_cast<float>(t.GetDouble(i));
  return f;
}

inline void ExpectNear(const Tensor& got, const Tensor& want, float tol) {
  ASSERT_EQ(got.dims(), want.dims());
  Tensor g = ToF32(got);
  for (int64_t i = 0; i < want.numel(); ++i) {
    float w = want.data_as<float>()[i];
    ASSERT_NEAR(g.data_as<float>()[i], w, tol * (1.0f + std::fabs(w))) << "element " << i;
  }
}

inline float Tol(DType dt) { return dt == DType::kF32 ? 1e-5f : dt == DType::kF16 ? 4e-3f : 2e-2f; }

// Runs op on `inputs` converted to dt; compares output 0 with `ref` computed from the
// dt-rounded inputs in fp32.
template <typename RefFn>
void Check(const std::string& op, std::vector<Tensor> inputs, std::vector<Attribute> attrs,
           DType dt, const std::vector<int64_t>& want_dims, RefFn ref) {
  std::vector<Tensor> low, rounded;
  for (const Tensor& t : inputs) {
    low.push_back(t.defined() ? ToType(t, dt) : Tensor());
    rounded.push_back(t.defined() ? ToF32(low.back()) : Tensor());
  }
  auto one = MakeNode(op, low, 1, attrs);
  auto out = RunCpuKernel(*one.node, low);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].dtype(), dt);
  ASSERT_EQ((*out)[0].dims(), want_dims);
  Tensor want(DType::kF32, want_dims);
  ref(rounded, want);
  ExpectNear((*out)[0], want, Tol(dt));
}

inline const DType kAll[] = {DType::kF32, DType::kBF16, DType::kF16};

inline std::vector<int64_t> Strides(const std::vector<int64_t>& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (int64_t i = static_cast<int64_t>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

// Iterates every index of `dims` (row-major).
inline bool Next(std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

}  // namespace mixtrain::dnnl_testing
