#include "runtime/mapped_npy.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "runtime/npy.h"

namespace mixtrain {
namespace {

// Bytes a mapping may gather before Touched() drops them: small against the 1 GiB a run over a
// larger-than-RAM data set should stay under, large enough that dropping (a walk of the mapping's
// page tables) is rare.
constexpr uint64_t kReleaseEvery = uint64_t{128} << 20;
// What one fault may map: the kernel's page cache holds files in large folios (up to a PMD, 2 MiB
// on x86-64) and a fault maps the whole folio, so reading 1024 random rows of 3 KiB mapped 1.4 GB
// (Linux 6.18, measured). Each separate read counts this much.
constexpr uint64_t kFaultBytes = uint64_t{2} << 20;

absl::Status ReadArrays(const std::filesystem::path& dir, std::map<std::string, std::shared_ptr<const MappedNpy>>& out) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read the folder ", dir.string(), ": ", ec.message()));
  for (const auto& entry : it) {
    const std::string file = entry.path().filename().string();
    if (entry.path().extension() != ".npy") continue;
    MT_ASSIGN_OR_RETURN(std::shared_ptr<const MappedNpy> a, MappedNpy::Open(entry.path().string()));
    out.emplace(file.substr(0, file.size() - 4), std::move(a));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const MappedNpy>> MappedNpy::Open(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::DataLossError(absl::StrCat("cannot stat ", path, ": ", std::strerror(err)));
  }
  std::shared_ptr<MappedNpy> m(new MappedNpy());
  m->path_ = path;
  m->map_bytes_ = static_cast<size_t>(st.st_size);
  if (m->map_bytes_ > 0) {
    void* p = ::mmap(nullptr, m->map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat("cannot map ", path, ": ", std::strerror(err)));
    }
    m->map_ = p;
  }
  ::close(fd);  // the mapping keeps the file
  const std::string_view bytes(static_cast<const char*>(m->map_), m->map_bytes_);
  MT_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(bytes, m->map_bytes_, path));
  m->dtype_ = h.dtype;
  m->dims_ = std::move(h.dims);
  m->data_ = static_cast<const uint8_t*>(m->map_) + h.data_offset;
  m->data_bytes_ = h.data_bytes;
  return std::shared_ptr<const MappedNpy>(std::move(m));
}

MappedNpy::~MappedNpy() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

void MappedNpy::Touched(uint64_t bytes, int64_t runs) const {
  bytes += static_cast<uint64_t>(runs) * kFaultBytes;
  if (touched_.fetch_add(bytes, std::memory_order_relaxed) + bytes < kReleaseEvery) return;
  touched_.store(0, std::memory_order_relaxed);
  // A read-only shared file mapping: MADV_DONTNEED only unmaps the pages, whose contents come
  // back from the file when read again.
  ::madvise(map_, map_bytes_, MADV_DONTNEED);
}

absl::StatusOr<NpyDir> OpenNpyDir(const std::string& dir) {
  NpyDir d;
  MT_RETURN_IF_ERROR(ReadArrays(dir, d.train));
  const std::filesystem::path test = std::filesystem::path(dir) / "test";
  if (IsDirectory(test.string())) MT_RETURN_IF_ERROR(ReadArrays(test, d.test));
  return d;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace mixtrain
