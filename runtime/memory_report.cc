// See memory_report.h.
#include "runtime/memory_report.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/container/flat_hash_set.h"

namespace mixtrain {

MemoryReport PlannedMemory(const Graph& graph, const PlanStats& step, const std::vector<std::string>& params,
                           const std::vector<std::string>& state, const PlanStats* eval) {
  MemoryReport r;
  const absl::flat_hash_set<std::string> trained(params.begin(), params.end());
  const absl::flat_hash_set<std::string> written(state.begin(), state.end());
  for (const Value* v : graph.initializers()) {
    const size_t bytes = v->initializer->nbytes();
    if (trained.contains(v->name)) {
      r.weights += bytes;
    } else if (written.contains(v->name)) {
      r.optimizer_state += bytes;
    } else {
      r.constants += bytes;
    }
  }
  // Each arena buffer by the phases of the steps that write it first and read it last.
  const int steps = static_cast<int>(step.step_nodes.size());
  auto phase = [&](int i) { return PhaseOf(*step.step_nodes[static_cast<size_t>(std::clamp(i, 0, steps - 1))]); };
  std::vector<size_t> live_delta(static_cast<size_t>(steps) + 1, 0), dying(static_cast<size_t>(steps) + 1, 0);
  for (const BufferLifetime& b : step.buffers) {
    if (steps == 0) break;
    const StepPhase made = phase(b.first), read = phase(b.last);
    if ((made == StepPhase::kForward || made == StepPhase::kLoss) &&
        (read == StepPhase::kBackward || read == StepPhase::kRecompute)) {
      r.activations_kept += b.bytes;
      r.largest_kept.emplace_back(step.step_nodes[static_cast<size_t>(std::clamp(b.first, 0, steps - 1))], b.bytes);
    }
    if (made == StepPhase::kBackward && read == StepPhase::kOptimizer) r.gradients += b.bytes;
    live_delta[static_cast<size_t>(std::clamp(b.first, 0, steps - 1))] += b.bytes;
    dying[static_cast<size_t>(std::clamp(b.last, 0, steps - 1)) + 1] += b.bytes;
  }
  std::stable_sort(r.largest_kept.begin(), r.largest_kept.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (r.largest_kept.size() > kLargestKept) r.largest_kept.resize(kLargestKept);
  size_t live = 0;
  for (int i = 0; i < steps; ++i) {
    live = live + live_delta[static_cast<size_t>(i)] - dying[static_cast<size_t>(i)];
    r.arena_peak_live = std::max(r.arena_peak_live, live);
    const StepPhase p = phase(i);
    auto it = std::find_if(r.phase_peaks.begin(), r.phase_peaks.end(), [&](const auto& e) { return e.first == p; });
    if (it == r.phase_peaks.end()) {
      r.phase_peaks.emplace_back(p, live);
    } else {
      it->second = std::max(it->second, live);
    }
  }
  r.arena = step.peak_planned_bytes;
  r.eval_arena = eval != nullptr ? eval->peak_planned_bytes : 0;
  r.planned = r.weights + r.optimizer_state + r.constants + r.arena + r.eval_arena;
  return r;
}

void MeasureProcessMemory(MemoryReport& report) {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) == 0) report.measured_peak_rss = static_cast<size_t>(usage.ru_maxrss) * 1024;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long pages_total = 0, pages_resident = 0;
    if (std::fscanf(f, "%lu %lu", &pages_total, &pages_resident) == 2)
      report.measured_rss = static_cast<size_t>(pages_resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::fclose(f);
  }
}

}  // namespace mixtrain
