// HostTensor and the tensor/dtype conversions of api/convert.h.
#include <cstring>

#include "api/convert.h"
#include "graph/half.h"
#include "mixtrain/mixtrain.h"

namespace mixtrain {
inline namespace v1 {

size_t ElementSize(ElementType type) { return DTypeSize(api::ToDType(type)); }
const char* ElementTypeName(ElementType type) { return DTypeName(api::ToDType(type)); }

absl::StatusOr<ElementType> ParseElementType(std::string_view name) {
  MT_ASSIGN_OR_RETURN(DType d, ParseDType(name));
  return api::ToElementType(d);
}

#define MT_STR2(x) #x
#define MT_STR(x) MT_STR2(x)
const char* Version() {
  return MT_STR(MIXTRAIN_VERSION_MAJOR) "." MT_STR(MIXTRAIN_VERSION_MINOR) "." MT_STR(MIXTRAIN_VERSION_PATCH);
}
#undef MT_STR
#undef MT_STR2


absl::StatusOr<HostTensor> HostTensor::Zeros(ElementType type, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("HostTensor: negative dimension ", d));
    if (d > 0 && n > (int64_t{1} << 50) / d)
      return absl::InvalidArgumentError("HostTensor: shape too large");
    n *= d;
  }
  return api::Guarded("HostTensor", [&]() -> absl::StatusOr<HostTensor> {
    HostTensor t;
    t.type_ = type;
    t.shape_ = std::move(shape);
    t.bytes_.assign(static_cast<size_t>(n) * ElementSize(type), 0);
    return t;
  });
}

absl::StatusOr<HostTensor> HostTensor::FromBytes(ElementType type, std::vector<int64_t> shape,
                                                 const void* data, size_t num_bytes) {
  MT_ASSIGN_OR_RETURN(HostTensor t, Zeros(type, std::move(shape)));
  if (num_bytes != t.num_bytes())
    return absl::InvalidArgumentError(absl::StrCat("HostTensor: ", num_bytes, " bytes given, the ",
                                                   ElementTypeName(type), " shape needs ", t.num_bytes()));
  if (num_bytes > 0) std::memcpy(t.bytes_.data(), data, num_bytes);
  return t;
}

HostTensor HostTensor::Scalar(float value) {
  HostTensor t;
  t.shape_.clear();
  t.bytes_.resize(sizeof(float));
  std::memcpy(t.bytes_.data(), &value, sizeof(float));
  return t;
}

absl::StatusOr<HostTensor> HostTensor::Reshaped(std::vector<int64_t> shape) const {
  MT_ASSIGN_OR_RETURN(HostTensor t, Zeros(type_, std::move(shape)));
  if (t.num_bytes() != num_bytes())
    return absl::InvalidArgumentError(absl::StrCat("HostTensor::Reshaped: ", num_elements(),
                                                   " elements cannot take a shape of ", t.num_elements()));
  t.bytes_ = bytes_;
  return t;
}

int64_t HostTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool HostTensor::Matches(size_t size, Tag tag) const {
  switch (type_) {
    case ElementType::kFloat32: return tag == Tag::kFloat;
    case ElementType::kFloat64: return tag == Tag::kDouble;
    case ElementType::kFloat16:
    case ElementType::kBFloat16: return tag == Tag::kU16;
    case ElementType::kInt8: return tag == Tag::kI8;
    case ElementType::kInt32: return tag == Tag::kI32;
    case ElementType::kInt64: return tag == Tag::kI64;
    case ElementType::kUInt8:
    case ElementType::kBool: return tag == Tag::kU8;
  }
  return false;
}

std::vector<float> HostTensor::ToFloats() const {
  std::vector<float> out(static_cast<size_t>(num_elements()));
  const unsigned char* p = bytes_.data();
  for (size_t i = 0; i < out.size(); ++i) {
    switch (type_) {
      case ElementType::kFloat32: { float v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; break; }
      case ElementType::kFloat64: { double v; std::memcpy(&v, p + 8 * i, 8); out[i] = static_cast<float>(v); break; }
      case ElementType::kFloat16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = HalfToFloat(v); break; }
      case ElementType::kBFloat16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = BFloat16ToFloat(v); break; }
      case ElementType::kInt8: out[i] = static_cast<int8_t>(p[i]); break;
      case ElementType::kInt32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); out[i] = static_cast<float>(v); break; }
      case ElementType::kInt64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); out[i] = static_cast<float>(v); break; }
      case ElementType::kUInt8:
      case ElementType::kBool: out[i] = p[i]; break;
    }
  }
  return out;
}

absl::StatusOr<HostTensor> HostTensor::ConvertedTo(ElementType type) const {
  auto is_float = [](ElementType t) {
    return t == ElementType::kFloat32 || t == ElementType::kFloat16 || t == ElementType::kBFloat16;
  };
  if (!is_float(type_) || !is_float(type))
    return absl::InvalidArgumentError(absl::StrCat("HostTensor::ConvertedTo: cannot convert ",
                                                   ElementTypeName(type_), " to ", ElementTypeName(type),
                                                   " (only between f32, f16 and bf16)"));
  return api::ToHostTensor(ConvertFloat(api::ToTensor(*this), api::ToDType(type)));
}

}  // namespace v1

namespace api {

DType ToDType(ElementType type) {
  switch (type) {
    case ElementType::kFloat32: return DType::kF32;
    case ElementType::kFloat16: return DType::kF16;
    case ElementType::kBFloat16: return DType::kBF16;
    case ElementType::kFloat64: return DType::kF64;
    case ElementType::kInt8: return DType::kI8;
    case ElementType::kInt32: return DType::kI32;
    case ElementType::kInt64: return DType::kI64;
    case ElementType::kUInt8: return DType::kU8;
    case ElementType::kBool: return DType::kBool;
  }
  return DType::kUndefined;
}

absl::StatusOr<ElementType> ToElementType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ElementType::kFloat32;
    case DType::kF16: return ElementType::kFloat16;
    case DType::kBF16: return ElementType::kBFloat16;
    case DType::kF64: return ElementType::kFloat64;
    case DType::kI8: return ElementType::kInt8;
    case DType::kI32: return ElementType::kInt32;
    case DType::kI64: return ElementType::kInt64;
    case DType::kU8: return ElementType::kUInt8;
    case DType::kBool: return ElementType::kBool;
    default: break;
  }
  return absl::UnimplementedError(absl::StrCat("no public element type for ", DTypeName(dtype)));
}

Tensor ToTensor(const HostTensor& t) {
  Tensor out(ToDType(t.type()), t.shape());
  if (t.num_bytes() > 0) std::memcpy(out.data(), t.raw_data(), t.num_bytes());
  return out;
}

absl::StatusOr<HostTensor> ToHostTensor(const Tensor& t) {
  MT_ASSIGN_OR_RETURN(ElementType type, ToElementType(t.dtype()));
  return HostTensor::FromBytes(type, t.dims(), t.data(), t.nbytes());
}

std::map<std::string, Tensor> ToTensors(const TensorMap& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : m) out.emplace(name, ToTensor(t));
  return out;
}

TensorInfo InfoOf(const Value& v) {
  TensorInfo info;
  info.name = v.name;
  info.type = ToElementType(v.dtype).value_or(ElementType::kFloat32);
  for (const Dim& d : v.shape.dims) {
    info.shape.push_back(d.known() ? d.value : -1);
    info.dim_names.push_back(d.known() ? "" : d.symbol);
  }
  return info;
}

std::vector<TensorInfo> InputInfos(const Graph& g) {
  std::vector<TensorInfo> out;
  for (const Value* v : g.inputs())
    if (!v->is_initializer()) out.push_back(InfoOf(*v));
  return out;
}

}  // namespace api
}  // namespace mixtrain
