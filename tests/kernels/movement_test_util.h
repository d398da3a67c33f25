// Helpers for the data-movement kernel tests: every movement op's output is some input element or
// a fill value, so each test states the expected *source index* of every output element, computed
// here with plain multi-index arithmetic independent of the kernels' copy engines, and compares
// bytes. That checks any dtype with the same reference.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "graph/tensor.h"
#include "graph/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain::movement_test {

inline const std::vector<DType> kAllTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                             DType::kF64, DType::kI8,  DType::kI32,
                                             DType::kI64, DType::kU8,  DType::kBool};

// Element i holds a value derived from i (distinct within the type's range where possible).
inline Tensor Iota(DType t, std::vector<int64_t> dims) {
  Tensor x(t, std::move(dims));
  for (int64_t i = 0; i < x.numel(); ++i) {
    void* p = static_cast<uint8_t*>(x.data()) + i * DTypeSize(t);
    auto put = [&](auto v) { std::memcpy(p, &v, sizeof(v)); };
    switch (t) {
      case DType::kF32: put(static_cast<float>(i)); break;
      case DType::kF16: put(FloatToHalf(static_cast<float>(i % 2048))); break;
      case DType::kBF16: put(FloatToBFloat16(static_cast<float>(i % 256))); break;
      case DType::kF64: put(static_cast<double>(i)); break;
      case DType::kI8: put(static_cast<int8_t>(i % 127)); break;
      case DType::kI32: put(static_cast<int32_t>(i)); break;
      case DType::kI64: put(static_cast<int64_t>(i)); break;
      case DType::kU8: put(static_cast<uint8_t>(i % 251)); break;
      case DType::kBool: put(static_cast<uint8_t>(i % 3 == 0)); break;
      default: break;
    }
  }
  return x;
}

inline Tensor I64(std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(v.size())}, v);
}

inline std::vector<int64_t> Unravel(int64_t i, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    idx[d] = i % dims[d];
    i /= dims[d];
  }
  return idx;
}

inline int64_t Ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  int64_t i = 0;
  for (size_t d = 0; d < dims.size(); ++d) i = i * dims[d] + idx[d];
  return i;
}

// Expects `out` (dims `dims`) to hold in[src[i]] at i, or `fill` where src[i] == -1.
inline void ExpectGathered(const Tensor& out, const std::vector<int64_t>& dims, const Tensor& in,
                           const std::vector<int64_t>& src, const std::vector<uint8_t>& fill = {}) {
  ASSERT_EQ(out.dtype(), in.dtype());
  ASSERT_EQ(out.dims(), dims);
  ASSERT_EQ(out.numel(), static_cast<int64_t>(src.size()));
  const size_t es = DTypeSize(in.dtype());
  for (size_t i = 0; i < src.size(); ++i) {
    const void* want = src[i] < 0 ? fill.data() : static_cast<const uint8_t*>(in.data()) + src[i] * es;
    ASSERT_EQ(std::memcmp(static_cast<const uint8_t*>(out.data()) + i * es, want, es), 0)
        << "element " << i << " (expected source " << src[i] << ") dtype " << DTypeName(in.dtype());
  }
}

// Runs `op` on inputs and returns its outputs; the test fails on an error.
inline std::vector<Tensor> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                               std::vector<Attribute> attrs = {}, int num_outputs = 1,
                               int64_t opset = 17) {
  auto n = testing_util::MakeNode(op, inputs, num_outputs, std::move(attrs));
  auto r = testing_util::RunCpuKernel(*n.node, inputs, opset);
  EXPECT_TRUE(r.ok()) << op << ": " << r.status();
  return r.ok() ? *r : std::vector<Tensor>(num_outputs);
}

// The error status of running `op`, which must fail.
inline absl::Status RunError(const std::string& op, const std::vector<Tensor>& inputs,
                             std::vector<Attribute> attrs = {}, int num_outputs = 1,
                             int64_t opset = 17) {
  auto n = testing_util::MakeNode(op, inputs, num_outputs, std::move(attrs));
  auto r = testing_util::RunCpuKernel(*n.node, inputs, opset);
  return r.ok() ? absl::OkStatus() : r.status();
}

}  // namespace mixtrain::movement_test
