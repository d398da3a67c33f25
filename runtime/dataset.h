// In-memory datasets for training: named arrays sharing their first (example) dimension, split
// into batches in a seeded shuffled order that depends only on (seed, epoch), so a resumed run
// sees exactly the batches the uninterrupted run would.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace mixtrain {

// Arrays holding k rows per example, by name (the labels of a model that flattens its
// predictions across examples: N*T label rows for N sequences of T tokens). Others hold one.
using RowsPerExample = std::map<std::string, int64_t>;

// Whether arrays of these shapes make a data set: at least one array, each of rank >= 1 with at
// least one element, all holding the same number of examples: the first dimension, over k for the
// arrays `rows` names. The error names `source` and the arrays at fault.
absl::Status CheckExampleShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                const std::string& source, const RowsPerExample& rows = {});

class Dataset {
 public:
  // The arrays must pass CheckExampleShapes; `source` names the data in errors. An example's
  // rows in an array of `rows` are consecutive: example i is rows [i*k, (i+1)*k).
  static absl::StatusOr<Dataset> Create(std::map<std::string, Tensor> arrays,
                                        const std::string& source, const RowsPerExample& rows = {});
  int64_t size() const { return size_; }
  const std::map<std::string, Tensor>& arrays() const { return arrays_; }
  bool has(const std::string& key) const { return arrays_.contains(key); }

  // Example order of an epoch: identity without shuffling, else a permutation from (seed, epoch).
  std::vector<int64_t> Order(bool shuffle, uint64_t seed, int64_t epoch) const;
  // Batches per epoch; `drop_last` drops a final partial batch.
  int64_t NumBatches(int64_t batch_size, bool drop_last) const;
  // The arrays gathered at order[begin, end).
  std::map<std::string, Tensor> Gather(const std::vector<int64_t>& order, int64_t begin,
                                       int64_t end) const;
  // The first n examples (for subsets).
  Dataset Head(int64_t n) const;

 private:
  // Rows of array `k` per example (1 unless Create's `rows` says otherwise).
  int64_t RowsOf(const std::string& k) const;

  std::map<std::string, Tensor> arrays_;
  RowsPerExample rows_;
  int64_t size_ = 0;
};

}  // namespace mixtrain
