// Where a training step's memory goes: what its plan holds (weights, gradients, optimizer state,
// activations kept for the backward pass, the planner's arena and its busiest step per phase)
// next to what the process measures. Built from the planner's statistics (runtime/plan.h), so
// the same report comes before anything runs (a dry plan) and after steps (the step's own plan).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "passes/training.h"
#include "runtime/plan.h"

namespace mixtrain {

inline constexpr size_t kLargestKept = 8;

struct MemoryReport {
  size_t weights = 0;          // the parameters the step trains
  size_t gradients = 0;        // buffers the backward writes and the optimizer reads
  size_t optimizer_state = 0;  // the other state: moments, counters, loss scaler, BN statistics
  size_t constants = 0;        // initializers no update writes (frozen weights, tables, masks)
  size_t activations_kept = 0; // forward (and loss) values the backward reads
  // The largest of them: (producing node, bytes), largest first (at most kLargestKept).
  std::vector<std::pair<const Node*, size_t>> largest_kept;
  size_t arena = 0;            // the planner's arena: every intermediate buffer, reused by lifetime
  size_t arena_peak_live = 0;  // the most bytes the arena's buffers hold at one step
  // Live arena bytes at each phase's busiest step, in the order the phases first run.
  std::vector<std::pair<StepPhase, size_t>> phase_peaks;
  size_t eval_arena = 0;       // the evaluation plan's arena (held once evaluation has run)
  // weights + optimizer_state + constants + arena + eval_arena: what the plans hold.
  size_t planned = 0;
  // The process, where the OS tells (0 otherwise): its peak and current resident set.
  size_t measured_peak_rss = 0, measured_rss = 0;
};

// The report of a step planned as `step` (its graph `graph`, training `params`; the other
// initializers that updates write are `state`), and of the evaluation plan when given.
MemoryReport PlannedMemory(const Graph& graph, const PlanStats& step, const std::vector<std::string>& params,
                           const std::vector<std::string>& state, const PlanStats* eval = nullptr);

// Fills the measured fields from the process (getrusage and /proc/self/statm on Linux).
void MeasureProcessMemory(MemoryReport& report);

}  // namespace mixtrain
