// Helpers for the reduction / normalization / loss kernel tests (reduce_test, norm_loss_test):
// tensors from double lists in any dtype, values back as double, seeded uniform data, and running
// one op through RunCpuKernel.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain::red_test {

inline int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// A tensor of dtype t holding `v` converted to t (rounded to nearest-even for fp16/bf16).
inline Tensor Make(DType t, std::vector<int64_t> dims, const std::vector<double>& v) {
  Tensor r(t, std::move(dims));
  EXPECT_EQ(r.numel(), static_cast<int64_t>(v.size()));
  for (int64_t i = 0; i < r.numel() && i < static_cast<int64_t>(v.size()); ++i) {
    switch (t) {
      case DType::kF32: r.data_as<float>()[i] = static_cast<float>(v[i]); break;
      case DType::kF16: r.data_as<uint16_t>()[i] = FloatToHalf(static_cast<float>(v[i])); break;
      case DType::kBF16: r.data_as<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(v[i])); break;
      case DType::kF64: r.data_as<double>()[i] = v[i]; break;
      case DType::kI32: r.data_as<int32_t>()[i] = static_cast<int32_t>(v[i]); break;
      case DType::kI64: r.data_as<int64_t>()[i] = static_cast<int64_t>(v[i]); break;
      default: ADD_FAILURE() << "Make: dtype " << DTypeName(t);
    }
  }
  return r;
}

inline std::vector<double> Values(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.GetDouble(i);
  return v;
}

// `v` as the kernel sees it after rounding to dtype t.
inline std::vector<double> Rounded(DType t, const std::vector<double>& v) {
  return Values(Make(t, {static_cast<int64_t>(v.size())}, v));
}

inline std::vector<double> Uniform(int64_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// Runs `op` with `num_outputs` outputs; a failed run returns its status.
inline absl::StatusOr<std::vector<Tensor>> RunAll(const std::string& op,
                                                  const std::vector<Tensor>& inputs,
                                                  std::vector<Attribute> attrs, int64_t opset,
                                                  int num_outputs) {
  auto n = testing_util::MakeNode(op, inputs, num_outputs, std::move(attrs));
  return testing_util::RunCpuKernel(*n.node, inputs, opset);
}

// Runs `op` and returns output 0 (a failed run fails the test and returns an undefined tensor).
inline Tensor Run(const std::string& op, const std::vector<Tensor>& inputs,
                  std::vector<Attribute> attrs = {}, int64_t opset = 17) {
  auto r = RunAll(op, inputs, std::move(attrs), opset, 1);
  EXPECT_TRUE(r.ok()) << op << ": " << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

inline absl::Status RunStatus(const std::string& op, const std::vector<Tensor>& inputs,
                              std::vector<Attribute> attrs = {}, int64_t opset = 17) {
  return RunAll(op, inputs, std::move(attrs), opset, 1).status();
}

inline void ExpectNear(const std::vector<double>& got, const std::vector<double>& want,
                       double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " at " << i;
}

// Relative tolerance of one rounding to the storage type, with headroom.
inline double Tol(DType t) { return t == DType::kF32 ? 1e-5 : t == DType::kF16 ? 2e-3 : 1.6e-2; }

}  // namespace mixtrain::red_test
