// A caching allocator over a raw allocator (cudaMalloc, cudaMallocHost, or a fake in tests).
// Training steps ask for the same sizes every step, so freed blocks go to per-size-class free
// lists and are handed out again: after the first step no raw allocation happens (docs/architecture.md,
// "Devices"). The bookkeeping is plain C++ so it is tested without a GPU.
//
// Reuse is safe without events because every user of a device block runs on one stream: a block
// freed by the host and handed to a later kernel is only touched after the earlier kernels that
// used it, in stream order. Pinned host blocks are different (the host writes them); the device
// returns those only once an event says the copy reading them finished (cuda_device.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace mixtrain {

// Where blocks really come from. Alloc returns an error status when out of memory.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual absl::StatusOr<void*> Alloc(size_t bytes) = 0;
  virtual void Release(void* p) = 0;
};

class CachingAllocator {
 public:
  struct Stats {
    int64_t raw_allocs = 0;     // calls to RawAllocator::Alloc that succeeded
    int64_t raw_releases = 0;
    int64_t reuses = 0;         // allocations served from a free list
    size_t live_bytes = 0;      // size-class bytes handed out and not yet freed
    size_t cached_bytes = 0;    // size-class bytes on free lists
  };

  explicit CachingAllocator(RawAllocator* raw) : raw_(raw) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  // Releases the cached blocks. Blocks still live are a caller bug (they would dangle).
  ~CachingAllocator();

  // Smallest size class holding `bytes`: powers of two from 512 B to 2 MiB, then multiples of
  // 2 MiB (large blocks are few and exact-ish: a plan's arena, a weight).
  static size_t SizeClass(size_t bytes);

  // A block of at least `bytes` (a zero-byte request gets the smallest class). When the raw
  // allocator fails, the cache is emptied and the request retried once before giving up.
  absl::StatusOr<void*> Allocate(size_t bytes);
  // Returns a block from Allocate to its free list. Anything else aborts (file and line).
  void Free(void* p);
  // Gives every cached block back to the raw allocator.
  void ReleaseCached();

  const Stats& stats() const { return stats_; }

 private:
  RawAllocator* raw_;
  std::map<size_t, std::vector<void*>> free_;   // size class -> blocks
  absl::flat_hash_map<void*, size_t> live_;     // block -> size class
  Stats stats_;
};

}  // namespace mixtrain
