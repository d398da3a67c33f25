// See memory_report.h.
#include "tools/memory_report.h"

#include <cstdio>

namespace mixtrain::cli {
namespace {

double MiB(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

void PrintMemoryReport(const MemoryStatistics& m, bool measured) {
  std::printf(measured ? "memory (MiB): planned by the step's plan, measured from the process\n" : "memory (MiB):\n");
  std::printf("  weights (trained)          %10.1f\n", MiB(m.weights));
  std::printf("  optimizer state            %10.1f   moments, counters, loss scaler, BN statistics\n",
              MiB(m.optimizer_state));
  std::printf("  constants                  %10.1f   initializers nothing updates\n", MiB(m.constants));
  std::printf("  planner arena (step)       %10.1f   most live at one step %.1f; of it:\n", MiB(m.arena),
              MiB(m.arena_peak_live));
  std::printf("    gradients                %10.1f\n", MiB(m.gradients));
  std::printf("    activations for backward %10.1f   the largest:\n", MiB(m.activations_kept));
  for (const auto& [node, bytes] : m.largest_kept) std::printf("      %10.1f  %s\n", MiB(bytes), node.c_str());
  for (const auto& [phase, bytes] : m.phase_peaks)
    std::printf("    peak in %-16s %10.1f\n", phase.c_str(), MiB(bytes));
  std::printf("  planner arena (evaluation) %10.1f\n", MiB(m.eval_arena));
  std::printf("  planned in all             %10.1f\n", MiB(m.planned));
  if (measured && m.measured_peak_rss > 0) {
    std::printf("  measured peak RSS          %10.1f   (now %.1f); beyond the plan %.1f: code, libraries, data,\n"
                "                                          kernels' workspace and primitives, allocator slack\n",
                MiB(m.measured_peak_rss), MiB(m.measured_rss),
                MiB(m.measured_peak_rss > m.planned ? m.measured_peak_rss - m.planned : 0));
  }
}

}  // namespace mixtrain::cli
