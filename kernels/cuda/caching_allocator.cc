// Size-class free lists over a RawAllocator (see caching_allocator.h).
#include "kernels/cuda/caching_allocator.h"

#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace mixtrain {

namespace {
constexpr size_t kMinClass = 512;
constexpr size_t kLargeStep = size_t{2} << 20;  // 2 MiB
}  // namespace

CachingAllocator::~CachingAllocator() {
  MT_CHECK(live_.empty()) << live_.size() << " blocks still live when their allocator dies";
  ReleaseCached();
}

size_t CachingAllocator::SizeClass(size_t bytes) {
  if (bytes <= kMinClass) return kMinClass;
  if (bytes > kLargeStep) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  size_t c = kMinClass;
  while (c < bytes) c <<= 1;
  return c;
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  const size_t c = SizeClass(bytes);
  auto it = free_.find(c);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= c;
    stats_.live_bytes += c;
    ++stats_.reuses;
    live_.emplace(p, c);
    return p;
  }
  absl::StatusOr<void*> p = raw_->Alloc(c);
  if (!p.ok() && stats_.cached_bytes > 0) {
    // Blocks of other sizes may be what stands in the way: give them back and try once more.
    ReleaseCached();
    p = raw_->Alloc(c);
  }
  if (!p.ok())
    return absl::ResourceExhaustedError(
        absl::StrCat("allocating ", bytes, " bytes (", live_.size(), " blocks, ",
                     stats_.live_bytes, " bytes in use): ", std::string(p.status().message())));
  ++stats_.raw_allocs;
  stats_.live_bytes += c;
  live_.emplace(*p, c);
  return *p;
}

void CachingAllocator::Free(void* p) {
  if (p == nullptr) return;
  auto it = live_.find(p);
  MT_CHECK(it != live_.end()) << "Free of a block this allocator did not hand out (or freed twice)";
  const size_t c = it->second;
  live_.erase(it);
  stats_.live_bytes -= c;
  stats_.cached_bytes += c;
  free_[c].push_back(p);
}

void CachingAllocator::ReleaseCached() {
  for (auto& [c, blocks] : free_) {
    for (void* p : blocks) {
      raw_->Release(p);
      ++stats_.raw_releases;
    }
    stats_.cached_bytes -= c * blocks.size();
    blocks.clear();
  }
  free_.clear();
}

}  // namespace mixtrain
