// SummaryWriter (include/mixtrain/summary_writer.h): TensorBoard event files.
#include "mixtrain/summary_writer.h"

#include <fcntl.h>
#include <nmmintrin.h>  // SSE4.2's crc32 instruction (the x86-64-v3 build target has it)
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "proto/tensorboard.pb.h"

namespace mixtrain {
inline namespace v1 {
namespace {

// CRC-32C (Castagnoli), the checksum of TensorFlow's records. Debian 12 packages no CRC-32C
// library (abseil's absl/crc is newer than its abseil); SSE4.2's crc32 instruction computes
// exactly this polynomial, so no table or hand-written loop is needed.
uint32_t Crc32c(const char* p, size_t n) {
  uint64_t crc = 0xFFFFFFFFu;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc = _mm_crc32_u64(crc, word);
  }
  uint32_t c = static_cast<uint32_t>(crc);
  for (; n > 0; ++p, --n) c = _mm_crc32_u8(c, static_cast<uint8_t>(*p));
  return ~c;
}

// TensorFlow masks a stored CRC so that a CRC of data holding CRCs stays well distributed.
uint32_t MaskedCrc(const char* p, size_t n) {
  const uint32_t crc = Crc32c(p, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// One record: length, masked CRC of the length's 8 bytes, data, masked CRC of the data.
std::string Record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  PutLe(out, data.size(), 8);
  PutLe(out, MaskedCrc(out.data(), 8), 4);
  out += data;
  PutLe(out, MaskedCrc(data.data(), data.size()), 4);
  return out;
}

double WallTime() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace

struct SummaryWriter::Impl {
  std::mutex mu;
  std::string path;
  int fd = -1;

  ~Impl() {
    if (fd >= 0) close(fd);
  }

  absl::Status Write(const tb::Event& event) {
    std::string bytes;
    if (!event.SerializeToString(&bytes)) return absl::InternalError("cannot serialize an event");
    const std::string rec = Record(bytes);
    // One write per record: a kill between two events never leaves half of the earlier one.
    for (size_t done = 0; done < rec.size();) {
      const ssize_t n = write(fd, rec.data() + done, rec.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return absl::InternalError(absl::StrCat("cannot write to '", path, "': ", std::strerror(errno)));
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<SummaryWriter>> SummaryWriter::Create(const std::string& log_dir) {
  namespace fs = std::filesystem;
  if (log_dir.empty()) return absl::InvalidArgumentError("the TensorBoard log directory is empty");
  std::error_code ec;
  if (fs::exists(log_dir, ec) && !fs::is_directory(log_dir, ec))
    return absl::InvalidArgumentError(absl::StrCat("log directory '", log_dir, "' exists and is not a directory"));
  fs::create_directories(log_dir, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat("cannot create log directory '", log_dir, "': ", ec.message()));

  auto impl = std::make_unique<Impl>();
  static std::atomic<int> counter{0};
  const std::string host = HostName();
  for (int attempt = 0; attempt < 100 && impl->fd < 0; ++attempt) {
    impl->path = (fs::path(log_dir) / absl::StrFormat("events.out.tfevents.%010d.%s.%d.%d",
                                                       static_cast<int64_t>(WallTime()), host,
                                                       static_cast<int>(getpid()), counter++))
                     .string();
    impl->fd = open(impl->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (impl->fd < 0 && errno != EEXIST)
      return absl::InvalidArgumentError(
          absl::StrCat("cannot create '", impl->path, "': ", std::strerror(errno)));
  }
  if (impl->fd < 0)
    return absl::InternalError(absl::StrCat("no free event file name in '", log_dir, "'"));

  tb::Event version;
  version.set_wall_time(WallTime());
  version.set_file_version("brain.Event:2");
  if (absl::Status s = impl->Write(version); !s.ok()) {
    impl.reset();
    return s;
  }
  return std::unique_ptr<SummaryWriter>(new SummaryWriter(std::move(impl)));
}

SummaryWriter::SummaryWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SummaryWriter::~SummaryWriter() = default;

const std::string& SummaryWriter::path() const { return impl_->path; }

absl::Status SummaryWriter::AddScalars(int64_t step,
                                       const std::vector<std::pair<std::string, double>>& scalars) {
  tb::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  absl::flat_hash_set<std::string> tags;
  for (const auto& [tag, value] : scalars) {
    if (tag.empty()) return absl::InvalidArgumentError("a TensorBoard scalar needs a tag");
    if (!tags.insert(tag).second)
      return absl::InvalidArgumentError(absl::StrCat("TensorBoard tag '", tag, "' given twice in one step"));
    tb::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Write(event);
}

}  // namespace v1
}  // namespace mixtrain
