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

// Greedy placement (TFLite's arena planner): buffers in a fixed order, each at an aligned offset
// that does not overlap a placed buffer with an intersecting lifetime. Three orders (largest
// first, longest-lived first, largest bytes x steps first) times two rules (lowest gap that fits,
// smallest gap that fits); the smallest arena wins. Each is near-optimal on some of the
// chain-like lifetimes of neural networks and none on all (a language model's training step:
// 518.8 MiB largest-first, 518.1 smallest-gap; another plan
// `check` builds for GPT-2 small 172.2 largest-first, 147.6 longest-first);
// O(n^2) each at worst.
ArenaLayout PackBuffers(const std::vector<BufferLifetime>& buffers, size_t alignment = 64);

}  // namespace mixtrain
