// See external_data.h.
#include "graph/external_data.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/verifier.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

bool IsWithin(const fs::path& dir, const fs::path& p) {
  auto d = dir.begin(), q = p.begin();
  for (; d != dir.end(); ++d, ++q) {
    if (d->empty()) continue;  // trailing separator of the folder
    if (q == p.end() || *d != *q) return false;
  }
  return true;
}

// Number of bytes a typed field must hold: counts must equal numel exactly.
absl::Status CheckCount(int64_t got, int64_t want, const std::string& what, const char* field) {
  if (got != want)
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", field, " holds ", got,
                                                   " elements but the dims need ", want));
  return absl::OkStatus();
}

// The tensor read from its external file, checked against the file before it is allocated, then
// read straight into its buffer (no staging copy).
absl::StatusOr<Tensor> ReadExternal(const onnx::TensorProto& p, const std::string& base_dir,
                                    const std::string& what, DType dtype, const std::vector<int64_t>& dims,
                                    size_t nbytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      int64_t v;
      if (!absl::SimpleAtoi(kv.value(), &v) || v < 0)
        return absl::InvalidArgumentError(absl::StrCat(what, ": external data ", kv.key(), " '",
                                                       kv.value(), "' is not a byte count"));
      (kv.key() == "offset" ? offset : length) = v;
    }
  }
  if (location.empty())
    return absl::InvalidArgumentError(absl::StrCat(what, ": external data without a location"));
  if (base_dir.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": external data '", location, "' needs the model's folder (load it from a file)"));
  absl::StatusOr<std::string> resolved = ResolveExternalPath(base_dir, location);
  if (!resolved.ok())
    return absl::Status(resolved.status().code(),
                        absl::StrCat(what, ": ", resolved.status().message()));
  const std::string& path = *resolved;
  if (length >= 0 && static_cast<size_t>(length) != nbytes)
    return absl::InvalidArgumentError(absl::StrCat(what, ": external data length ", length,
                                                   " does not match the dims (", nbytes, " bytes)"));
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": external data file '", path, "' is not a regular file"));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(what, ": cannot open external data file '", path, "'"));
  in.seekg(0, std::ios::end);
  int64_t size = in.tellg();
  if (size < 0 || static_cast<int64_t>(nbytes) > size || offset > size - static_cast<int64_t>(nbytes))
    return absl::InvalidArgumentError(absl::StrCat(what, ": external data file '", path, "' has ",
                                                   size, " bytes, need ", nbytes, " at offset ",
                                                   offset));
  Tensor t(dtype, dims);
  in.seekg(offset);
  if (nbytes > 0 && !in.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(nbytes)))
    return absl::DataLossError(absl::StrCat(what, ": reading external data file '", path, "' failed"));
  return t;
}

template <typename Src, typename Dst>
void CopyConverted(const Src& src, Tensor& t) {
  Dst* out = t.data_as<Dst>();
  for (int i = 0; i < src.size(); ++i) out[i] = static_cast<Dst>(src.Get(i));
}

}  // namespace

absl::StatusOr<std::string> ResolveExternalPath(const std::string& base_dir,
                                                const std::string& location) {
  fs::path loc(location);
  if (location.empty() || loc.is_absolute())
    return absl::PermissionDeniedError(absl::StrCat(
        "external data path '", location, "' must be relative to the model's folder"));
  // Lexical check first: '..' may not climb out of the folder at any point.
  int depth = 0;
  for (const fs::path& part : loc) {
    if (part == "..") {
      if (--depth < 0)
        return absl::PermissionDeniedError(
            absl::StrCat("external data path '", location, "' escapes the model's folder"));
    } else if (part != "." && !part.empty()) {
      ++depth;
    }
  }
  // Then the real location, so a symlink pointing outside is refused too.
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::absolute(base_dir), ec);
  if (ec)
    return absl::NotFoundError(absl::StrCat("model folder '", base_dir, "': ", ec.message()));
  fs::path full = fs::weakly_canonical(base / loc, ec);
  if (ec)
    return absl::NotFoundError(
        absl::StrCat("external data path '", location, "': ", ec.message()));
  if (!IsWithin(base, full))
    return absl::PermissionDeniedError(absl::StrCat(
        "external data path '", location, "' resolves to '", full.string(),
        "', outside the model's folder"));
  return full.string();
}

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& base_dir,
                                       const std::string& what) {
  absl::StatusOr<DType> dt = FromOnnxType(p.data_type());
  if (!dt.ok() || *dt == DType::kString || *dt == DType::kUndefined)
    return absl::UnimplementedError(absl::StrCat(what, ": ONNX element type ", p.data_type(),
                                                 " is not supported by mixtrain"));
  if (p.has_segment())
    return absl::UnimplementedError(absl::StrCat(what, ": segmented tensors are not supported"));
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (int64_t d : dims)
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dim ", d));
  // Before reading or allocating anything: a corrupt dims list must not make us allocate
  // petabytes (nor overflow the byte count the data is checked against).
  MT_RETURN_IF_ERROR(CheckTensorSize(dims, *dt, what));
  const int64_t numel = NumElements(dims);
  const size_t elem = DTypeSize(*dt);
  const size_t nbytes = static_cast<size_t>(numel) * elem;
  const bool external = p.data_location() == onnx::TensorProto::EXTERNAL;
  if (external) return ReadExternal(p, base_dir, what, *dt, dims, nbytes);
  const std::string* raw = nullptr;
  if (p.has_raw_data()) {
    raw = &p.raw_data();
    if (raw->size() != nbytes)
      return absl::InvalidArgumentError(absl::StrCat(what, ": raw_data has ", raw->size(),
                                                     " bytes but the dims need ", nbytes));
  }
  // Validate typed-field counts before allocating, so a bogus dims list fails cleanly.
  if (raw == nullptr) {
    switch (*dt) {
      case DType::kF32:
        MT_RETURN_IF_ERROR(CheckCount(p.float_data_size(), numel, what, "float_data"));
        break;
      case DType::kF64:
        MT_RETURN_IF_ERROR(CheckCount(p.double_data_size(), numel, what, "double_data"));
        break;
      case DType::kI64:
        MT_RETURN_IF_ERROR(CheckCount(p.int64_data_size(), numel, what, "int64_data"));
        break;
      default:
        MT_RETURN_IF_ERROR(CheckCount(p.int32_data_size(), numel, what, "int32_data"));
    }
  }
  Tensor t(*dt, dims);
  if (raw != nullptr) {
    if (nbytes > 0) std::memcpy(t.data(), raw->data(), nbytes);
    return t;
  }
  switch (*dt) {
    case DType::kF32: CopyConverted<decltype(p.float_data()), float>(p.float_data(), t); break;
    case DType::kF64: CopyConverted<decltype(p.double_data()), double>(p.double_data(), t); break;
    case DType::kI64: CopyConverted<decltype(p.int64_data()), int64_t>(p.int64_data(), t); break;
    case DType::kI32: CopyConverted<decltype(p.int32_data()), int32_t>(p.int32_data(), t); break;
    // fp16/bf16 hold their 16-bit patterns in int32_data.
    case DType::kF16:
    case DType::kBF16: CopyConverted<decltype(p.int32_data()), uint16_t>(p.int32_data(), t); break;
    case DType::kI8: CopyConverted<decltype(p.int32_data()), int8_t>(p.int32_data(), t); break;
    case DType::kU8: CopyConverted<decltype(p.int32_data()), uint8_t>(p.int32_data(), t); break;
    case DType::kBool: {
      uint8_t* out = t.data_as<uint8_t>();
      for (int i = 0; i < p.int32_data_size(); ++i) out[i] = p.int32_data(i) != 0;
      break;
    }
    default:
      MT_CHECK(false) << "unhandled dtype " << DTypeName(*dt);
  }
  return t;
}

void TensorToProto(const Tensor& t, onnx::TensorProto* p) {
  p->set_data_type(ToOnnxType(t.dtype()));
  for (int64_t d : t.dims()) p->add_dims(d);
  if (t.nbytes() > 0) p->set_raw_data(t.data(), t.nbytes());
  else p->set_raw_data("");
}

}  // namespace mixtrain
