// mixtrain public API: data for training and inference — NumPy .npz files, the Fashion-MNIST
// files of Debian's dataset package, and Dataset, named arrays split into batches in a seeded
// shuffled order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mixtrain/tensor.h"

namespace mixtrain {
inline namespace v1 {

// Every array of an .npz (np.savez or np.savez_compressed) by name. bf16 arrays are ml_dtypes'
// (stored as '<V2'). Only a regular file is read: a FIFO, directory or device is an error (the
// open never blocks).
absl::StatusOr<TensorMap> ReadNpz(const std::string& path);
// Writes atomically (temp file, then rename); `compress` deflates like np.savez_compressed.
absl::Status WriteNpz(const std::string& path, const TensorMap& arrays, bool compress = false);

// Fashion-MNIST as Debian's dataset-fashion-mnist installs it (idx .gz files in `dir`; empty: the
// package's folder). Images are f32 N x 1 x 28 x 28 in [0, 1], labels i64 in [0, 10).
struct FashionMnist {
  HostTensor train_images, train_labels, test_images, test_labels;
};
absl::StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir = "");

// What CheckTrainingData checks a data set's arrays against.
struct DataCheckOptions {
  // The arrays a step needs (Trainer::BatchInputs(): the model's inputs and the labels). Each must
  // be present, of that element type and rank, and match every fixed dimension after the first
  // (the first counts examples). Other arrays are not checked against anything but themselves.
  std::vector<TensorInfo> inputs;
  std::string labels_key = "labels";
  // Label rows per example (Trainer::LabelRowsPerExample: k for a model that flattens its
  // logits to k rows per example): the labels hold k times the inputs' first dimension.
  int64_t label_rows_per_example = 1;
  // Classification: integer labels must lie in [0, num_classes), or equal ignore_index.
  // 0 = not a classification (or unknown): label values are not checked.
  int64_t num_classes = 0;
  std::optional<int64_t> ignore_index;
  // true: the arrays are examples sharing their first dimension (a data set). false: they are one
  // batch whose arrays need not (`mixtrain grad`'s), checked only for being present and non-empty.
  bool shared_example_dim = true;
  // false: NaN or infinity in a float array other than the labels is an error. true keeps them
  // (a step on such a batch computes non-finite gradients and skips its update, like a loss-scale
  // overflow). Non-finite labels are always an error.
  bool allow_nonfinite_inputs = false;
};

// Checks a data set before training, so that bad data fails before the first step rather than
// when its batch comes up: no arrays, an empty array, arrays of different lengths, an array the
// model needs missing or of the wrong element type or shape, NaN/Inf values, labels outside the
// classes. The error names `source` (a file), the array, and the first offending index
// ("train.npz: array 'x' holds NaN at [5, 3]").
absl::Status CheckTrainingData(const TensorMap& arrays, const std::string& source,
                               const DataCheckOptions& options);

// Named arrays sharing their first (example) dimension. Copies share the data (immutable).
// The shuffled order depends only on (seed, epoch), so a resumed run sees exactly the batches the
// uninterrupted run would.
class Dataset {
 public:
  // Every array must have rank >= 1, at least one element and the same first dimension, but the
  // arrays `rows_per_example` names: k rows per example (consecutive: example i is rows
  // [i*k, (i+1)*k)), so k times the others' first dimension; Gather returns all k rows of each
  // example. `source` names the data in errors.
  static absl::StatusOr<Dataset> Create(const TensorMap& arrays, const std::string& source,
                                        const std::map<std::string, int64_t>& rows_per_example = {});
  Dataset();
  ~Dataset();
  Dataset(const Dataset&);
  Dataset& operator=(const Dataset&);

  int64_t size() const;  // examples
  // Example order of an epoch: identity without shuffling, else a permutation from (seed, epoch).
  std::vector<int64_t> Order(bool shuffle, uint64_t seed, int64_t epoch) const;
  // Batches per epoch; `drop_last` drops a final partial batch.
  int64_t NumBatches(int64_t batch_size, bool drop_last) const;
  // The arrays gathered at order[begin, end); fails for a range outside `order` or an index
  // outside the dataset.
  absl::StatusOr<TensorMap> Gather(const std::vector<int64_t>& order, int64_t begin, int64_t end) const;
  // The first n examples (all of them when n >= size()).
  Dataset Head(int64_t n) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace v1
}  // namespace mixtrain
