// Helpers for the elementwise kernel tests: tensors from float/double lists in any dtype, running
// one op through RunCpuKernel, and an independent numpy-broadcast reference (index arithmetic
// written out here, not kernels/common/broadcast.h, so the tests check that helper too).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain::ew_test {

// A tensor of dtype t holding `v` converted to t (rounded for fp16/bf16, truncated for ints).
inline Tensor Make(DType t, std::vector<int64_t> dims, const std::vector<double>& v) {
  Tensor r(t, std::move(dims));
  EXPECT_EQ(r.numel(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t) {
      case DType::kF32: r.data_as<float>()[i] = static_cast<float>(v[i]); break;
      case DType::kF16: r.data_as<uint16_t>()[i] = FloatToHalf(static_cast<float>(v[i])); break;
      case DType::kBF16:
        r.data_as<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(v[i]));
        break;
      case DType::kF64: r.data_as<double>()[i] = v[i]; break;
      case DType::kI8: r.data_as<int8_t>()[i] = static_cast<int8_t>(v[i]); break;
      case DType::kI32: r.data_as<int32_t>()[i] = static_cast<int32_t>(v[i]); break;
      case DType::kI64: r.data_as<int64_t>()[i] = static_cast<int64_t>(v[i]); break;
      case DType::kU8: r.data_as<uint8_t>()[i] = static_cast<uint8_t>(v[i]); break;
      case DType::kBool: r.data_as<bool>()[i] = v[i] != 0; break;
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

inline std::vector<double> Uniform(int64_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

inline int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Runs `op` on `inputs` and returns output 0 (a failed run fails the test, returns undefined).
inline Tensor RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                  std::vector<Attribute> attrs = {}, int64_t opset = 17) {
  auto n = testing_util::MakeNode(op, inputs, 1, std::move(attrs));
  auto r = testing_util::RunCpuKernel(*n.node, inputs, opset);
  EXPECT_TRUE(r.ok()) << op << ": " << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

inline absl::Status RunStatus(const std::string& op, const std::vector<Tensor>& inputs,
                              std::vector<Attribute> attrs = {}, int64_t opset = 17) {
  auto n = testing_util::MakeNode(op, inputs, 1, std::move(attrs));
  return testing_util::RunCpuKernel(*n.node, inputs, opset).status();
}

// Numpy broadcast of several dim lists (test-side reference).
inline std::vector<int64_t> RefBroadcast(const std::vector<std::vector<int64_t>>& shapes) {
  size_t r = 0;
  for (const auto& s : shapes) r = std::max(r, s.size());
  std::vector<int64_t> out(r, 1);
  for (const auto& s : shapes)
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[r - s.size() + k];
      if (s[k] != 1) o = s[k];
    }
  return out;
}

// Flat index into a tensor of dims `in` of the output element with multi-index `idx`.
inline int64_t RefIndex(const std::vector<int64_t>& in, const std::vector<int64_t>& idx) {
  int64_t flat = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    int64_t i = idx[idx.size() - in.size() + k];
    flat = flat * in[k] + (in[k] == 1 ? 0 : i);
  }
  return flat;
}

// Reference n-ary elementwise result over broadcast inputs, computed in double.
inline std::vector<double> RefMap(const std::vector<Tensor>& ins,
                                  const std::function<double(const std::vector<double>&)>& f) {
  std::vector<std::vector<int64_t>> shapes;
  for (const Tensor& t : ins) shapes.push_back(t.dims());
  std::vector<int64_t> out = RefBroadcast(shapes);
  std::vector<double> res(Count(out));
  std::vector<int64_t> idx(out.size(), 0);
  for (int64_t e = 0; e < Count(out); ++e) {
    int64_t rem = e;
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    std::vector<double> args;
    for (const Tensor& t : ins) args.push_back(t.GetDouble(RefIndex(t.dims(), idx)));
    res[e] = f(args);
  }
  return res;
}

// Relative tolerance per dtype: fp32 math is within a few ulp; fp16/bf16 outputs are rounded.
inline double RelTol(DType t) { return t == DType::kF32 ? 2e-6 : 1e-2; }

inline void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, DType t,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "]";
      continue;
    }
    EXPECT_NEAR(got[i], want[i], RelTol(t) * std::fabs(want[i]) + 1e-6)
        << what << " [" << i << "]";
  }
}

}  // namespace mixtrain::ew_test
