// Datasets for training: named arrays sharing their first (example) dimension, held in memory or
// read through memory maps (.npy files, runtime/mapped_npy.h), split into batches in a seeded
// shuffled order that depends only on (seed, epoch), so a resumed run sees exactly the batches the
// uninterrupted run would, whichever way the arrays are stored.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/tensor.h"
#include "runtime/mapped_npy.h"

namespace mixtrain {

// Arrays holding k rows per example, by name (the labels of a model that flattens its
// predictions across examples: N*T label rows for N sequences of T tokens). Others hold one.
using RowsPerExample = std::map<std::string, int64_t>;

// Whether arrays of these shapes make a data set: at least one array, each of rank >= 1 with at
// least one element, all holding the same number of examples: the first dimension, over k for the
// arrays `rows` names. The error names `source` and the arrays at fault, each as `describe` names
// it ("array 'x'" by default; "x.npy" for a folder of files).
absl::Status CheckExampleShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                const std::string& source, const RowsPerExample& rows = {},
                                const std::function<std::string(const std::string&)>& describe = {});

// Whether an array stored as `from` may be served as `to`, converted a batch at a time: f64 to
// f32 (NumPy's default float to the models' float) and integers to i64 (class labels and token ids
// saved as i32 or u8). The same type always.
bool ServableAs(DType from, DType to);

class Dataset {
 public:
  // The arrays must pass CheckExampleShapes; `source` names the data in errors. An example's
  // rows in an array of `rows` are consecutive: example i is rows [i*k, (i+1)*k).
  static absl::StatusOr<Dataset> Create(std::map<std::string, Tensor> arrays,
                                        const std::string& source, const RowsPerExample& rows = {});
  // The same over memory-mapped .npy files: nothing is read until a batch is gathered. Shape
  // errors name the files.
  static absl::StatusOr<Dataset> Create(const std::map<std::string, std::shared_ptr<const MappedNpy>>& arrays,
                                        const std::string& source, const RowsPerExample& rows = {});

  // An array as Gather serves it.
  struct ArrayInfo {
    DType dtype = DType::kUndefined;   // served
    DType stored = DType::kUndefined;  // in memory or in the file
    std::vector<int64_t> dims;         // every row, not only the first size() examples'
  };
  std::map<std::string, ArrayInfo> arrays() const;
  int64_t size() const { return size_; }
  bool has(const std::string& key) const { return columns_.contains(key); }
  // This data set with array `key` served as `to`; ServableAs(its stored type, to) must hold.
  Dataset ServedAs(const std::string& key, DType to) const;

  // Example order of an epoch: identity without shuffling, else a permutation from (seed, epoch).
  std::vector<int64_t> Order(bool shuffle, uint64_t seed, int64_t epoch) const;
  // Batches per epoch; `drop_last` drops a final partial batch.
  int64_t NumBatches(int64_t batch_size, bool drop_last) const;
  // The arrays gathered at order[begin, end) (indices below size()), in their served types.
  std::map<std::string, Tensor> Gather(const std::vector<int64_t>& order, int64_t begin,
                                       int64_t end) const;
  // Array `key`'s rows of examples [begin, end), served type (to read a data set in chunks).
  Tensor Rows(const std::string& key, int64_t begin, int64_t end) const;
  // The first n examples (for subsets); shares the arrays.
  Dataset Head(int64_t n) const;

 private:
  // One array: in memory (`memory`) or mapped (`mapped`), served as `served`.
  struct Column {
    Tensor memory;
    std::shared_ptr<const MappedNpy> mapped;
    DType stored = DType::kUndefined, served = DType::kUndefined;
    std::vector<int64_t> dims;
    int64_t rows_per_example = 1;
    const uint8_t* bytes() const { return mapped ? mapped->data() : memory.data_as<uint8_t>(); }
    // Elements of one example (its rows_per_example rows).
    int64_t example_elements() const;
  };
  static absl::StatusOr<Dataset> FromColumns(std::map<std::string, Column> columns, const std::string& source,
                                             const RowsPerExample& rows,
                                             const std::function<std::string(const std::string&)>& describe);
  // Copies examples idx[0..n) of `c` to `dst`, converting to its served type.
  static void CopyExamples(const Column& c, const int64_t* idx, int64_t n, uint8_t* dst);

  std::map<std::string, Column> columns_;
  int64_t size_ = 0;
};

}  // namespace mixtrain
