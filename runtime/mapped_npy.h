// .npy files read through memory maps, for data sets larger than RAM: a directory of NAME.npy
// files (one array each, a test/ subfolder for the test set) is opened without reading its data;
// a batch reads only the pages of its rows, and Release() drops the pages this process has mapped
// (they stay in the kernel's page cache), so the resident set stays bounded however large the files.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/dtype.h"

namespace mixtrain {

class MappedNpy {
 public:
  // Maps `path` read-only and checks its header and size (ParseNpyHeader): a truncated file, an
  // object (pickled) array or another unsupported dtype is an error naming the file.
  static absl::StatusOr<std::shared_ptr<const MappedNpy>> Open(const std::string& path);
  ~MappedNpy();
  MappedNpy(const MappedNpy&) = delete;
  MappedNpy& operator=(const MappedNpy&) = delete;

  const std::string& path() const { return path_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  const uint8_t* data() const { return data_; }
  uint64_t data_bytes() const { return data_bytes_; }

  // Counts `bytes` just read in `runs` separate stretches; past a budget of what those reads may
  // have mapped, drops this process's mapping of every page (a later read maps them again from the
  // page cache, or from disk if the kernel evicted them).
  void Touched(uint64_t bytes, int64_t runs) const;

 private:
  MappedNpy() = default;

  std::string path_;
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> dims_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* data_ = nullptr;
  uint64_t data_bytes_ = 0;
  mutable std::atomic<uint64_t> touched_{0};
};

// The arrays of a directory of .npy files, by name (the file name less ".npy"): the training set
// from the directory itself, the test set from its test/ subfolder (empty when there is none).
// Other files and folders are not read.
struct NpyDir {
  std::map<std::string, std::shared_ptr<const MappedNpy>> train, test;
};
absl::StatusOr<NpyDir> OpenNpyDir(const std::string& dir);

// Whether `path` names a directory (a data set of .npy files rather than an .npz).
bool IsDirectory(const std::string& path);

}  // namespace mixtrain
