// .npy header parsing and writing, .npz archives through libzip.
#include "runtime/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/atomic_file.h"
#include "graph/check.h"

namespace mixtrain {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr int kMaxRank = 64;  // NumPy's own limit

struct DescrEntry {
  const char* descr;  // as we write it
  DType dtype;
};
// Written descr per dtype; the reader also accepts '|' / '=' / '<' interchangeably on one-byte
// types and '=' as little-endian (every host we build for is little-endian).
constexpr DescrEntry kDescrs[] = {
    {"<f4", DType::kF32}, {"<f2", DType::kF16}, {"<f8", DType::kF64}, {"<i8", DType::kI64},
    {"<i4", DType::kI32}, {"|i1", DType::kI8},  {"|u1", DType::kU8},  {"|b1", DType::kBool},
    {"<V2", DType::kBF16},
};

absl::Status NpyError(const std::string& source, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", std::string(why)));
}

// --- the header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  bool has_descr = false, has_order = false, has_shape = false;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  absl::StatusOr<Header> Parse() {
    Header h;
    SkipSpace();
    if (!Eat('{')) return Error("header is not a dict");
    while (true) {
      SkipSpace();
      if (Eat('}')) break;
      MT_ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipSpace();
      if (!Eat(':')) return Error("expected ':' after key '" + key + "'");
      SkipSpace();
      if (key == "descr") {
        if (Peek() == '[') return Error("structured dtypes are not supported");
        MT_ASSIGN_OR_RETURN(h.descr, ParseString());
        h.has_descr = true;
      } else if (key == "fortran_order") {
        MT_ASSIGN_OR_RETURN(h.fortran_order, ParseBool());
        h.has_order = true;
      } else if (key == "shape") {
        MT_ASSIGN_OR_RETURN(h.shape, ParseShape());
        h.has_shape = true;
      } else {
        return Error("unknown header key '" + key + "'");
      }
      SkipSpace();
      if (!Eat(',')) {
        SkipSpace();
        if (!Eat('}')) return Error("expected ',' or '}' in header");
        break;
      }
    }
    if (!h.has_descr || !h.has_order || !h.has_shape) {
      return Error("header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return h;
  }

 private:
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool Eat(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n')) ++pos_;
  }
  absl::Status Error(const std::string& why) const {
    return NpyError(source_, absl::StrCat("bad .npy header (", why, ")"));
  }

  absl::StatusOr<std::string> ParseString() {
    char q = Peek();
    if (q != '\'' && q != '"') return Error("expected a quoted string");
    ++pos_;
    size_t end = s_.find(q, pos_);
    if (end == std::string_view::npos) return Error("unterminated string");
    std::string out(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }

  absl::StatusOr<bool> ParseBool() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return Error("expected True or False");
  }

  absl::StatusOr<std::vector<int64_t>> ParseShape() {
    std::vector<int64_t> dims;
    if (!Eat('(')) return Error("shape is not a tuple");
    while (true) {
      SkipSpace();
      if (Eat(')')) break;
      if (Peek() < '0' || Peek() > '9') return Error("shape holds a non-integer");
      int64_t d = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        if (d > (int64_t{1} << 50)) return Error("dimension too large");
        d = d * 10 + (s_[pos_++] - '0');
      }
      Eat('L');  // Python 2 long literal in old files
      dims.push_back(d);
      if (dims.size() > kMaxRank) return Error("rank above 64");
      SkipSpace();
      if (!Eat(',')) {
        SkipSpace();
        if (!Eat(')')) return Error("expected ',' or ')' in shape");
        break;
      }
    }
    return dims;
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
};

absl::StatusOr<DType> DTypeFromDescr(const std::string& descr, const std::string& source) {
  if (descr.size() >= 2 && descr[0] == '>' && descr.substr(1) != "i1" && descr.substr(1) != "u1" &&
      descr.substr(1) != "b1") {
    return NpyError(source, absl::StrCat("big-endian dtype '", descr, "' is not supported"));
  }
  std::string body = descr;
  if (!body.empty() && (body[0] == '<' || body[0] == '|' || body[0] == '=' || body[0] == '>')) {
    body = body.substr(1);
  }
  // np.save pickles an object array (dtype=object: ragged lists, strings, None) behind the header.
  if (body == "O")
    return NpyError(source, "holds Python objects (dtype object, pickled), not a plain numeric array: "
                            "save it with a numeric dtype, e.g. np.asarray(a, dtype=np.float32)");
  for (const DescrEntry& e : kDescrs) {
    if (body == std::string(e.descr + 1)) return e.dtype;
  }
  std::vector<std::string> names;
  for (const DescrEntry& e : kDescrs) names.push_back(e.descr);
  return NpyError(source, absl::StrCat("unsupported dtype '", descr, "' (supported: ",
                                       absl::StrJoin(names, " "), ")"));
}

std::string ShapeLiteral(const std::vector<int64_t>& dims) {
  if (dims.size() == 1) return absl::StrCat("(", dims[0], ",)");
  return absl::StrCat("(", absl::StrJoin(dims, ", "), ")");
}

// Reads entry `index` of `za` to its end (so libzip checks its CRC), never trusting the size the
// archive claims for the allocation: a corrupt size cannot make us allocate more than we read.
absl::StatusOr<std::string> ReadZipEntry(zip_t* za, zip_uint64_t index, zip_uint64_t size,
                                         const std::string& source) {
  zip_file_t* zf = zip_fopen_index(za, index, 0);
  if (zf == nullptr) {
    return absl::DataLossError(absl::StrCat(source, ": ", zip_strerror(za)));
  }
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    zip_int64_t n = zip_fread(zf, buf, sizeof(buf));
    if (n < 0) {
      std::string why = zip_file_strerror(zf);
      zip_fclose(zf);
      return absl::DataLossError(absl::StrCat(source, ": corrupt entry (", why, ")"));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
    if (bytes.size() > size) break;
  }
  zip_fclose(zf);
  if (bytes.size() != size) {
    return absl::DataLossError(absl::StrCat(source, ": entry holds ", bytes.size(),
                                            " bytes, the archive says ", size));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<NpyHeader> ParseNpyHeader(std::string_view bytes, uint64_t file_size, const std::string& source) {
  if (bytes.size() < kMagicLen + 4 || bytes.substr(0, kMagicLen) != std::string_view(kMagic, 6)) {
    return NpyError(source, "not a .npy file (bad magic)");
  }
  const auto* u = reinterpret_cast<const uint8_t*>(bytes.data());
  const int major = u[6];
  size_t header_len, header_start;
  if (major == 1) {
    header_len = u[8] | (size_t{u[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return NpyError(source, "truncated .npy header");
    header_len = u[8] | (size_t{u[9]} << 8) | (size_t{u[10]} << 16) | (size_t{u[11]} << 24);
    header_start = 12;
  } else {
    return NpyError(source, absl::StrCat("unsupported .npy version ", major, ".", int{u[7]}));
  }
  if (header_len > bytes.size() - header_start) return NpyError(source, "truncated .npy header");
  HeaderParser parser(bytes.substr(header_start, header_len), source);
  MT_ASSIGN_OR_RETURN(Header h, parser.Parse());
  if (h.fortran_order) {
    return NpyError(source, "fortran_order arrays are not supported (save a C-order array)");
  }
  MT_ASSIGN_OR_RETURN(DType dtype, DTypeFromDescr(h.descr, source));

  const size_t data_start = header_start + header_len;
  const uint64_t available = file_size - data_start;
  const uint64_t elem = DTypeSize(dtype);
  // As numpy ("array is too big"): the product of the non-zero dimensions must fit, even when a
  // zero dimension makes the array empty, or the tensor's element count would overflow later.
  uint64_t numel = 1;
  uint64_t nonzero_product = elem;
  for (int64_t d : h.shape) {
    if (d == 0) {
      numel = 0;
    } else if (nonzero_product > static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(d)) {
      return NpyError(source, absl::StrCat("shape ", ShapeLiteral(h.shape), " is too big"));
    } else {
      nonzero_product *= static_cast<uint64_t>(d);
    }
  }
  for (int64_t d : h.shape) {
    if (numel == 0) break;
    // Checked against the bytes present as we go, so a forged shape cannot overflow.
    if (numel > available / elem / static_cast<uint64_t>(d)) {
      return NpyError(source, absl::StrCat("shape ", ShapeLiteral(h.shape), " needs more than the ",
                                           available, " data bytes present (truncated file?)"));
    }
    numel *= static_cast<uint64_t>(d);
  }
  if (numel * elem != available) {
    return NpyError(source, absl::StrCat("shape ", ShapeLiteral(h.shape), " of ", h.descr,
                                         " needs ", numel * elem, " data bytes, the file has ",
                                         available, available < numel * elem ? " (truncated)" : ""));
  }
  return NpyHeader{.dtype = dtype, .dims = std::move(h.shape), .data_offset = data_start, .data_bytes = available};
}

absl::StatusOr<Tensor> ParseNpy(std::string_view bytes, const std::string& source) {
  MT_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(bytes, bytes.size(), source));
  Tensor t(h.dtype, h.dims);
  if (h.data_bytes > 0) std::memcpy(t.data(), bytes.data() + h.data_offset, h.data_bytes);
  if (h.dtype == DType::kBool) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.data_as<uint8_t>()[i] > 1) return NpyError(source, "bool array holds a byte not 0/1");
    }
  }
  return t;
}

absl::StatusOr<std::string> SerializeNpy(const Tensor& t) {
  const char* descr = nullptr;
  for (const DescrEntry& e : kDescrs) {
    if (e.dtype == t.dtype()) descr = e.descr;
  }
  if (descr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write a ", DTypeName(t.dtype()), " tensor to .npy"));
  }
  if (t.rank() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write a rank-", t.rank(), " tensor to .npy"));
  }
  std::string dict = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ",
                                  ShapeLiteral(t.dims()), ", }");
  // Pad with spaces and end with a newline so the data starts on a 64-byte boundary, as NumPy
  // does. With rank <= kMaxRank the dict stays far below version 1.0's 65535-byte header limit.
  constexpr size_t kPrefix = kMagicLen + 4;
  const size_t total = (kPrefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - kPrefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic, kMagicLen);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  out += dict;
  out.append(static_cast<const char*>(t.data()), t.nbytes());
  return out;
}

absl::StatusOr<int> OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::DataLossError(absl::StrCat("cannot stat ", path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a special file";
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", what, ", not a regular file"));
  }
  // Regular files never block; clear the flag so reads behave as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(err)));
    }
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path));
  return ParseNpy(bytes, path);
}

absl::Status WriteNpy(const std::string& path, const Tensor& t) {
  auto bytes = SerializeNpy(t);
  if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
  return WriteFileAtomically(path, *bytes);
}

absl::StatusOr<std::map<std::string, Tensor>> ReadNpz(const std::string& path) {
  // The archive is read once into memory and parsed from there: opening the path a second time
  // could find another file (or a FIFO) there.
  MT_ASSIGN_OR_RETURN(const std::string archive, ReadRegularFile(path));
  // libzip opens an empty file as an empty archive; NumPy calls it an error, and so do we.
  if (archive.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* src = zip_source_buffer_create(archive.data(), archive.size(), 0, &ze);
  zip_t* za = src == nullptr ? nullptr : zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
  if (za == nullptr) {
    std::string why = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    if (src != nullptr) zip_source_free(src);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a readable .npz archive (", why, ")"));
  }
  zip_error_fini(&ze);
  std::unique_ptr<zip_t, void (*)(zip_t*)> closer(za, [](zip_t* z) { zip_discard(z); });
  std::map<std::string, Tensor> out;
  const zip_int64_t n = zip_get_num_entries(za, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za, i, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE)) {
      return absl::DataLossError(absl::StrCat(path, ": corrupt entry ", i, " (", zip_strerror(za), ")"));
    }
    const std::string name = st.name;
    const std::string source = absl::StrCat(path, ":", name);
    if (name.size() <= 4 || name.substr(name.size() - 4) != ".npy") {
      return absl::InvalidArgumentError(absl::StrCat(source, ": entry is not a .npy file"));
    }
    const std::string key = name.substr(0, name.size() - 4);
    if (out.count(key)) return absl::InvalidArgumentError(absl::StrCat(source, ": duplicate key"));
    MT_ASSIGN_OR_RETURN(std::string bytes, ReadZipEntry(za, i, st.size, source));
    MT_ASSIGN_OR_RETURN(Tensor t, ParseNpy(bytes, source));
    out.emplace(key, std::move(t));
  }
  return out;
}

absl::Status WriteNpz(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      bool compress) {
  std::vector<std::string> blobs;
  blobs.reserve(tensors.size());
  for (const auto& [key, t] : tensors) {
    if (key.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty array name"));
    auto bytes = SerializeNpy(t);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", key, ": ", bytes.status().message()));
    }
    blobs.push_back(std::move(*bytes));
  }
  // libzip writes nothing at all for an archive without entries; NumPy writes the bare
  // end-of-central-directory record, and so do we.
  if (tensors.empty()) {
    return WriteFileAtomically(path, std::string("PK\x05\x06", 4) + std::string(18, '\0'));
  }
  // The archive is built in memory, then written like every other file (temp file + rename).
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* mem = zip_source_buffer_create(nullptr, 0, 0, &ze);
  zip_t* za = mem == nullptr ? nullptr : zip_open_from_source(mem, ZIP_TRUNCATE, &ze);
  if (za == nullptr) {
    std::string why = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    if (mem != nullptr) zip_source_free(mem);
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", why));
  }
  zip_error_fini(&ze);
  zip_source_keep(mem);  // outlives zip_close, which writes the archive into it
  std::unique_ptr<zip_source_t, void (*)(zip_source_t*)> mem_owner(mem, &zip_source_free);
  size_t b = 0;
  for (const auto& [key, t] : tensors) {
    const std::string& blob = blobs[b++];
    zip_source_t* src = zip_source_buffer(za, blob.data(), blob.size(), 0);
    zip_int64_t idx = src == nullptr ? -1
                                     : zip_file_add(za, (key + ".npy").c_str(), src,
                                                    ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE);
    if (idx < 0 ||
        zip_set_file_compression(za, idx, compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0) {
      std::string why = zip_strerror(za);
      if (src != nullptr && idx < 0) zip_source_free(src);
      zip_discard(za);
      return absl::InternalError(absl::StrCat("cannot write ", path, ":", key, ": ", why));
    }
  }
  if (zip_close(za) != 0) {
    std::string why = zip_strerror(za);
    zip_discard(za);
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", why));
  }
  zip_stat_t st;
  std::string archive;
  if (zip_source_stat(mem, &st) == 0 && (st.valid & ZIP_STAT_SIZE) && zip_source_open(mem) == 0) {
    archive.resize(st.size);
    const zip_int64_t n = zip_source_read(mem, archive.data(), archive.size());
    zip_source_close(mem);
    if (n != static_cast<zip_int64_t>(st.size)) archive.clear();
  }
  MT_CHECK(!archive.empty()) << "libzip lost the in-memory archive for " << path;
  return WriteFileAtomically(path, archive);
}

}  // namespace mixtrain
