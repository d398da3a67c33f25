// ParallelFor: the one parallel loop every own CPU kernel uses (OpenMP underneath, both cores).
// Work is split into at most one contiguous block per thread, so each thread streams through its
// own range (good for caches and for vectorized inner loops); ranges smaller than `grain`
// elements run inline on the calling thread, because waking threads costs more than they save.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace mixtrain {

// A sensible grain for cheap elementwise work: ~16K elements per thread before going parallel.
inline constexpr int64_t kElementwiseGrain = 16384;

// Calls fn(begin, end) over disjoint ranges covering [0, n). `fn` must be safe to call
// concurrently on disjoint ranges. Nested calls (from inside a parallel region) run serially.
template <typename Fn>
void ParallelFor(int64_t n, int64_t grain, const Fn& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t max_blocks = (n + grain - 1) / grain;
  int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  int64_t blocks = std::min<int64_t>(max_blocks, threads);
  if (blocks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel for schedule(static, 1) num_threads(static_cast<int>(blocks))
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t begin = n * b / blocks;
    int64_t end = n * (b + 1) / blocks;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace mixtrain
