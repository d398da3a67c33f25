// mixtrain public API: where a training step's memory goes (Trainer::StepMemoryStatistics, and
// CheckModel's report before anything runs), in bytes.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace mixtrain {
inline namespace v1 {

struct MemoryStatistics {
  size_t weights = 0;           // the trained parameters (fp32 master weights)
  size_t gradients = 0;         // buffers the backward writes and the optimizer reads
  size_t optimizer_state = 0;   // the other state: moments, counters, loss scaler, BN statistics
  size_t constants = 0;         // initializers nothing updates (frozen weights, tables)
  size_t activations_kept = 0;  // forward values the backward reads
  // The largest of them, largest first (up to 8): ("node (OpType)" that wrote it, bytes).
  std::vector<std::pair<std::string, size_t>> largest_kept;
  size_t arena = 0;             // the planner's arena: every intermediate buffer, reused by lifetime
  size_t arena_peak_live = 0;   // the most bytes the arena's buffers hold at one step
  // (phase, live arena bytes at its busiest step): "forward", "loss", "backward", "optimizer", ...
  std::vector<std::pair<std::string, size_t>> phase_peaks;
  size_t eval_arena = 0;  // the evaluation plan's arena (0 until one was planned)
  size_t planned = 0;     // weights + optimizer_state + constants + arena + eval_arena
  size_t measured_peak_rss = 0, measured_rss = 0;  // the process (0 where the OS does not tell)
};

}  // namespace v1
}  // namespace mixtrain
