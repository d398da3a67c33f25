// Host tensors: initializers, constants, data fed to and read from the runtime.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph/check.h"
#include "graph/dtype.h"

namespace mixtrain {

int64_t NumElements(std::span<const int64_t> dims);
// The element count, or nullopt when it or its bytes at `element_size` overflow int64 (shapes a
// model computes or declares: the planner refuses them by name).
std::optional<int64_t> CheckedNumElements(std::span<const int64_t> dims, int64_t element_size = 1);

// A dense, row-major host tensor. Copies share the buffer (like a shared_ptr); use Clone() for a
// deep copy. Storage is 64-byte aligned so kernels may use aligned vector loads.
class Tensor {
 public:
  Tensor() = default;
  // Zero-filled.
  Tensor(DType dtype, std::vector<int64_t> dims);

  template <typename T>
  static Tensor FromVector(DType dtype, std::vector<int64_t> dims, const std::vector<T>& v) {
    Tensor t(dtype, std::move(dims));
    MT_CHECK(sizeof(T) == DTypeSize(dtype) && static_cast<int64_t>(v.size()) == t.numel())
        << "FromVector: element size or count mismatch";
    if (!v.empty()) std::memcpy(t.data(), v.data(), t.nbytes());
    return t;
  }
  static Tensor Scalar(float v);
  static Tensor ScalarI64(int64_t v);

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t numel() const { return NumElements(dims_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }

  void* data() { return buffer_.get(); }
  const void* data() const { return buffer_.get(); }
  template <typename T>
  T* data_as() { return static_cast<T*>(data()); }
  template <typename T>
  const T* data_as() const { return static_cast<const T*>(data()); }

  // True when no other Tensor shares this one's buffer (so its owner may overwrite it).
  bool sole_owner() const { return buffer_.use_count() == 1; }

  // Same bytes, new dims (numel must match).
  Tensor Reshaped(std::vector<int64_t> dims) const;
  Tensor Clone() const;
  // Element i as double / int64, whatever the dtype (for small shape-like tensors and tests).
  double GetDouble(int64_t i) const;
  int64_t GetInt(int64_t i) const;
  std::vector<int64_t> ToInt64Vector() const;

  // Bitwise equality of dtype, dims and bytes.
  bool Identical(const Tensor& other) const;

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> dims_;
  std::shared_ptr<uint8_t> buffer_;
};

// `t` converted between float types (f32, f16, bf16), rounding to nearest even; other dtypes and
// same-type conversions return `t` itself.
Tensor ConvertFloat(const Tensor& t, DType to);

}  // namespace mixtrain
