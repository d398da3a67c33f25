// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11 "Parallel random numbers: as
// easy as 1, 2, 3"), usable on host and device. A counter-based generator has no state to carry:
// any element's random bits are a pure function of (key, counter), so the CPU and CUDA kernels
// produce the same dropout mask element for element, in any thread order, and a step can be
// replayed exactly.
//
// Dropout's stream: a node's key is its `seed` (64 bits); the counter is {group lo, group hi,
// step lo, step hi} where group = element / 4 and `step` counts the node's training executions.
// Element i keeps its value iff Uniform(word i % 4 of that block) >= ratio.
#pragma once

#include <cstdint>

#include "graph/half.h"  // MT_HD

namespace mixtrain {

MT_HD void Philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// A uniform float in [0, 1) from the top 24 bits (every value exactly representable).
MT_HD float UniformFromBits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// The four random words for elements [4 * group, 4 * group + 4) of dropout step `step`.
MT_HD void DropoutBits(uint64_t seed, uint64_t step, uint64_t group, uint32_t out[4]) {
  const uint32_t counter[4] = {static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                               static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  Philox4x32_10(counter, key, out);
}

// Whether element `index` survives dropout with probability `ratio` of being dropped.
MT_HD bool DropoutKeep(uint64_t seed, uint64_t step, uint64_t index, float ratio) {
  uint32_t w[4];
  DropoutBits(seed, step, index / 4, w);
  return UniformFromBits(w[index % 4]) >= ratio;
}

}  // namespace mixtrain
