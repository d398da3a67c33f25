// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed, and the Fashion-MNIST
// data set as `mixtrain train --dataset=fashion-mnist` uses it.
//
// IDX: two zero bytes, a type byte (0x08 u8, 0x09 i8, 0x0C i32, 0x0D f32, 0x0E f64), the rank,
// then one big-endian u32 per dimension, then the data (big-endian, row-major). zlib's gzread
// reads gzip and uncompressed files alike.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace mixtrain {

// Any IDX file, with the dims of its header; data converted to host byte order. Only a regular
// file is read (a FIFO, directory or device is an error naming it; see OpenRegularFile).
absl::StatusOr<Tensor> ReadIdx(const std::string& path);
// An image file: u8, rank 3 (N x rows x cols).
absl::StatusOr<Tensor> ReadIdxImages(const std::string& path);
// A label file: u8, rank 1 (N).
absl::StatusOr<Tensor> ReadIdxLabels(const std::string& path);

// Where Debian's dataset-fashion-mnist package installs the data.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

struct FashionMnist {
  Tensor train_images;  // f32 60000 x 1 x 28 x 28, pixel / 255
  Tensor train_labels;  // i64 60000, in [0, 10)
  Tensor test_images;   // f32 10000 x 1 x 28 x 28
  Tensor test_labels;   // i64 10000
};

// Reads train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and
// t10k-labels-idx1-ubyte.gz from `dir`; checks that image and label counts agree and labels are
// below 10.
absl::StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir = kFashionMnistDir);

// u8 N x H x W images -> f32 N x 1 x H x W in [0, 1]; u8 labels -> i64.
Tensor ImagesToFloat(const Tensor& images);
Tensor LabelsToInt64(const Tensor& labels);

}  // namespace mixtrain
