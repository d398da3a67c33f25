// The public data API (include/mixtrain/data.h) over runtime/npy.h, runtime/idx.h and
// runtime/dataset.h, and CheckTrainingData, the checks of a data set before training.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_join.h"
#include "api/convert.h"
#include "runtime/dataset.h"
#include "runtime/idx.h"
#include "runtime/npy.h"

// The runtime's Dataset, FashionMnist, ReadNpz, WriteNpz and LoadFashionMnist share their names with
// the public API's (inline namespace mixtrain::v1); bind the runtime's before the public header
// makes the plain names ambiguous.
namespace mixtrain::api {
namespace {
using RtDataset = ::mixtrain::Dataset;
using RtFashionMnist = ::mixtrain::FashionMnist;

absl::StatusOr<std::map<std::string, Tensor>> RtReadNpz(const std::string& path) { return ::mixtrain::ReadNpz(path); }
absl::Status RtWriteNpz(const std::string& path, const std::map<std::string, Tensor>& t, bool compress) {
  return ::mixtrain::WriteNpz(path, t, compress);
}
absl::StatusOr<RtFashionMnist> RtLoadFashionMnist(const std::string& dir) {
  return ::mixtrain::LoadFashionMnist(dir.empty() ? std::string(kFashionMnistDir) : dir);
}
}  // namespace
}  // namespace mixtrain::api

#include "mixtrain/data.h"

namespace mixtrain {
inline namespace v1 {
namespace {

absl::StatusOr<TensorMap> ToHostTensors(const std::map<std::string, Tensor>& m) {
  TensorMap out;
  for (const auto& [name, t] : m) {
    MT_ASSIGN_OR_RETURN(HostTensor h, api::ToHostTensor(t));
    out.emplace(name, std::move(h));
  }
  return out;
}

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
  for (const TensorInfo& in : options.inputs) {
    auto it = arrays.find(in.name);
    if (it == arrays.end()) {
      std::vector<std::string> names;
      for (const auto& [name, t] : arrays) names.push_back(name);
      return error("no array '", in.name, "' for the model's input '", in.name, "' (arrays: ",
                   absl::StrJoin(names, ", "), ")");
    }
    const HostTensor& t = it->second;
    if (t.type() != in.type)
      return error("array '", in.name, "' is ", ElementTypeName(t.type()), ", the model's input '", in.name,
                   "' is ", ElementTypeName(in.type));
    bool fits = t.shape().size() == in.shape.size();
    for (size_t d = 1; fits && d < in.shape.size(); ++d) fits = in.shape[d] < 0 || in.shape[d] == t.shape()[d];
    if (!fits)
      return error("array '", in.name, "' has shape [", absl::StrJoin(t.shape(), ", "), "], the model's input '",
                   in.name, "' is ", ShapeOf(in), " (the first dimension counts examples)");
  }
  for (const auto& [name, t] : arrays) {
    const bool labels = name == options.labels_key;
    if (!labels && options.allow_nonfinite_inputs) continue;
    if (const NonFinite bad = FirstNonFinite(t); bad.index >= 0)
      return error("array '", name, "' holds ", bad.what, " at ", IndexOf(bad.index, t.shape()));
  }
  if (options.num_classes > 0) {
    if (auto it = arrays.find(options.labels_key); it != arrays.end()) {
      const auto [i, v] = FirstBadLabel(it->second, options.num_classes, options.ignore_index);
      if (i >= 0)
        return error("array '", options.labels_key, "' holds label ", v, " at ", IndexOf(i, it->second.shape()),
                     ", outside the model's ", options.num_classes, " classes [0, ", options.num_classes, ")");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorMap> ReadNpz(const std::string& path) {
  return api::Guarded("ReadNpz", [&]() -> absl::StatusOr<TensorMap> {
    MT_ASSIGN_OR_RETURN(auto arrays, api::RtReadNpz(path));
    return ToHostTensors(arrays);
  });
}

absl::Status WriteNpz(const std::string& path, const TensorMap& arrays, bool compress) {
  return api::Guarded("WriteNpz", [&] { return api::RtWriteNpz(path, api::ToTensors(arrays), compress); });
}

absl::StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir) {
  return api::Guarded("LoadFashionMnist", [&]() -> absl::StatusOr<FashionMnist> {
    MT_ASSIGN_OR_RETURN(api::RtFashionMnist fm, api::RtLoadFashionMnist(dir));
    FashionMnist out;
    MT_ASSIGN_OR_RETURN(out.train_images, api::ToHostTensor(fm.train_images));
    MT_ASSIGN_OR_RETURN(out.train_labels, api::ToHostTensor(fm.train_labels));
    MT_ASSIGN_OR_RETURN(out.test_images, api::ToHostTensor(fm.test_images));
    MT_ASSIGN_OR_RETURN(out.test_labels, api::ToHostTensor(fm.test_labels));
    return out;
  });
}

struct Dataset::Impl {
  api::RtDataset rt;
};

Dataset::Dataset() : impl_(std::make_shared<Impl>()) {}
Dataset::~Dataset() = default;
Dataset::Dataset(const Dataset&) = default;
Dataset& Dataset::operator=(const Dataset&) = default;

absl::StatusOr<Dataset> Dataset::Create(const TensorMap& arrays, const std::string& source,
                                        const std::map<std::string, int64_t>& rows_per_example) {
  return api::Guarded("Dataset::Create", [&]() -> absl::StatusOr<Dataset> {
    auto impl = std::make_shared<Impl>();
    MT_ASSIGN_OR_RETURN(impl->rt, api::RtDataset::Create(api::ToTensors(arrays), source, rows_per_example));
    Dataset d;
    d.impl_ = std::move(impl);
    return d;
  });
}

int64_t Dataset::size() const { return impl_->rt.size(); }

std::vector<int64_t> Dataset::Order(bool shuffle, uint64_t seed, int64_t epoch) const {
  return impl_->rt.Order(shuffle, seed, epoch);
}

int64_t Dataset::NumBatches(int64_t batch_size, bool drop_last) const {
  return batch_size < 1 ? 0 : impl_->rt.NumBatches(batch_size, drop_last);
}

absl::StatusOr<TensorMap> Dataset::Gather(const std::vector<int64_t>& order, int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > static_cast<int64_t>(order.size()))
    return absl::OutOfRangeError(absl::StrCat("Dataset::Gather: range [", begin, ", ", end,
                                              ") outside an order of ", order.size()));
  for (int64_t i = begin; i < end; ++i)
    if (order[i] < 0 || order[i] >= size())
      return absl::OutOfRangeError(absl::StrCat("Dataset::Gather: example ", order[i], " of ", size()));
  return api::Guarded("Dataset::Gather", [&] { return ToHostTensors(impl_->rt.Gather(order, begin, end)); });
}

Dataset Dataset::Head(int64_t n) const {
  Dataset d;
  auto impl = std::make_shared<Impl>();
  impl->rt = impl_->rt.Head(std::max<int64_t>(0, n));
  d.impl_ = std::move(impl);
  return d;
}

}  // namespace v1
}  // namespace mixtrain
