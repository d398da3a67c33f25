// IDX reader over zlib's gzFile, and the Fashion-MNIST loader built on it.
#include "runtime/idx.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "runtime/npy.h"

namespace mixtrain {
namespace {

absl::Status IdxError(const std::string& path, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::string(why)));
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads exactly `n` bytes; a short read is a truncated file, a gzread error a corrupt one.
absl::Status ReadExactly(gzFile f, void* dst, size_t n, const std::string& path,
                         const char* what) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const unsigned chunk = n > (1u << 30) ? (1u << 30) : static_cast<unsigned>(n);
    const int got = gzread(f, p, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return absl::DataLossError(absl::StrCat(path, ": corrupt file reading ", what, " (",
                                              errnum == Z_ERRNO ? std::strerror(errno) : msg, ")"));
    }
    if (got == 0) return IdxError(path, absl::StrCat("truncated file (ends inside the ", what, ")"));
    p += got;
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

struct IdxType {
  uint8_t code;
  DType dtype;
};
constexpr IdxType kIdxTypes[] = {{0x08, DType::kU8},
                                 {0x09, DType::kI8},
                                 {0x0C, DType::kI32},
                                 {0x0D, DType::kF32},
                                 {0x0E, DType::kF64}};

// Big-endian elements of `size` bytes to host (little-endian) order, in place.
void SwapToHost(uint8_t* p, int64_t n, size_t size) {
  if (size == 1) return;
  for (int64_t i = 0; i < n; ++i, p += size) {
    for (size_t a = 0, b = size - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
  }
}

absl::Status CheckShape(const Tensor& t, const std::string& path, int rank) {
  if (t.dtype() != DType::kU8 || t.rank() != rank) {
    return IdxError(path, absl::StrCat("expected u8 data of rank ", rank, ", the header says ",
                                       DTypeName(t.dtype()), " of rank ", t.rank()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> LoadChecked(const std::string& path, int rank) {
  MT_ASSIGN_OR_RETURN(Tensor t, ReadIdx(path));
  MT_RETURN_IF_ERROR(CheckShape(t, path, rank));
  return t;
}

}  // namespace

absl::StatusOr<Tensor> ReadIdx(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));  // never blocks on a FIFO
  struct stat st;
  const int64_t file_bytes = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
  GzFile f(gzdopen(fd, "rb"));
  if (!f) {
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("cannot read ", path, ": out of memory"));
  }
  gzbuffer(f.get(), 1 << 17);
  uint8_t magic[4];
  MT_RETURN_IF_ERROR(ReadExactly(f.get(), magic, 4, path, "header"));
  if (magic[0] != 0 || magic[1] != 0) return IdxError(path, "not an IDX file (bad magic)");
  DType dtype = DType::kUndefined;
  for (const IdxType& t : kIdxTypes) {
    if (t.code == magic[2]) dtype = t.dtype;
  }
  if (dtype == DType::kUndefined) {
    return IdxError(path, absl::StrCat("unsupported IDX element type 0x", absl::Hex(magic[2])));
  }
  const int rank = magic[3];
  if (rank == 0) return IdxError(path, "IDX header has rank 0");

  std::vector<uint8_t> raw(4 * rank);
  MT_RETURN_IF_ERROR(ReadExactly(f.get(), raw.data(), raw.size(), path, "header"));
  std::vector<int64_t> dims(rank);
  int64_t numel = 1;
  for (int i = 0; i < rank; ++i) {
    dims[i] = (int64_t{raw[4 * i]} << 24) | (raw[4 * i + 1] << 16) | (raw[4 * i + 2] << 8) |
              raw[4 * i + 3];
    // A forged header must not make us allocate terabytes before we find the data missing.
    if (dims[i] != 0 && numel > (int64_t{1} << 36) / dims[i]) {
      return IdxError(path, absl::StrCat("dims ", absl::StrJoin(dims, "x"), " are implausibly large"));
    }
    numel *= dims[i];
  }
  // The data must fit in the file: byte for byte when it is stored plainly, at most deflate's
  // 1032:1 when gzipped. A forged header is refused before the tensor is allocated.
  const int64_t data_bytes = numel * static_cast<int64_t>(DTypeSize(dtype));
  const int64_t room = gzdirect(f.get()) ? file_bytes - 4 - 4 * rank : file_bytes * 1032;
  if (data_bytes > room)
    return IdxError(path, absl::StrCat("dims ", absl::StrJoin(dims, "x"), " need ", data_bytes,
                                       " bytes of data, more than the ", file_bytes, "-byte file can hold"));
  Tensor t(dtype, dims);
  if (t.nbytes() > 0) {
    MT_RETURN_IF_ERROR(ReadExactly(f.get(), t.data(), t.nbytes(), path,
                                   absl::StrCat("data of dims ", absl::StrJoin(dims, "x")).c_str()));
  }
  uint8_t extra;
  const int more = gzread(f.get(), &extra, 1);
  if (more != 0) {
    return IdxError(path, more < 0 ? "corrupt file after the data"
                                   : absl::StrCat("file is longer than dims ",
                                                  absl::StrJoin(dims, "x"), " say"));
  }
  SwapToHost(static_cast<uint8_t*>(t.data()), t.numel(), DTypeSize(dtype));
  return t;
}

absl::StatusOr<Tensor> ReadIdxImages(const std::string& path) { return LoadChecked(path, 3); }

absl::StatusOr<Tensor> ReadIdxLabels(const std::string& path) { return LoadChecked(path, 1); }

Tensor ImagesToFloat(const Tensor& images) {
  MT_CHECK(images.dtype() == DType::kU8 && images.rank() == 3) << "ImagesToFloat wants u8 NxHxW";
  const auto& d = images.dims();
  Tensor out(DType::kF32, {d[0], 1, d[1], d[2]});
  const uint8_t* src = images.data_as<uint8_t>();
  float* dst = out.data_as<float>();
  for (int64_t i = 0; i < images.numel(); ++i) dst[i] = src[i] * (1.0f / 255.0f);
  return out;
}

Tensor LabelsToInt64(const Tensor& labels) {
  MT_CHECK(labels.dtype() == DType::kU8) << "LabelsToInt64 wants u8";
  Tensor out(DType::kI64, labels.dims());
  for (int64_t i = 0; i < labels.numel(); ++i) out.data_as<int64_t>()[i] = labels.data_as<uint8_t>()[i];
  return out;
}

absl::StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir) {
  FashionMnist ds;
  struct Split {
    const char* prefix;
    Tensor* images;
    Tensor* labels;
  };
  for (const Split& s : {Split{"train", &ds.train_images, &ds.train_labels},
                         Split{"t10k", &ds.test_images, &ds.test_labels}}) {
    const std::string ipath = absl::StrCat(dir, "/", s.prefix, "-images-idx3-ubyte.gz");
    const std::string lpath = absl::StrCat(dir, "/", s.prefix, "-labels-idx1-ubyte.gz");
    MT_ASSIGN_OR_RETURN(Tensor images, ReadIdxImages(ipath));
    MT_ASSIGN_OR_RETURN(Tensor labels, ReadIdxLabels(lpath));
    if (images.dims()[0] != labels.dims()[0]) {
      return IdxError(lpath, absl::StrCat(labels.dims()[0], " labels for ", images.dims()[0],
                                          " images in ", ipath));
    }
    for (int64_t i = 0; i < labels.numel(); ++i) {
      if (labels.data_as<uint8_t>()[i] >= 10) {
        return IdxError(lpath, absl::StrCat("label ", int{labels.data_as<uint8_t>()[i]},
                                            " at index ", i, " is not a Fashion-MNIST class"));
      }
    }
    *s.images = ImagesToFloat(images);
    *s.labels = LabelsToInt64(labels);
  }
  return ds;
}

}  // namespace mixtrain
