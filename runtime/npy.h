// NumPy .npy / .npz files in and out: how users feed data to `mixtrain run` / `train` and read
// results back. Our own small parser of the .npy header; libzip for the .npz archive.
//
// Supported element types (NumPy descr -> DType):
//   '<f4' f32, '<f2' f16, '<f8' f64, '<i8' i64, '<i4' i32, '|i1' i8, '|u1' u8, '|b1' bool,
//   '<V2' bf16.
// NumPy has no bfloat16; `ml_dtypes.bfloat16` (what JAX and PyTorch users convert through) saves
// as the 2-byte void type '<V2' holding the bf16 bits, and that is what we read and write. With
// ml_dtypes installed, `np.load` then `.view(ml_dtypes.bfloat16)` gives the values back.
// Only C order (fortran_order False) and little-endian data are accepted; anything else is an
// error naming the file. Header versions 1.0, 2.0 and 3.0 are read; we write 1.0 (2.0 when the
// header does not fit), padded to 64 bytes like NumPy.
//
// An .npz is a zip of NAME.npy entries, stored or deflated (np.savez / np.savez_compressed); the
// map key is NAME. Every write goes through WriteFileAtomically (graph/atomic_file.h), so a
// failed write leaves no partial file behind. Reads accept regular files only (see OpenRegularFile).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace mixtrain {

// A .npy file's header: the array its data bytes hold and where they start.
struct NpyHeader {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  size_t data_offset = 0;   // bytes before the data
  uint64_t data_bytes = 0;  // elements times their size: exactly the bytes after the header
};
// Parses the header at the start of `bytes` (the file's first bytes, at least the header) and
// checks that a file of `file_size` bytes holds exactly the data the header describes, so a
// truncated file is an error here, before any of its data is read.
absl::StatusOr<NpyHeader> ParseNpyHeader(std::string_view bytes, uint64_t file_size, const std::string& source);

// Parses the bytes of one .npy file. `source` names it in error messages (a path, "a.npz:x").
absl::StatusOr<Tensor> ParseNpy(std::string_view bytes, const std::string& source = "<npy>");
// Serializes `t` as a .npy file (fails for kString / kUndefined).
absl::StatusOr<std::string> SerializeNpy(const Tensor& t);

// Opens `path` for reading only if it is a regular file: the open is non-blocking (a FIFO would
// otherwise wait for a writer forever) and a FIFO, directory, device or socket is an error naming
// it. Returns the descriptor; the caller closes it.
absl::StatusOr<int> OpenRegularFile(const std::string& path);
// The whole contents of a regular file (OpenRegularFile's checks).
absl::StatusOr<std::string> ReadRegularFile(const std::string& path);

absl::StatusOr<Tensor> ReadNpy(const std::string& path);
absl::Status WriteNpy(const std::string& path, const Tensor& t);

absl::StatusOr<std::map<std::string, Tensor>> ReadNpz(const std::string& path);
// `compress` deflates each entry (like np.savez_compressed); the default stores them (np.savez).
absl::Status WriteNpz(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      bool compress = false);

}  // namespace mixtrain
