// Parameter arithmetic shared by the data-movement shape rules and kernels (see the header).
#include "graph/ops/movement_params.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mixtrain::movement {

absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

absl::StatusOr<std::vector<int64_t>> NormalizeAxes(const std::vector<int64_t>& axes,
                                                   int64_t rank) {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  for (int64_t a : axes) {
    auto n = NormalizeAxis(a, rank);
    if (!n.ok()) return n.status();
    if (std::find(out.begin(), out.end(), *n) != out.end())
      return absl::InvalidArgumentError(absl::StrCat("axis ", a, " appears twice"));
    out.push_back(*n);
  }
  return out;
}

SliceAxis ComputeSliceAxis(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim <= 0) return {};
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  SliceAxis r;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    // (end - start - 1) / step + 1: the ceil without end - start + step overflowing at huge steps.
    r.count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    const uint64_t mag = 0 - static_cast<uint64_t>(step);  // |step|, also for INT64_MIN
    r.count = start > end ? static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / mag + 1) : 0;
  }
  r.start = r.count > 0 ? start : 0;
  return r;
}

absl::StatusOr<SlicePlan> PlanSlice(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& starts,
                                    const std::vector<int64_t>& ends,
                                    const std::vector<int64_t>& axes_in,
                                    const std::vector<int64_t>& steps) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const size_t n = starts.size();
  if (ends.size() != n)
    return absl::InvalidArgumentError(
        absl::StrCat("starts has ", n, " entries but ends has ", ends.size()));
  if (!axes_in.empty() && axes_in.size() != n)
    return absl::InvalidArgumentError(
        absl::StrCat("axes has ", axes_in.size(), " entries, starts has ", n));
  if (!steps.empty() && steps.size() != n)
    return absl::InvalidArgumentError(
        absl::StrCat("steps has ", steps.size(), " entries, starts has ", n));
  std::vector<int64_t> axes = axes_in;
  if (axes.empty())
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  auto norm = NormalizeAxes(axes, rank);
  if (!norm.ok()) return norm.status();
  SlicePlan p;
  p.start.assign(rank, 0);
  p.step.assign(rank, 1);
  p.count.assign(rank, kSameAsInput);
  for (size_t i = 0; i < n; ++i) {
    int64_t ax = (*norm)[i];
    int64_t step = steps.empty() ? 1 : steps[i];
    if (step == 0) return absl::InvalidArgumentError("slice step must not be 0");
    p.step[ax] = step;
    if (dims[ax] < 0) {
      bool identity = step == 1 && starts[i] == 0 && ends[i] >= std::numeric_limits<int32_t>::max();
      p.count[ax] = identity ? kSameAsInput : -1;
      continue;
    }
    SliceAxis s = ComputeSliceAxis(dims[ax], starts[i], ends[i], step);
    p.start[ax] = s.start;
    p.count[ax] = s.count;
  }
  for (int64_t d = 0; d < rank; ++d)
    if (p.count[d] == kSameAsInput && dims[d] >= 0) p.count[d] = dims[d];
  return p;
}

absl::StatusOr<std::vector<int64_t>> ExpandPads(int64_t rank, const std::vector<int64_t>& pads,
                                                const std::vector<int64_t>& axes_in) {
  std::vector<int64_t> axes = axes_in;
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  if (pads.size() != 2 * axes.size())
    return absl::InvalidArgumentError(absl::StrCat("pads has ", pads.size(),
                                                   " entries, expected ", 2 * axes.size()));
  auto norm = NormalizeAxes(axes, rank);
  if (!norm.ok()) return norm.status();
  std::vector<int64_t> out(2 * rank, 0);
  const size_t k = axes.size();
  for (size_t i = 0; i < k; ++i) {
    out[(*norm)[i]] = pads[i];
    out[rank + (*norm)[i]] = pads[k + i];
  }
  return out;
}

Window ShapeWindow(int64_t rank, int64_t start, int64_t end) {
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  Window w;
  w.begin = std::clamp<int64_t>(start, 0, rank);
  w.end = std::max(w.begin, std::clamp<int64_t>(end, 0, rank));
  return w;
}

absl::StatusOr<int64_t> RangeCount(double start, double limit, double delta) {
  if (delta == 0) return absl::InvalidArgumentError("Range delta must not be 0");
  double n = std::ceil((limit - start) / delta);
  if (!std::isfinite(n)) return absl::InvalidArgumentError("Range has a non-finite length");
  return n > 0 ? static_cast<int64_t>(n) : 0;
}

}  // namespace mixtrain::movement
