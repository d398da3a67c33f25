// Counts the process's heap allocations for `--profile` (allocations per step): the program
// defines malloc and its relatives, which the dynamic linker then binds for every library
// (oneDNN's scratchpads, libstdc++'s operator new, ours), and forwards them to glibc's.
// An atomic increment per allocation is the whole cost. Sanitizer builds leave malloc to the
// sanitizer's own interceptors.
#include "tools/alloc_counter.h"

#include "mixtrain/profile.h"

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include <atomic>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define MT_SANITIZED_MALLOC 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MT_SANITIZED_MALLOC 1
#endif

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

#if !defined(MT_SANITIZED_MALLOC) && defined(__GLIBC__)
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);

void* malloc(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
void* memalign(size_t alignment, size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, n);
}
void* valloc(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_valloc(n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  // POSIX: a power of two that is a multiple of sizeof(void*).
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = __libc_memalign(alignment, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"

namespace mixtrain::cli {
bool HeapAllocationsCounted() { return true; }
}  // namespace mixtrain::cli
#else
namespace mixtrain::cli {
bool HeapAllocationsCounted() { return false; }
}  // namespace mixtrain::cli
#endif

namespace mixtrain::cli {
uint64_t HeapAllocations() { return g_allocations.load(std::memory_order_relaxed); }

// Profiled training steps charge each kernel the allocations made while it ran.
[[maybe_unused]] static const bool kRegistered =
    HeapAllocationsCounted() && (SetHeapAllocationCounter(&HeapAllocations), true);
}  // namespace mixtrain::cli
