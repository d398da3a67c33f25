#include "runtime/dataset.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"

namespace mixtrain {

absl::Status CheckExampleShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                const std::string& source, const RowsPerExample& rows,
                                const std::function<std::string(const std::string&)>& describe) {
  if (shapes.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": holds no arrays"));
  auto rows_of = [&](const std::string& k) {
    auto it = rows.find(k);
    return it == rows.end() ? int64_t{1} : it->second;
  };
  auto what = [&](const std::string& k) { return describe ? describe(k) : absl::StrCat("array '", k, "'"); };
  for (const auto& [k, dims] : shapes) {
    if (dims.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", what(k), " is a scalar; examples need a first dimension"));
    for (int64_t d : dims)
      if (d == 0)
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": ", what(k), " is empty (shape [", absl::StrJoin(dims, ", "), "])"));
    if (rows_of(k) < 1)
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", what(k), ": ", rows_of(k), " rows per example"));
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
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", what(name), " has ", ref_rows,
                                                   " rows, not a multiple of its ", ref_per, " rows per example"));
  const int64_t examples = ref_rows / ref_per;
  for (const auto& [k, dims] : shapes) {
    const int64_t per = rows_of(k);
    if (dims[0] == examples * per) continue;
    if (per == 1 && ref_per == 1)
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", what(k), " has ", dims[0], " examples, ", what(name), " has ", ref_rows));
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", what(k), " has ", dims[0], " rows for the ", examples,
                                                   " examples of ", what(name), " (", per, " row",
                                                   per == 1 ? "" : "s", " per example: ", examples * per,
                                                   " expected)"));
  }
  return absl::OkStatus();
}

bool ServableAs(DType from, DType to) {
  if (from == to) return true;
  if (to == DType::kF32) return from == DType::kF64;
  if (to == DType::kI64) return from == DType::kI32 || from == DType::kI8 || from == DType::kU8;
  return false;
}

int64_t Dataset::Column::example_elements() const {
  return rows_per_example * NumElements(std::span<const int64_t>(dims).subspan(1));
}

absl::StatusOr<Dataset> Dataset::FromColumns(std::map<std::string, Column> columns, const std::string& source,
                                             const RowsPerExample& rows,
                                             const std::function<std::string(const std::string&)>& describe) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [k, c] : columns) shapes.emplace(k, c.dims);
  MT_RETURN_IF_ERROR(CheckExampleShapes(shapes, source, rows, describe));
  Dataset d;
  for (auto& [k, c] : columns) {
    if (auto it = rows.find(k); it != rows.end()) c.rows_per_example = it->second;
    c.served = c.stored;
  }
  d.columns_ = std::move(columns);
  const auto& [name, first] = *d.columns_.begin();
  d.size_ = first.dims[0] / first.rows_per_example;
  return d;
}

absl::StatusOr<Dataset> Dataset::Create(std::map<std::string, Tensor> arrays, const std::string& source,
                                        const RowsPerExample& rows) {
  std::map<std::string, Column> columns;
  for (auto& [k, t] : arrays) columns.emplace(k, Column{.memory = t, .stored = t.dtype(), .dims = t.dims()});
  return FromColumns(std::move(columns), source, rows, {});
}

absl::StatusOr<Dataset> Dataset::Create(const std::map<std::string, std::shared_ptr<const MappedNpy>>& arrays,
                                        const std::string& source, const RowsPerExample& rows) {
  std::map<std::string, Column> columns;
  for (const auto& [k, m] : arrays) columns.emplace(k, Column{.mapped = m, .stored = m->dtype(), .dims = m->dims()});
  return FromColumns(std::move(columns), source, rows, [](const std::string& k) { return k + ".npy"; });
}

std::map<std::string, Dataset::ArrayInfo> Dataset::arrays() const {
  std::map<std::string, ArrayInfo> out;
  for (const auto& [k, c] : columns_) out.emplace(k, ArrayInfo{.dtype = c.served, .stored = c.stored, .dims = c.dims});
  return out;
}

Dataset Dataset::ServedAs(const std::string& key, DType to) const {
  Dataset d = *this;
  Column& c = d.columns_.at(key);
  MT_CHECK(ServableAs(c.stored, to)) << key << ": " << DTypeName(c.stored) << " cannot be served as " << DTypeName(to);
  c.served = to;
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

namespace {

// `n` elements from `src` (type From) to `dst` (type To).
template <typename From, typename To>
void Convert(const uint8_t* src, uint8_t* dst, int64_t n) {
  From f;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&f, src + i * sizeof(From), sizeof(From));  // mapped rows need not be aligned
    const To t = static_cast<To>(f);
    std::memcpy(dst + i * sizeof(To), &t, sizeof(To));
  }
}

}  // namespace

void Dataset::CopyExamples(const Column& c, const int64_t* idx, int64_t n, uint8_t* dst) {
  const int64_t e = c.example_elements();
  const size_t in_row = e * DTypeSize(c.stored), out_row = e * DTypeSize(c.served);
  const uint8_t* src = c.bytes();
  // A mapped array counts what it read every few stretches of consecutive examples, not once per
  // batch: each stretch may map a 2 MiB folio (MappedNpy::Touched), so a batch of 1024 shuffled
  // examples alone could map gigabytes before a count at its end released them.
  constexpr int64_t kRunsPerCount = 16;
  int64_t runs = 0, counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || idx[i] != idx[i - 1] + 1) ++runs;
    if (c.mapped && runs == kRunsPerCount) {
      c.mapped->Touched((i + 1 - counted) * in_row, runs);
      counted = i + 1;
      runs = 0;
    }
    const uint8_t* from = src + idx[i] * in_row;
    uint8_t* to = dst + i * out_row;
    if (c.stored == c.served) {
      std::memcpy(to, from, in_row);
      continue;
    }
    switch (c.stored) {
      case DType::kF64: Convert<double, float>(from, to, e); break;
      case DType::kI32: Convert<int32_t, int64_t>(from, to, e); break;
      case DType::kI8: Convert<int8_t, int64_t>(from, to, e); break;
      case DType::kU8: Convert<uint8_t, int64_t>(from, to, e); break;
      default: MT_CHECK(false) << "no conversion from " << DTypeName(c.stored) << " to " << DTypeName(c.served);
    }
  }
  if (c.mapped) c.mapped->Touched((n - counted) * in_row, runs);
}

std::map<std::string, Tensor> Dataset::Gather(const std::vector<int64_t>& order, int64_t begin,
                                              int64_t end) const {
  std::map<std::string, Tensor> out;
  for (const auto& [k, c] : columns_) {
    std::vector<int64_t> dims = c.dims;
    dims[0] = (end - begin) * c.rows_per_example;
    Tensor b(c.served, dims);
    CopyExamples(c, order.data() + begin, end - begin, b.data_as<uint8_t>());
    out.emplace(k, std::move(b));
  }
  return out;
}

Tensor Dataset::Rows(const std::string& key, int64_t begin, int64_t end) const {
  const Column& c = columns_.at(key);
  std::vector<int64_t> idx(end - begin);
  std::iota(idx.begin(), idx.end(), begin);
  std::vector<int64_t> dims = c.dims;
  dims[0] = (end - begin) * c.rows_per_example;
  Tensor b(c.served, dims);
  CopyExamples(c, idx.data(), end - begin, b.data_as<uint8_t>());
  return b;
}

Dataset Dataset::Head(int64_t n) const {
  Dataset d = *this;
  d.size_ = std::min(n, size_);
  return d;
}

}  // namespace mixtrain
