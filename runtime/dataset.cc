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
                                const std::string& source, const RowsPerExample& rows) {
  if (shapes.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": holds no arrays"));
  auto rows_of = [&](const std::string& k) {
    auto it = rows.find(k);
    return it == rows.end() ? int64_t{1} : it->second;
  };
  for (const auto& [k, dims] : shapes) {
    if (dims.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": array '", k, "' is a scalar; examples need a first dimension"));
    for (int64_t d : dims)
      if (d == 0)
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": array '", k, "' is empty (shape [", absl::StrJoin(dims, ", "), "])"));
    if (rows_of(k) < 1)
      return absl::InvalidArgumentError(absl::StrCat(source, ": array '", k, "': ", rows_of(k), " rows per example"));
  }
  // The array the others must match: the first with one row per example, when there is one.
  auto ref = shapes.begin();
  for (auto it = shapes.begin(); it != shapes.end(); ++it)
    if (rows_of(it->first) == 1) {
      ref = it;
      break;
    }
  const std::string& name = ref->first;
  const int64_t ref_rows = ref->second[0], ref_per = rows_of(name);
  if (ref_rows % ref_per != 0)
    return absl::InvalidArgumentError(absl::StrCat(source, ": array '", name, "' has ", ref_rows,
                                                   " rows, not a multiple of its ", ref_per, " rows per example"));
  const int64_t examples = ref_rows / ref_per;
  for (const auto& [k, dims] : shapes) {
    const int64_t per = rows_of(k);
    if (dims[0] == examples * per) continue;
    if (per == 1 && ref_per == 1)
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": array '", k, "' has ", dims[0], " examples, array '", name, "' has ", ref_rows));
    return absl::InvalidArgumentError(absl::StrCat(source, ": array '", k, "' has ", dims[0], " rows for the ", examples,
                                                   " examples of array '", name, "' (", per, " row",
                                                   per == 1 ? "" : "s", " per example: ", examples * per,
                                                   " expected)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> Dataset::Create(std::map<std::string, Tensor> arrays, const std::string& source,
                                        const RowsPerExample& rows) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [k, t] : arrays) shapes.emplace(k, t.dims());
  MT_RETURN_IF_ERROR(CheckExampleShapes(shapes, source, rows));
  Dataset d;
  d.arrays_ = std::move(arrays);
  for (const auto& [k, per] : rows)
    if (per != 1 && d.arrays_.contains(k)) d.rows_[k] = per;
  const auto& [name, first] = *d.arrays_.begin();
  d.size_ = first.dims()[0] / d.RowsOf(name);
  return d;
}

int64_t Dataset::RowsOf(const std::string& k) const {
  auto it = rows_.find(k);
  return it == rows_.end() ? 1 : it->second;
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
    dims[0] = (end - begin) * RowsOf(k);
    Tensor b(t.dtype(), dims);
    // An example's bytes: its k consecutive rows.
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
  d.rows_ = rows_;
  d.size_ = n;
  return d;
}

}  // namespace mixtrain
