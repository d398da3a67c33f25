#include "runtime/arena.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace mixtrain {
namespace {

// Where a buffer goes among the gaps its live neighbours leave: the lowest that fits, or the
// smallest that fits (either way above all of them when none does).
enum class Fit { kFirst, kBest };

// Places the buffers in `order`, each at an aligned offset that does not overlap a placed buffer
// whose lifetime intersects its own.

ArenaLayout Pack(const std::vector<BufferLifetime>& buffers, size_t alignment, const std::vector<int>& order,
                 Fit fit) {
  auto align = [alignment](size_t n) { return (n + alignment - 1) / alignment * alignment; };
  ArenaLayout layout;
  layout.offsets.assign(buffers.size(), 0);
  struct Placed {
    size_t begin, end;
    int first, last;
  };
  std::vector<Placed> placed;  // kept sorted by begin
  std::vector<const Placed*> live;
  for (int i : order) {
    const BufferLifetime& b = buffers[i];
    size_t size = align(b.bytes);
    live.clear();
    for (const Placed& p : placed)
      if (p.first <= b.last && b.first <= p.last) live.push_back(&p);
    // `placed` is sorted by begin, so `live` is too: scan the gaps in address order.
    size_t offset = 0, best = std::numeric_limits<size_t>::max(), best_gap = best;
    for (const Placed* p : live) {
      if (offset + size <= p->begin) {
        if (fit == Fit::kFirst) break;
        if (p->begin - offset < best_gap) best_gap = p->begin - offset, best = offset;
      }
      offset = std::max(offset, p->end);
    }
    if (fit == Fit::kBest && best != std::numeric_limits<size_t>::max()) offset = best;
    layout.offsets[i] = offset;
    layout.total_bytes = std::max(layout.total_bytes, offset + size);
    Placed np{offset, offset + size, b.first, b.last};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), np,
                                   [](const Placed& x, const Placed& y) { return x.begin < y.begin; }),
                  np);
  }
  return layout;
}

}  // namespace

ArenaLayout PackBuffers(const std::vector<BufferLifetime>& buffers, size_t alignment) {
  // The buffers in decreasing order of `key`, ties by earlier start (deterministic).
  auto by = [&](auto key) {
    std::vector<int> order(buffers.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const double ka = key(buffers[a]), kb = key(buffers[b]);
      if (ka != kb) return ka > kb;
      return buffers[a].first < buffers[b].first;
    });
    return order;
  };
  auto size = [](const BufferLifetime& b) { return static_cast<double>(b.bytes); };
  auto span = [](const BufferLifetime& b) { return static_cast<double>(b.last - b.first) * 1e15 + b.bytes; };
  auto area = [](const BufferLifetime& b) { return static_cast<double>(b.bytes) * (b.last - b.first + 1); };
  ArenaLayout best;
  bool have = false;
  for (const std::vector<int>& order : {by(size), by(span), by(area)})
    for (Fit fit : {Fit::kFirst, Fit::kBest}) {
      ArenaLayout l = Pack(buffers, alignment, order, fit);
      if (!have || l.total_bytes < best.total_bytes) best = std::move(l), have = true;
    }
  return best;
}

}  // namespace mixtrain
