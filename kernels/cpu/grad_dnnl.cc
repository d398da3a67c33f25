#include "kernels/cpu/grad_dnnl.h"


namespace mixtrain::cpu {

std::vector<int64_t> GroupedWeightDims(const std::vector<int64_t>& w, int64_t group) {
  std::vector<int64_t> d = w;
  if (group > 1) {
    d[0] = w[0] / group;
    d.insert(d.begin(), group);
  }
  return d;
}

}  // namespace mixtrain::cpu
