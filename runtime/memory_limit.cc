// See memory_limit.h.
#include "runtime/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mixtrain {
namespace {

std::string MiB(size_t bytes) { return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

// The first number of a file ("max" or unreadable: none).
std::optional<size_t> ReadNumber(const std::string& path) {
  std::ifstream f(path);
  std::string word;
  size_t v = 0;
  if (!(f >> word) || !absl::SimpleAtoi(word, &v)) return std::nullopt;
  return v;
}

// This process's cgroup v2 folder ("0::/path" in /proc/self/cgroup).
std::optional<std::string> CgroupDir() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return std::nullopt;
}

void Consider(std::optional<MemoryHeadroom>& best, size_t bytes, std::string limit) {
  if (!best || bytes < best->bytes) best = MemoryHeadroom{bytes, std::move(limit)};
}

}  // namespace

std::optional<MemoryHeadroom> CurrentMemoryHeadroom() {
  std::optional<MemoryHeadroom> best;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  struct rlimit as;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    size_t vm_pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      unsigned long total = 0;
      if (std::fscanf(f, "%lu", &total) == 1) vm_pages = total;
      std::fclose(f);
    }
    const size_t used = vm_pages * page, cap = static_cast<size_t>(as.rlim_cur);
    Consider(best, cap > used ? cap - used : 0,
             absl::StrCat("the address-space limit (ulimit -v, RLIMIT_AS) of ", MiB(cap), ", ", MiB(used), " in use"));
  }
  if (std::optional<std::string> dir = CgroupDir()) {
    std::optional<size_t> max = ReadNumber(*dir + "/memory.max"), current = ReadNumber(*dir + "/memory.current");
    if (max && current)
      Consider(best, *max > *current ? *max - *current : 0,
               absl::StrCat("the cgroup's memory.max of ", MiB(*max), ", ", MiB(*current), " in use"));
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    size_t kib = 0;
    if (!(fields >> key >> kib) || key != "MemAvailable:") continue;
    Consider(best, kib * 1024, absl::StrCat("the physical memory available (", MiB(kib * 1024), ")"));
    break;
  }
  return best;
}

absl::Status CheckFitsInMemory(size_t bytes, size_t reserve, const std::string& what, const std::string& advice) {
  const std::optional<MemoryHeadroom> room = CurrentMemoryHeadroom();
  if (!room || bytes + reserve <= room->bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " needs ", MiB(bytes), " more memory (plus ", MiB(reserve), " kept for kernels' workspace), but ",
      MiB(room->bytes), " is left under ", room->limit, "; nothing was allocated for it. ", advice));
}

}  // namespace mixtrain
