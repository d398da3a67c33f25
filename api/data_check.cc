// CheckTrainingData (mixtrain/data.h): a data set's arrays checked before training, in memory
// or a chunk at a time (api/data_check.h).
#include "api/data_check.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/dataset.h"

namespace mixtrain {
namespace api {
namespace {

// "[5, 3]": the index of flat element `i` in `shape`.
std::string IndexOf(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return absl::StrCat("[", absl::StrJoin(idx, ", "), "]");
}

std::string ShapeOf(const TensorInfo& in) {
  std::vector<std::string> dims;
  for (size_t d = 0; d < in.shape.size(); ++d)
    dims.push_back(in.shape[d] >= 0 ? absl::StrCat(in.shape[d])
                   : d < in.dim_names.size() && !in.dim_names[d].empty() ? in.dim_names[d]
                                                                          : "?");
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// A NaN or infinity: where, and which ("NaN", "+inf", "-inf"); index -1 when there is none.
struct NonFinite {
  int64_t index = -1;
  const char* what = "";
};

// The first of `n` elements whose bits have an all-ones exponent. Scans in blocks with a
// branch-free min-reduction the compiler vectorizes, then finds the element in the block.
template <typename Bits>
NonFinite FirstNonFinite(const void* data, int64_t n, Bits exponent_mask) {
  const Bits* p = static_cast<const Bits*>(data);
  constexpr int64_t kBlock = 4096;
  constexpr Bits kSign = Bits{1} << (8 * sizeof(Bits) - 1);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    Bits least = exponent_mask;  // (x & mask) ^ mask is 0 exactly for NaN and infinities
    for (int64_t i = b; i < e; ++i) least = std::min<Bits>(least, (p[i] & exponent_mask) ^ exponent_mask);
    if (least != 0) continue;
    for (int64_t i = b; i < e; ++i)
      if ((p[i] & exponent_mask) == exponent_mask)
        return {i, (p[i] & ~(exponent_mask | kSign)) != 0 ? "NaN" : (p[i] & kSign) ? "-inf" : "+inf"};
  }
  return {};
}

NonFinite FirstNonFinite(const HostTensor& t) {
  const int64_t n = t.num_elements();
  switch (t.type()) {
    case ElementType::kFloat32: return FirstNonFinite<uint32_t>(t.raw_data(), n, 0x7f800000u);
    case ElementType::kFloat64: return FirstNonFinite<uint64_t>(t.raw_data(), n, 0x7ff0000000000000ull);
    case ElementType::kFloat16: return FirstNonFinite<uint16_t>(t.raw_data(), n, 0x7c00);
    case ElementType::kBFloat16: return FirstNonFinite<uint16_t>(t.raw_data(), n, 0x7f80);
    default: return {};  // integers and bools are always finite
  }
}

// The first label outside [0, classes) that is not `ignore`, as (index, value); index -1 if none.
template <typename T>
std::pair<int64_t, int64_t> FirstBadLabel(const HostTensor& t, int64_t classes, std::optional<int64_t> ignore) {
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const int64_t v = static_cast<int64_t>(p[i]);
    if ((v < 0 || v >= classes) && v != ignore) return {i, v};
  }
  return {-1, 0};
}

std::pair<int64_t, int64_t> FirstBadLabel(const HostTensor& t, int64_t classes, std::optional<int64_t> ignore) {
  switch (t.type()) {
    case ElementType::kInt64: return FirstBadLabel<int64_t>(t, classes, ignore);
    case ElementType::kInt32: return FirstBadLabel<int32_t>(t, classes, ignore);
    case ElementType::kInt8: return FirstBadLabel<int8_t>(t, classes, ignore);
    case ElementType::kUInt8: return FirstBadLabel<uint8_t>(t, classes, ignore);
    default: return {-1, 0};  // float labels are not class indices
  }
}

}  // namespace

absl::Status CheckArrays(const std::map<std::string, CheckedArray>& arrays, const std::string& source,
                         const DataCheckOptions& options) {
  auto error = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(source, ": ", parts...)); };
  for (const TensorInfo& in : options.inputs) {
    auto it = arrays.find(in.name);
    if (it == arrays.end()) {
      std::vector<std::string> names;
      for (const auto& [name, t] : arrays) names.push_back(name);
      return error("no array '", in.name, "' for the model's input '", in.name, "' (arrays: ",
                   absl::StrJoin(names, ", "), ")");
    }
    const CheckedArray& t = it->second;
    if (t.type != in.type)
      return error("array '", in.name, "' is ", ElementTypeName(t.type), ", the model's input '", in.name,
                   "' is ", ElementTypeName(in.type));
    bool fits = t.shape.size() == in.shape.size();
    for (size_t d = 1; fits && d < in.shape.size(); ++d) fits = in.shape[d] < 0 || in.shape[d] == t.shape[d];
    if (!fits)
      return error("array '", in.name, "' has shape [", absl::StrJoin(t.shape, ", "), "], the model's input '",
                   in.name, "' is ", ShapeOf(in), " (the first dimension counts examples)");
  }
  // (Named entries, not a structured binding: clang before 16 cannot capture those in a lambda.)
  for (const auto& entry : arrays) {
    const std::string& name = entry.first;
    const CheckedArray& t = entry.second;
    const bool labels = name == options.labels_key;
    if (!labels && options.allow_nonfinite_inputs) continue;
    MT_RETURN_IF_ERROR(t.read([&](const HostTensor& chunk, int64_t first) -> absl::Status {
      if (const NonFinite bad = FirstNonFinite(chunk); bad.index >= 0)
        return error("array '", name, "' holds ", bad.what, " at ", IndexOf(first + bad.index, t.shape));
      return absl::OkStatus();
    }));
  }
  if (options.num_classes > 0) {
    if (auto it = arrays.find(options.labels_key); it != arrays.end()) {
      const CheckedArray& t = it->second;
      MT_RETURN_IF_ERROR(t.read([&](const HostTensor& chunk, int64_t first) -> absl::Status {
        const auto [i, v] = FirstBadLabel(chunk, options.num_classes, options.ignore_index);
        if (i >= 0)
          return error("array '", options.labels_key, "' holds label ", v, " at ", IndexOf(first + i, t.shape),
                       ", outside the model's ", options.num_classes, " classes [0, ", options.num_classes, ")");
        return absl::OkStatus();
      }));
    }
  }
  return absl::OkStatus();
}

}  // namespace api

inline namespace v1 {

absl::Status CheckTrainingData(const TensorMap& arrays, const std::string& source,
                               const DataCheckOptions& options) {
  auto error = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(source, ": ", parts...)); };
  if (options.shared_example_dim) {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [name, t] : arrays) shapes.emplace(name, t.shape());
    RowsPerExample rows;
    if (options.label_rows_per_example != 1) rows[options.labels_key] = options.label_rows_per_example;
    MT_RETURN_IF_ERROR(CheckExampleShapes(shapes, source, rows));
  } else {
    if (arrays.empty()) return error("holds no arrays");
    for (const auto& [name, t] : arrays)
      if (t.num_elements() == 0)
        return error("array '", name, "' is empty (shape [", absl::StrJoin(t.shape(), ", "), "])");
  }
  std::map<std::string, api::CheckedArray> checked;
  for (const auto& entry : arrays) {
    const HostTensor& t = entry.second;
    checked.emplace(entry.first, api::CheckedArray{.type = t.type(), .shape = t.shape(),
                                                   .read = [&t](const api::CheckedArray::Visit& visit) { return visit(t, 0); }});
  }
  return api::CheckArrays(checked, source, options);
}

}  // namespace v1
}  // namespace mixtrain
