#include "runtime/arena.h"

#include <algorithm>
#include <numeric>

namespace mixtrain {

ArenaLayout PackBuffers(const std::vector<BufferLifetime>& buffers, size_t alignment) {
  auto align = [alignment](size_t n) { return (n + alignment - 1) / alignment * alignment; };
  std::vector<int> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  // Larger first; ties by earlier start keep the result deterministic.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
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
    size_t offset = 0;
    for (const Placed* p : live) {
      if (offset + size <= p->begin) break;
      offset = std::max(offset, p->end);
    }
    layout.offsets[i] = offset;
    layout.total_bytes = std::max(layout.total_bytes, offset + size);
    Placed np{offset, offset + size, b.first, b.last};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), np,
                                   [](const Placed& x, const Placed& y) { return x.begin < y.begin; }),
                  np);
  }
  return layout;
}

}  // namespace mixtrain
