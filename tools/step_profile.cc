// See step_profile.h.
#include "tools/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

namespace mixtrain::cli {

void PrintStepProfile(const std::vector<Trainer::NodeTime>& rows, int64_t steps) {
  if (steps <= 0 || rows.empty()) {
    std::printf("profile: no profiled steps\n");
    return;
  }
  const double per = 1e3 / static_cast<double>(steps);  // seconds in total -> ms per step
  double total = 0;
  std::map<std::string, double> by_phase;
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, double>> by_op;
  for (const Trainer::NodeTime& r : rows) {
    total += r.seconds;
    by_phase[r.phase] += r.seconds;
    auto& o = by_op[{r.phase, r.op_type}];
    o.first += r.calls;
    o.second += r.seconds;
  }
  auto share = [&](double s) { return total > 0 ? 100 * s / total : 0.0; };
  std::printf("training-step profile: kernel time per step over %lld steps (each kernel synchronized)\n",
              static_cast<long long>(steps));
  std::printf("  %-10s %10s %7s\n", "phase", "ms/step", "share");
  for (const char* phase : {"forward", "loss", "backward", "optimizer"})
    if (by_phase.contains(phase))
      std::printf("  %-10s %10.3f %6.1f%%\n", phase, by_phase[phase] * per, share(by_phase[phase]));
  std::printf("  %-10s %10.3f\n", "total", total * per);

  std::vector<std::pair<std::pair<std::string, std::string>, std::pair<int64_t, double>>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::printf("  by op type (slowest first):\n  %-10s %-32s %10s %7s %10s\n", "phase", "op", "ms/step", "share", "calls/step");
  for (size_t i = 0; i < ops.size() && i < 20; ++i)
    std::printf("  %-10s %-32s %10.3f %6.1f%% %10.1f\n", ops[i].first.first.c_str(), ops[i].first.second.c_str(),
                ops[i].second.second * per, share(ops[i].second.second),
                static_cast<double>(ops[i].second.first) / static_cast<double>(steps));
  std::vector<Trainer::NodeTime> nodes = rows;
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  std::printf("  slowest nodes:\n  %-10s %-24s %10s %7s  %s\n", "phase", "op", "ms/step", "share", "node");
  for (size_t i = 0; i < nodes.size() && i < 12; ++i)
    std::printf("  %-10s %-24s %10.3f %6.1f%%  %s\n", nodes[i].phase.c_str(), nodes[i].op_type.c_str(),
                nodes[i].seconds * per, share(nodes[i].seconds), nodes[i].node.c_str());
}

}  // namespace mixtrain::cli
