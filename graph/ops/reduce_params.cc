// Reduce* axes arithmetic shared by shape rules and kernels (see the header).
#include "graph/ops/reduce_params.h"

#include "graph/ops/movement_params.h"

namespace mixtrain::reduce {

absl::StatusOr<std::vector<bool>> ReduceMask(const Node& node,
                                             const std::vector<int64_t>* axes_input,
                                             int64_t rank) {
  std::vector<int64_t> axes;
  if (node.has_attr("axes"))
    axes = node.attr_ints("axes");
  else if (axes_input != nullptr)
    axes = *axes_input;
  if (axes.empty()) {
    bool noop = node.attr_int("noop_with_empty_axes", 0) != 0;
    return std::vector<bool>(rank, !noop);
  }
  auto norm = movement::NormalizeAxes(axes, rank);
  if (!norm.ok()) return norm.status();
  std::vector<bool> mask(rank, false);
  for (int64_t a : *norm) mask[a] = true;
  return mask;
}

std::vector<int64_t> ReducedDims(const std::vector<int64_t>& dims, const std::vector<bool>& mask,
                                 bool keepdims) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!mask[i])
      out.push_back(dims[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

}  // namespace mixtrain::reduce
