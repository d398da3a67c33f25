// Helpers of the CPU kernels of the ai.mixtrain backward ops (kernels/cpu/grad_*.cc). These
// kernels load their operands as float (whatever the storage type), compute in float with double
// accumulation where sums are long, and store back with round-to-nearest-even. Windowed ops see
// 1-D, 2-D and 3-D inputs as 3-D (missing leading spatial dims of size 1), so one loop nest
// serves all ranks.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ops/nn_geometry.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {

// Writes a whole float tensor from floats.
inline void StoreFloats(TensorView& t, const std::vector<float>& v) {
  switch (t.dtype) {
    case DType::kF32: std::copy(v.begin(), v.end(), t.as<float>()); break;
    case DType::kF16:
      for (size_t i = 0; i < v.size(); ++i) t.as<uint16_t>()[i] = FloatToHalf(v[i]);
      break;
    case DType::kBF16:
      for (size_t i = 0; i < v.size(); ++i) t.as<uint16_t>()[i] = FloatToBFloat16(v[i]);
      break;
    default:
      for (size_t i = 0; i < v.size(); ++i) StoreFloatAt(t, static_cast<int64_t>(i), v[i]);
  }
}

// A sliding window over up to three spatial dims, padded to exactly three.
struct Window3 {
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1};
  std::array<int64_t, 3> pb{0, 0, 0}, pe{0, 0, 0};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};

// The window of a Conv/pooling node over input dims `x` (N, C, spatial...) with kernel sizes
// `kernel`; fails (naming the node) on bad attributes or more than three spatial dims.
inline absl::StatusOr<Window3> MakeWindow3(const KernelContext& ctx,
                                           const std::vector<int64_t>& x,
                                           const std::vector<int64_t>& kernel) {
  if (x.size() < 3 || x.size() > 5)
    return ctx.Error("expects N x C x D1 [x D2 [x D3]] inputs");
  std::vector<int64_t> spatial(x.begin() + 2, x.end());
  auto g = ForwardWindowGeometry(ctx.node(), spatial, kernel);
  if (!g.ok()) return g.status();
  Window3 w;
  const size_t off = 3 - spatial.size();
  for (size_t i = 0; i < spatial.size(); ++i) {
    w.in[off + i] = spatial[i];
    w.out[off + i] = g->out[i];
    w.k[off + i] = g->kernel[i];
    w.s[off + i] = g->strides[i];
    w.d[off + i] = g->dilations[i];
    w.pb[off + i] = g->pads_begin[i];
    w.pe[off + i] = g->pads_end[i];
  }
  return w;
}

}  // namespace mixtrain::cpu
