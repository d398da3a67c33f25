// The public data API (include/mixtrain/data.h) over runtime/npy.h, runtime/idx.h and
// runtime/dataset.h.
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
  api::RtDataset rt;
};

Dataset::Dataset() : impl_(std::make_shared<Impl>()) {}
Dataset::~Dataset() = default;
Dataset::Dataset(const Dataset&) = default;
Dataset& Dataset::operator=(const Dataset&) = default;

absl::StatusOr<Dataset> Dataset::Create(const TensorMap& arrays, const std::string& source) {
  return api::Guarded("Dataset::Create", [&]() -> absl::StatusOr<Dataset> {
    auto impl = std::make_shared<Impl>();
    MT_ASSIGN_OR_RETURN(impl->rt, api::RtDataset::Create(api::ToTensors(arrays), source));
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
