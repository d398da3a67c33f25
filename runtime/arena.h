// Arena layout: places buffers with known lifetimes (first and last step that touches them) at
// byte offsets of one arena so that buffers alive at the same time never overlap. The planner
// computes lifetimes; this file only packs them.
#pragma once

#include <cstddef>
#include <vector>

namespace mixtrain {

struct BufferLifetime {
  size_t bytes = 0;
  int first = 0;  // first step (inclusive) at which the buffer holds data
  int last = 0;   // last step (inclusive) that reads it
};

struct ArenaLayout {
  std::vector<size_t> offsets;  // one per buffer, multiples of the alignment
  size_t total_bytes = 0;       // the arena size: the planned peak
};

// Greedy by size (TFLite's arena planner): largest buffers first, each at the lowest aligned
// offset that does not overlap a placed buffer with an intersecting lifetime. Near-optimal on
// the chain-like lifetimes of neural networks and O(n^2) at worst.
ArenaLayout PackBuffers(const std::vector<BufferLifetime>& buffers, size_t alignment = 64);

}  // namespace mixtrain
