#include "runtime/dataset.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"

namespace mixtrain {

absl::Status CheckExampleShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                const std::string& source) {
  if (shapes.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": holds no arrays"));
  const std::string& first = shapes.begin()->first;  // the array whose length the others must match
  for (const auto& [k, dims] : shapes) {
    if (dims.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": array '", k, "' is a scalar; examples need a first dimension"));
    for (int64_t d : dims)
      if (d == 0)
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": array '", k, "' is empty (shape [", absl::StrJoin(dims, ", "), "])"));
    if (dims[0] != shapes.begin()->second[0])
      return absl::InvalidArgumentError(absl::StrCat(source, ": array '", k, "' has ", dims[0],
                                                     " examples, array '", first, "' has ",
                                                     shapes.begin()->second[0]));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> Dataset::Create(std::map<std::string, Tensor> arrays,
                                        const std::string& source) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [k, t] : arrays) shapes.emplace(k, t.dims());
  MT_RETURN_IF_ERROR(CheckExampleShapes(shapes, source));
  Dataset d;
  d.size_ = arrays.begin()->second.dims()[0];
  d.arrays_ = std::move(arrays);
  return d;
}

std::vector<int64_t> Dataset::Order(bool shuffle, uint64_t seed, int64_t epoch) const {
  std::vector<int64_t> order(size_);
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  // std::mt19937_64 is specified bit-exactly by the standard; we shuffle with our own
  // Fisher-Yates so the order does not depend on the library's std::shuffle.
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
  for (int64_t i = size_ - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

int64_t Dataset::NumBatches(int64_t batch_size, bool drop_last) const {
  return drop_last ? size_ / batch_size : (size_ + batch_size - 1) / batch_size;
}

std::map<std::string, Tensor> Dataset::Gather(const std::vector<int64_t>& order, int64_t begin,
                                              int64_t end) const {
  std::map<std::string, Tensor> out;
  for (const auto& [k, t] : arrays_) {
    std::vector<int64_t> dims = t.dims();
    dims[0] = end - begin;
    Tensor b(t.dtype(), dims);
    size_t row = t.nbytes() / static_cast<size_t>(size_);
    const uint8_t* src = t.data_as<uint8_t>();
    uint8_t* dst = b.data_as<uint8_t>();
    for (int64_t i = begin; i < end; ++i)
      std::memcpy(dst + (i - begin) * row, src + order[i] * row, row);
    out.emplace(k, std::move(b));
  }
  return out;
}

Dataset Dataset::Head(int64_t n) const {
  n = std::min(n, size_);
  std::vector<int64_t> order(size_);
  std::iota(order.begin(), order.end(), 0);
  Dataset d;
  d.arrays_ = Gather(order, 0, n);
  d.size_ = n;
  return d;
}

}  // namespace mixtrain
