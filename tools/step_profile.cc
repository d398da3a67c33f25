// See step_profile.h.
#include "tools/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "tools/alloc_counter.h"

namespace mixtrain::cli {
namespace {

// Totals of a group of profiled nodes.
struct Sum {
  int64_t calls = 0, allocations = 0;
  double seconds = 0, flops = 0, bytes = 0;
  void Add(const Trainer::NodeTime& r) {
    calls += r.calls;
    allocations += r.allocations;
    seconds += r.seconds;
    flops += r.flops;
    bytes += r.bytes;
  }
};

// "GFLOP/s GB/s" of a group: achieved arithmetic (blank where nothing counted flops) and the
// bytes its inputs and outputs hold, over its kernel time.
std::string Rates(const Sum& s) {
  char buf[64];
  if (s.seconds <= 0) return "";
  if (s.flops > 0)
    std::snprintf(buf, sizeof buf, "%8.1f %8.1f", s.flops / s.seconds * 1e-9, s.bytes / s.seconds * 1e-9);
  else
    std::snprintf(buf, sizeof buf, "%8s %8.1f", "", s.bytes / s.seconds * 1e-9);
  return buf;
}

}  // namespace

void PrintStepProfile(const std::vector<Trainer::NodeTime>& rows, int64_t steps) {
  const bool allocations_counted = HeapAllocationsCounted();
  if (steps <= 0 || rows.empty()) {
    std::printf("profile: no profiled steps\n");
    return;
  }
  const double per = 1e3 / static_cast<double>(steps);  // seconds in total -> ms per step
  const double per_step = 1 / static_cast<double>(steps);
  Sum total;
  std::map<std::string, Sum> by_phase;
  std::map<std::pair<std::string, std::string>, Sum> by_op;
  for (const Trainer::NodeTime& r : rows) {
    total.Add(r);
    by_phase[r.phase].Add(r);
    by_op[{r.phase, r.op_type}].Add(r);
  }
  auto share = [&](double s) { return total.seconds > 0 ? 100 * s / total.seconds : 0.0; };
  auto allocs = [&](const Sum& s) { return static_cast<double>(s.allocations) * per_step; };
  std::printf("training-step profile: kernel time per step over %lld steps (each kernel synchronized)\n",
              static_cast<long long>(steps));
  std::printf("  GFLOP/s counts matrix products and convolutions; GB/s is the bytes of each kernel's\n"
              "  inputs and outputs over its time; allocs: heap allocations per step%s\n",
              allocations_counted ? "" : " (not counted in this build)");
  std::printf("  %-10s %10s %7s %8s %8s %8s\n", "phase", "ms/step", "share", "GFLOP/s", "GB/s", "allocs");
  for (const char* phase : {"forward", "loss", "backward", "allreduce", "optimizer"})
    if (auto it = by_phase.find(phase); it != by_phase.end())
      std::printf("  %-10s %10.3f %6.1f%% %s %8.1f\n", phase, it->second.seconds * per, share(it->second.seconds),
                  Rates(it->second).c_str(), allocs(it->second));
  std::printf("  %-10s %10.3f %7s %s %8.1f\n", "total", total.seconds * per, "", Rates(total).c_str(), allocs(total));

  std::vector<std::pair<std::pair<std::string, std::string>, Sum>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::printf("  by op type (slowest first):\n  %-10s %-32s %10s %7s %10s %8s %8s %8s\n", "phase", "op", "ms/step",
              "share", "calls/step", "GFLOP/s", "GB/s", "allocs");
  for (size_t i = 0; i < ops.size() && i < 20; ++i) {
    const Sum& s = ops[i].second;
    std::printf("  %-10s %-32s %10.3f %6.1f%% %10.1f %s %8.1f\n", ops[i].first.first.c_str(),
                ops[i].first.second.c_str(), s.seconds * per, share(s.seconds),
                static_cast<double>(s.calls) * per_step, Rates(s).c_str(), allocs(s));
  }
  std::vector<Trainer::NodeTime> nodes = rows;
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  std::printf("  slowest nodes:\n  %-10s %-24s %10s %7s %8s %8s  %s\n", "phase", "op", "ms/step", "share", "GFLOP/s",
              "GB/s", "node");
  for (size_t i = 0; i < nodes.size() && i < 12; ++i) {
    Sum s;
    s.Add(nodes[i]);
    std::printf("  %-10s %-24s %10.3f %6.1f%% %s  %s\n", nodes[i].phase.c_str(), nodes[i].op_type.c_str(),
                nodes[i].seconds * per, share(nodes[i].seconds), Rates(s).c_str(), nodes[i].node.c_str());
  }
  if (allocations_counted && total.allocations > 0) {
    std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a.allocations > b.allocations; });
    std::printf("  kernels allocating on the heap (per step):\n");
    for (size_t i = 0; i < nodes.size() && i < 8 && nodes[i].allocations > 0; ++i)
      std::printf("  %-10s %-24s %8.1f  %s\n", nodes[i].phase.c_str(), nodes[i].op_type.c_str(),
                  static_cast<double>(nodes[i].allocations) * per_step, nodes[i].node.c_str());
  }
}

}  // namespace mixtrain::cli
