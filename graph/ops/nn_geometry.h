// Sliding-window geometry of Conv, ConvTranspose and the pooling ops: kernel, strides,
// dilations, the explicit pads every auto_pad/ceil_mode setting resolves to, and the output
// spatial sizes. Shape inference (graph/ops/nn_ops.cc) and the oneDNN kernels
// (kernels/cpu/dnnl_conv.cc, dnnl_pool.cc) share it, so the planned and the computed output
// shapes cannot disagree.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mixtrain {

struct WindowGeometry {
  // One entry per spatial dim.
  std::vector<int64_t> kernel, strides, dilations;
  std::vector<int64_t> pads_begin, pads_end;  // as ONNX means them (auto_pad resolved)
  std::vector<int64_t> out;                   // output spatial sizes
  // Conv/pool: the end padding a window implementation needs so that exactly `out` windows
  // fit (>= pads_end in ceil_mode). ConvTranspose: the end crop (pads_end - output_padding,
  // or whatever output_shape asks for; may be negative).
  std::vector<int64_t> pads_end_effective;

  int64_t effective_kernel(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
};

// Conv and pooling ops. `in_spatial` are the input's spatial sizes; `kernel` comes from the
// kernel_shape attribute or, for Conv without it, from W. `ceil_mode` is read from the node
// (pooling only).
absl::StatusOr<WindowGeometry> ForwardWindowGeometry(const Node& node,
                                                     const std::vector<int64_t>& in_spatial,
                                                     const std::vector<int64_t>& kernel);

// ConvTranspose: output_padding, output_shape and auto_pad resolved the way ONNX's reference
// implementation does it.
absl::StatusOr<WindowGeometry> TransposedWindowGeometry(const Node& node,
                                                        const std::vector<int64_t>& in_spatial,
                                                        const std::vector<int64_t>& kernel);

}  // namespace mixtrain
