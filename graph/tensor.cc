#include <limits>
#include "graph/tensor.h"

#include <cstdlib>
#include <new>

#include "graph/half.h"

namespace mixtrain {

int64_t NumElements(std::span<const int64_t> dims) {
  // A zero dimension empties the tensor whatever the others are; readers of untrusted shapes
  // (.npy, ONNX, checkpoints) reject products that overflow, so an overflow here is a bug.
  for (int64_t d : dims) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : dims) MT_CHECK(!__builtin_mul_overflow(n, d, &n)) << "element count overflows";
  return n;
}

std::optional<int64_t> CheckedNumElements(std::span<const int64_t> dims, int64_t element_size) {
  for (int64_t d : dims)
    if (d == 0) return 0;
  int64_t n = 1, bytes = 0;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  if (__builtin_mul_overflow(n, element_size, &bytes)) return std::nullopt;
  return n;
}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
  for (int64_t d : dims_) MT_CHECK(d >= 0) << "negative dimension " << d;
  size_t bytes = nbytes();
  size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, alloc);
  buffer_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

Tensor Tensor::Scalar(float v) { return FromVector<float>(DType::kF32, {}, {v}); }
Tensor Tensor::ScalarI64(int64_t v) { return FromVector<int64_t>(DType::kI64, {}, {v}); }

Tensor Tensor::Reshaped(std::vector<int64_t> dims) const {
  MT_CHECK(NumElements(dims) == numel()) << "Reshaped: element count changes";
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::Clone() const {
  if (!defined()) return Tensor();
  Tensor t(dtype_, dims_);
  if (nbytes() > 0) std::memcpy(t.data(), data(), nbytes());
  return t;
}

double Tensor::GetDouble(int64_t i) const {
  MT_CHECK(i >= 0 && i < numel()) << "index " << i << " out of range";
  switch (dtype_) {
    case DType::kF32: return data_as<float>()[i];
    case DType::kF16: return HalfToFloat(data_as<uint16_t>()[i]);
    case DType::kBF16: return BFloat16ToFloat(data_as<uint16_t>()[i]);
    case DType::kF64: return data_as<double>()[i];
    case DType::kI8: return data_as<int8_t>()[i];
    case DType::kI32: return data_as<int32_t>()[i];
    case DType::kI64: return static_cast<double>(data_as<int64_t>()[i]);
    case DType::kU8: return data_as<uint8_t>()[i];
    case DType::kBool: return data_as<uint8_t>()[i] ? 1.0 : 0.0;
    default: MT_CHECK(false) << "GetDouble on " << DTypeName(dtype_);
  }
  return 0;
}

int64_t Tensor::GetInt(int64_t i) const {
  if (dtype_ == DType::kI64) {
    MT_CHECK(i >= 0 && i < numel()) << "index " << i << " out of range";
    return data_as<int64_t>()[i];
  }
  // Float contents as ints (a float tensor where a model wants ints, e.g. a fuzzed Reshape
  // shape): NaN reads as 0 and values past int64 saturate, since converting them is undefined.
  const double d = GetDouble(i);
  if (d != d) return 0;
  if (d >= 9.223372036854775807e18) return std::numeric_limits<int64_t>::max();
  if (d <= -9.223372036854775808e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(d);
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  std::vector<int64_t> v(numel());
  for (int64_t i = 0; i < numel(); ++i) v[i] = GetInt(i);
  return v;
}

bool Tensor::Identical(const Tensor& other) const {
  if (dtype_ != other.dtype_ || dims_ != other.dims_) return false;
  if (nbytes() == 0) return true;
  return std::memcmp(data(), other.data(), nbytes()) == 0;
}

Tensor ConvertFloat(const Tensor& t, DType to) {
  auto is_f = [](DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; };
  if (t.dtype() == to || !is_f(t.dtype()) || !is_f(to)) return t;
  Tensor out(to, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = static_cast<float>(t.GetDouble(i));
    if (to == DType::kF32) out.data_as<float>()[i] = v;
    else if (to == DType::kF16) out.data_as<uint16_t>()[i] = FloatToHalf(v);
    else out.data_as<uint16_t>()[i] = FloatToBFloat16(v);
  }
  return out;
}

}  // namespace mixtrain
