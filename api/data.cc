// The public data API (include/mixtrain/data.h) over runtime/npy.h, runtime/mapped_npy.h,
// runtime/idx.h and runtime/dataset.h: files, Dataset (with its read-ahead) and OpenTrainingData.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_join.h"
#include "api/convert.h"
#include "api/read_ahead.h"
#include "runtime/dataset.h"
#include "runtime/idx.h"
#include "runtime/mapped_npy.h"
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

#include "api/data_check.h"  // after the bindings: it includes mixtrain/data.h
#include "mixtrain/data.h"

namespace mixtrain {
inline namespace v1 {
namespace {

using api::RtDataset;

absl::StatusOr<TensorMap> ToHostTensors(const std::map<std::string, Tensor>& m) {
  TensorMap out;
  for (const auto& [name, t] : m) {
    MT_ASSIGN_OR_RETURN(HostTensor h, api::ToHostTensor(t));
    out.emplace(name, std::move(h));
  }
  return out;
}

}  // namespace

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
  Impl() = default;
  explicit Impl(RtDataset d)
      : rt(std::move(d)),
        ahead(std::make_shared<api::ReadAhead>([rt = rt](const std::vector<int64_t>& indices) {
          // Guarded on the worker thread too: an exception escaping there would end the process.
          return api::Guarded("Dataset::Gather", [&] {
            return ToHostTensors(rt.Gather(indices, 0, static_cast<int64_t>(indices.size())));
          });
        })) {}
  RtDataset rt;
  std::shared_ptr<api::ReadAhead> ahead;  // null for the empty data set
};

Dataset::Dataset() : impl_(std::make_shared<Impl>()) {}
Dataset::~Dataset() = default;
Dataset::Dataset(const Dataset&) = default;
Dataset& Dataset::operator=(const Dataset&) = default;

absl::StatusOr<Dataset> Dataset::Create(const TensorMap& arrays, const std::string& source,
                                        const std::map<std::string, int64_t>& rows_per_example) {
  return api::Guarded("Dataset::Create", [&]() -> absl::StatusOr<Dataset> {
    MT_ASSIGN_OR_RETURN(RtDataset rt, RtDataset::Create(api::ToTensors(arrays), source, rows_per_example));
    Dataset d;
    d.impl_ = std::make_shared<Impl>(std::move(rt));
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
  if (begin == end || !impl_->ahead) return ToHostTensors(impl_->rt.Gather(order, begin, end));
  return api::Guarded("Dataset::Gather", [&] { return impl_->ahead->Gather(order, begin, end); });
}

Dataset Dataset::Head(int64_t n) const {
  Dataset d;
  d.impl_ = std::make_shared<Impl>(impl_->rt.Head(std::max<int64_t>(0, n)));
  return d;
}

// --- OpenTrainingData ------------------------------------------------------------------------

namespace {

// Keeps the arrays a step reads (`wanted`) when all of them are there; a file may hold others (a
// reference loss, gradients), which are named in one note. With one missing, every array stays,
// so the data check's error lists them all.
template <typename Array>
std::map<std::string, Array> KeepWanted(std::map<std::string, Array> arrays, const std::vector<TensorInfo>& wanted,
                                        const std::string& source, std::vector<std::string>& notes) {
  if (wanted.empty()) return arrays;
  for (const TensorInfo& w : wanted)
    if (!arrays.contains(w.name)) return arrays;
  std::map<std::string, Array> kept;
  std::vector<std::string> ignored;
  for (auto& entry : arrays) {  // not a structured binding: clang before 16 cannot capture one
    const std::string& name = entry.first;
    auto& t = entry.second;
    const bool read = std::any_of(wanted.begin(), wanted.end(), [&](const TensorInfo& w) { return w.name == name; });
    if (read) kept.emplace(name, std::move(t));
    else ignored.push_back(name);
  }
  if (!ignored.empty()) {
    constexpr size_t kShown = 4;
    std::string shown = absl::StrJoin(ignored.begin(), ignored.begin() + std::min(ignored.size(), kShown), ", ");
    if (ignored.size() > kShown) absl::StrAppend(&shown, ", ...");
    notes.push_back(absl::StrCat(source, ": ", ignored.size(), " array", ignored.size() == 1 ? "" : "s",
                                 " the model does not read ignored (", shown, ")"));
  }
  return kept;
}

// A folder's arrays must include every one the model reads: the error names the missing file.
absl::Status CheckFilesPresent(const std::map<std::string, std::shared_ptr<const MappedNpy>>& arrays,
                               const std::string& folder, const std::vector<TensorInfo>& wanted) {
  for (const TensorInfo& w : wanted) {
    if (arrays.contains(w.name)) continue;
    std::vector<std::string> files;
    for (const auto& [name, a] : arrays) files.push_back(name + ".npy");
    return absl::InvalidArgumentError(absl::StrCat(
        (std::filesystem::path(folder) / (w.name + ".npy")).string(), ": missing: the model reads an array '",
        w.name, "' (the folder holds ", files.empty() ? "no .npy files" : absl::StrJoin(files, ", "), ")"));
  }
  return absl::OkStatus();
}

// Serves each array in the type the model's input of its name wants when it is stored in one
// that converts (ServableAs); says which in `converted` ("'x' f64 to f32").
RtDataset ServeAsWanted(RtDataset d, const std::vector<TensorInfo>& wanted, std::set<std::string>& converted) {
  const auto arrays = d.arrays();
  for (const TensorInfo& w : wanted) {
    auto it = arrays.find(w.name);
    const DType to = api::ToDType(w.type);
    if (it == arrays.end() || it->second.stored == to || !ServableAs(it->second.stored, to)) continue;
    d = d.ServedAs(w.name, to);
    converted.insert(absl::StrCat("'", w.name, "' ", DTypeName(it->second.stored), " to ", DTypeName(to)));
  }
  return d;
}

// CheckTrainingData's checks over `d`, reading each array in chunks of about kChunkBytes.
absl::Status CheckDataset(const RtDataset& d, const std::string& source, const DataCheckOptions& options) {
  constexpr int64_t kChunkBytes = int64_t{16} << 20;
  std::map<std::string, api::CheckedArray> checked;
  for (const auto& entry : d.arrays()) {  // not a structured binding: a lambda captures the name
    const std::string name = entry.first;
    const auto& info = entry.second;
    MT_ASSIGN_OR_RETURN(ElementType type, api::ToElementType(info.dtype));
    const int64_t example_elements = NumElements(info.dims) / d.size();
    const int64_t example_bytes = example_elements * static_cast<int64_t>(DTypeSize(info.dtype));
    const int64_t chunk = std::max<int64_t>(1, kChunkBytes / example_bytes);
    checked.emplace(name, api::CheckedArray{
        .type = type, .shape = info.dims,
        .read = [&d, name, chunk, example_elements](const api::CheckedArray::Visit& visit) -> absl::Status {
          for (int64_t b = 0; b < d.size(); b += chunk) {
            MT_ASSIGN_OR_RETURN(HostTensor rows, api::ToHostTensor(d.Rows(name, b, std::min(d.size(), b + chunk))));
            MT_RETURN_IF_ERROR(visit(rows, b * example_elements));
          }
          return absl::OkStatus();
        }});
  }
  return api::CheckArrays(checked, source, options);
}

}  // namespace

absl::StatusOr<TrainingData> OpenTrainingData(const std::string& path, const DataCheckOptions& options) {
  return api::Guarded("OpenTrainingData", [&]() -> absl::StatusOr<TrainingData> {
    TrainingData out;
    RowsPerExample rows;
    if (options.label_rows_per_example != 1) rows[options.labels_key] = options.label_rows_per_example;
    // The training set, then the test set when there is one.
    std::vector<std::pair<RtDataset, std::string>> sets;
    if (IsDirectory(path)) {
      MT_ASSIGN_OR_RETURN(NpyDir dir, OpenNpyDir(path));
      const std::string test_folder = (std::filesystem::path(path) / "test").string();
      MT_RETURN_IF_ERROR(CheckFilesPresent(dir.train, path, options.inputs));
      auto train = KeepWanted(std::move(dir.train), options.inputs, path, out.notes);
      MT_ASSIGN_OR_RETURN(RtDataset d, RtDataset::Create(train, path, rows));
      sets.emplace_back(std::move(d), path);
      if (IsDirectory(test_folder)) {
        MT_RETURN_IF_ERROR(CheckFilesPresent(dir.test, test_folder, options.inputs));
        auto test = KeepWanted(std::move(dir.test), options.inputs, test_folder, out.notes);
        MT_ASSIGN_OR_RETURN(RtDataset t, RtDataset::Create(test, test_folder, rows));
        sets.emplace_back(std::move(t), test_folder);
      }
    } else {
      MT_ASSIGN_OR_RETURN(auto arrays, api::RtReadNpz(path));
      std::map<std::string, Tensor> train, test;
      for (auto& [k, v] : arrays) {
        if (k.rfind("test/", 0) == 0) test.emplace(k.substr(5), v);
        else train.emplace(k, v);
      }
      train = KeepWanted(std::move(train), options.inputs, path, out.notes);
      MT_ASSIGN_OR_RETURN(RtDataset d, RtDataset::Create(std::move(train), path, rows));
      sets.emplace_back(std::move(d), path);
      if (!test.empty()) {
        const std::string test_source = path + " (test/ arrays)";
        test = KeepWanted(std::move(test), options.inputs, test_source, out.notes);
        MT_ASSIGN_OR_RETURN(RtDataset t, RtDataset::Create(std::move(test), test_source, rows));
        sets.emplace_back(std::move(t), test_source);
      }
    }
    std::set<std::string> converted;
    for (auto& [d, source] : sets) {
      d = ServeAsWanted(std::move(d), options.inputs, converted);
      MT_RETURN_IF_ERROR(CheckDataset(d, source, options));
    }
    if (!converted.empty())
      out.notes.push_back(absl::StrCat(path, ": converting as batches are read: ", absl::StrJoin(converted, ", ")));
    out.train.impl_ = std::make_shared<Dataset::Impl>(std::move(sets[0].first));
    if (sets.size() > 1) {
      out.test.emplace();
      out.test->impl_ = std::make_shared<Dataset::Impl>(std::move(sets[1].first));
    }
    return out;
  });
}

}  // namespace v1
}  // namespace mixtrain
