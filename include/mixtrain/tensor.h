// mixtrain public API: HostTensor, the plain host-memory tensor that batches, parameters and
// inference inputs/outputs are passed in. Owns its bytes (row-major, no strides); copying a
// HostTensor copies the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"

namespace mixtrain {
// The public API lives in an inline namespace: callers write mixtrain::Trainer, while the
// library's internal classes of the same names (mixtrain::Trainer in runtime/) stay distinct
// symbols. A future incompatible API would be v2, linkable beside v1.
inline namespace v1 {

enum class ElementType : uint8_t {
  kFloat32,
  kFloat16,   // IEEE half; elements stored as uint16_t bits
  kBFloat16,  // bfloat16; elements stored as uint16_t bits
  kFloat64,
  kInt8,
  kInt32,
  kInt64,
  kUInt8,
  kBool,      // one byte per element, 0 or 1
};

// Bytes per element.
size_t ElementSize(ElementType type);
// "f32", "f16", "bf16", "f64", "i8", "i32", "i64", "u8", "bool".
const char* ElementTypeName(ElementType type);
// Accepts those names and the usual aliases ("fp32", "float", "fp16", "float16", "bfloat16",
// "int64", ...).
absl::StatusOr<ElementType> ParseElementType(std::string_view name);

// The element type of a C++ type, for HostTensor::FromVector and data<T>().
template <typename T> struct ElementTypeOf;
template <> struct ElementTypeOf<float> { static constexpr ElementType value = ElementType::kFloat32; };
template <> struct ElementTypeOf<double> { static constexpr ElementType value = ElementType::kFloat64; };
template <> struct ElementTypeOf<int8_t> { static constexpr ElementType value = ElementType::kInt8; };
template <> struct ElementTypeOf<int32_t> { static constexpr ElementType value = ElementType::kInt32; };
template <> struct ElementTypeOf<int64_t> { static constexpr ElementType value = ElementType::kInt64; };
template <> struct ElementTypeOf<uint8_t> { static constexpr ElementType value = ElementType::kUInt8; };

class HostTensor {
 public:
  // An empty float32 tensor of shape {0}.
  HostTensor() : shape_{0} {}
  // Zero-filled. Fails for a negative dimension.
  static absl::StatusOr<HostTensor> Zeros(ElementType type, std::vector<int64_t> shape);
  // Copies `num_bytes` bytes, which must be exactly the size of `shape` in `type`.
  static absl::StatusOr<HostTensor> FromBytes(ElementType type, std::vector<int64_t> shape,
                                              const void* data, size_t num_bytes);
  // Copies `values` (as many as `shape` has elements) into a tensor of T's element type.
  template <typename T>
  static absl::StatusOr<HostTensor> FromVector(std::vector<int64_t> shape, const std::vector<T>& values) {
    return FromBytes(ElementTypeOf<T>::value, std::move(shape), values.data(), values.size() * sizeof(T));
  }
  // A float32 scalar (shape {}).
  static HostTensor Scalar(float value);

  ElementType type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  size_t num_bytes() const { return bytes_.size(); }

  void* raw_data() { return bytes_.data(); }
  const void* raw_data() const { return bytes_.data(); }
  // Typed element access; nullptr when T does not match type() (uint16_t matches f16 and bf16,
  // uint8_t matches u8 and bool).
  template <typename T>
  T* data() { return Matches(sizeof(T), TypeTag<T>()) ? reinterpret_cast<T*>(bytes_.data()) : nullptr; }
  template <typename T>
  const T* data() const {
    return Matches(sizeof(T), TypeTag<T>()) ? reinterpret_cast<const T*>(bytes_.data()) : nullptr;
  }
  // The same elements with another shape of the same element count.
  absl::StatusOr<HostTensor> Reshaped(std::vector<int64_t> shape) const;
  // Every element converted to float (f16/bf16 decoded, integers and bools cast).
  std::vector<float> ToFloats() const;
  // The tensor converted between the float types f32, f16 and bf16 (rounding to nearest even);
  // fails for other types. Converting to its own type copies it.
  absl::StatusOr<HostTensor> ConvertedTo(ElementType type) const;

  // Same type, shape and bytes.
  bool operator==(const HostTensor& other) const {
    return type_ == other.type_ && shape_ == other.shape_ && bytes_ == other.bytes_;
  }

 private:
  enum class Tag { kFloat, kDouble, kI8, kI32, kI64, kU8, kU16, kOther };
  template <typename T>
  static constexpr Tag TypeTag() {
    if constexpr (std::is_same_v<T, float>) return Tag::kFloat;
    else if constexpr (std::is_same_v<T, double>) return Tag::kDouble;
    else if constexpr (std::is_same_v<T, int8_t>) return Tag::kI8;
    else if constexpr (std::is_same_v<T, int32_t>) return Tag::kI32;
    else if constexpr (std::is_same_v<T, int64_t>) return Tag::kI64;
    else if constexpr (std::is_same_v<T, uint8_t>) return Tag::kU8;
    else if constexpr (std::is_same_v<T, uint16_t>) return Tag::kU16;
    else return Tag::kOther;
  }
  bool Matches(size_t size, Tag tag) const;

  ElementType type_ = ElementType::kFloat32;
  std::vector<int64_t> shape_;
  std::vector<unsigned char> bytes_;
};

// Tensors by name: a batch (graph inputs plus labels), feeds, fetched outputs.
using TensorMap = std::map<std::string, HostTensor>;

// A graph input as the model declares it: dimensions of -1 are symbolic (e.g. the batch size).
struct TensorInfo {
  std::string name;
  ElementType type = ElementType::kFloat32;
  std::vector<int64_t> shape;
  // Per dimension: the symbol naming a -1 dimension ("batch"), "" for known or unnamed ones.
  std::vector<std::string> dim_names;
};

}  // namespace v1
}  // namespace mixtrain
