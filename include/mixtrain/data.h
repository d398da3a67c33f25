// mixtrain public API: data for training and inference — NumPy .npz files and folders of .npy
// files, the Fashion-MNIST files of Debian's dataset package, and Dataset, named arrays split into
// batches in a seeded shuffled order.
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

struct TrainingData;

// Named arrays sharing their first (example) dimension, in memory or read from memory-mapped
// .npy files (OpenTrainingData). Copies share the data (immutable).
// The shuffled order depends only on (seed, epoch), so a resumed run sees exactly the batches the
// uninterrupted run would.
//
// Gather reads ahead: once it has returned order[begin, end), a worker thread gathers the range
// that likely follows (the same stride on in the same order), so a loop over an epoch's batches
// finds each one ready while it trains on the last. A prefetched batch is used only when it holds
// exactly the examples asked for. Calls from several threads are serialized.
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
  // The first n examples (all of them when n >= size()); shares the arrays.
  Dataset Head(int64_t n) const;

 private:
  friend absl::StatusOr<TrainingData> OpenTrainingData(const std::string& path, const DataCheckOptions& options);
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// A data set opened from disk by OpenTrainingData: the training set, the test set when the
// files hold one, and what was done to make them fit the model, one line each (for the user).
struct TrainingData {
  Dataset train;
  std::optional<Dataset> test;
  std::vector<std::string> notes;
};

// Opens the data set at `path` for a model whose step reads `options.inputs` (its inputs and
// the labels), and checks it as CheckTrainingData does, before any step. `path` is either
//  - an .npz file (np.savez): read whole into memory; entries 'test/NAME' are the test set; or
//  - a folder of NAME.npy files (np.save, one array each), with a test/ subfolder of the same
//    files for the test set: memory-mapped, never read whole. A batch reads its examples' rows,
//    and the pages read are released as the run goes, so a data set larger than the memory trains
//    within a bounded resident set. Other files in the folder are not read.
// Arrays the model does not read are left out (a note says which). An array stored as f64 for an
// f32 input, or as i32, i8 or u8 for an i64 one (class labels, token ids), is converted as its
// batches are read (a note says which); other type mismatches are errors. Errors name the file:
// a folder missing an array the model reads ('data/labels.npy: missing ...'), arrays of different
// lengths, a .npy that is truncated, pickled (dtype object) or not a plain numeric array.
absl::StatusOr<TrainingData> OpenTrainingData(const std::string& path, const DataCheckOptions& options);

}  // namespace v1
}  // namespace mixtrain
