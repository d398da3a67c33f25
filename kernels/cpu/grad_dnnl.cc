#include "kernels/cpu/grad_dnnl.h"

#include "kernels/common/half.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {

DType GradComputeType(DType t) {
  if (t == DType::kBF16 && GetCpuFeatures().native_bf16()) return DType::kBF16;
  return DType::kF32;
}


std::vector<int64_t> GroupedWeightDims(const std::vector<int64_t>& w, int64_t group) {
  std::vector<int64_t> d = w;
  if (group > 1) {
    d[0] = w[0] / group;
    d.insert(d.begin(), group);
  }
  return d;
}

}  // namespace mixtrain::cpu
