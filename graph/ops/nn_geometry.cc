#include "graph/ops/nn_geometry.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mixtrain {
namespace {

absl::Status GeomError(const Node& node, const std::string& msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node.name(), "' (", node.op_type(), "): ", msg));
}

// Reads an ints attribute of length n (or fills `dflt` when absent).
absl::StatusOr<std::vector<int64_t>> PerDim(const Node& node, const char* name, size_t n,
                                            int64_t dflt) {
  std::vector<int64_t> v = node.attr_ints(name);
  if (v.empty()) return std::vector<int64_t>(n, dflt);
  if (v.size() != n)
    return GeomError(node, absl::StrCat("attribute ", name, " has ", v.size(),
                                        " values, expected ", n));
  return v;
}

// Common attributes; `pads` is left as given (2n values or zeros).
absl::StatusOr<WindowGeometry> ReadCommon(const Node& node, const std::vector<int64_t>& in,
                                          const std::vector<int64_t>& kernel) {
  const size_t n = in.size();
  WindowGeometry g;
  if (kernel.size() != n)
    return GeomError(node, absl::StrCat("kernel has ", kernel.size(), " dims but the input has ",
                                        n, " spatial dims"));
  g.kernel = kernel;
  MT_ASSIGN_OR_RETURN(g.strides, PerDim(node, "strides", n, 1));
  MT_ASSIGN_OR_RETURN(g.dilations, PerDim(node, "dilations", n, 1));
  std::vector<int64_t> pads = node.attr_ints("pads");
  if (pads.empty()) pads.assign(2 * n, 0);
  if (pads.size() != 2 * n)
    return GeomError(node, absl::StrCat("attribute pads has ", pads.size(), " values, expected ",
                                        2 * n));
  g.pads_begin.assign(pads.begin(), pads.begin() + n);
  g.pads_end.assign(pads.begin() + n, pads.end());
  for (size_t i = 0; i < n; ++i) {
    if (g.kernel[i] < 1 || g.strides[i] < 1 || g.dilations[i] < 1)
      return GeomError(node, "kernel, strides and dilations must be >= 1");
    if (g.pads_begin[i] < 0 || g.pads_end[i] < 0) return GeomError(node, "pads must be >= 0");
  }
  return g;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<WindowGeometry> ForwardWindowGeometry(const Node& node,
                                                     const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& kernel) {
  MT_ASSIGN_OR_RETURN(WindowGeometry g, ReadCommon(node, in, kernel));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  const bool ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  const size_t n = in.size();
  g.out.resize(n);
  g.pads_end_effective.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ek = g.effective_kernel(i), s = g.strides[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.out[i] = CeilDiv(in[i], s);
      int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * s + ek - in[i]);
      int64_t small = total / 2;
      g.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      g.pads_end[i] = total - g.pads_begin[i];
    } else if (auto_pad == "VALID" || auto_pad == "NOTSET") {
      if (auto_pad == "VALID") g.pads_begin[i] = g.pads_end[i] = 0;
      int64_t span = in[i] + g.pads_begin[i] + g.pads_end[i] - ek;
      if (span < 0)
        return GeomError(node, absl::StrCat("kernel extent ", ek, " exceeds padded input ",
                                            in[i] + g.pads_begin[i] + g.pads_end[i],
                                            " in spatial dim ", i));
      g.out[i] = (ceil_mode ? CeilDiv(span, s) : span / s) + 1;
      // A last window starting in the end padding is dropped (ONNX reference, PyTorch).
      if (ceil_mode && (g.out[i] - 1) * s >= in[i] + g.pads_begin[i]) --g.out[i];
    } else {
      return GeomError(node, absl::StrCat("unknown auto_pad '", auto_pad, "'"));
    }
    g.pads_end_effective[i] =
        std::max(g.pads_end[i], (g.out[i] - 1) * s + ek - in[i] - g.pads_begin[i]);
  }
  return g;
}

absl::StatusOr<WindowGeometry> TransposedWindowGeometry(const Node& node,
                                                        const std::vector<int64_t>& in,
                                                        const std::vector<int64_t>& kernel) {
  MT_ASSIGN_OR_RETURN(WindowGeometry g, ReadCommon(node, in, kernel));
  const size_t n = in.size();
  MT_ASSIGN_OR_RETURN(std::vector<int64_t> out_pad, PerDim(node, "output_padding", n, 0));
  std::vector<int64_t> out_shape = node.attr_ints("output_shape");
  // output_shape may list the batch and channel dims too.
  if (out_shape.size() == n + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (!out_shape.empty() && out_shape.size() != n)
    return GeomError(node, absl::StrCat("output_shape has ", out_shape.size(),
                                        " values, expected ", n));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" &&
      auto_pad != "SAME_LOWER")
    return GeomError(node, absl::StrCat("unknown auto_pad '", auto_pad, "'"));
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  const bool explicit_pads = node.has_attr("pads") && !same;
  g.out.resize(n);
  g.pads_end_effective.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t full = g.strides[i] * (in[i] - 1) + out_pad[i] + g.effective_kernel(i);
    if (auto_pad == "VALID") g.pads_begin[i] = g.pads_end[i] = 0;
    if (!explicit_pads && (same || !out_shape.empty())) {
      // Pads follow from the requested size (output_shape, or in*stride for SAME).
      int64_t target = out_shape.empty() ? in[i] * g.strides[i] : out_shape[i];
      int64_t total = full - target;  // negative when output_shape asks for more than `full`
      int64_t small = total >= 0 ? total / 2 : -((1 - total) / 2);  // floor(total / 2)
      g.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      g.pads_end[i] = total - g.pads_begin[i];
      g.out[i] = target;
    } else {
      g.out[i] = out_shape.empty() ? full - g.pads_begin[i] - g.pads_end[i] : out_shape[i];
    }
    if (g.out[i] < 1)
      return GeomError(node, absl::StrCat("output size ", g.out[i], " in spatial dim ", i));
    g.pads_end_effective[i] = full - out_pad[i] - g.pads_begin[i] - g.out[i];
  }
  return g;
}

}  // namespace mixtrain
