// Channels-last activations for the oneDNN conv and pooling kernels: a tensor stored as
// [N, spatial..., C] is described to oneDNN by its logical [N, C, spatial...] dims with strides.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/dnnl_common.h"

namespace mixtrain::dnnl_util {

// [N, sp..., C] -> [N, C, sp...].
inline std::vector<int64_t> ChannelsFirst(const std::vector<int64_t>& d) {
  std::vector<int64_t> r = {d[0], d.back()};
  r.insert(r.end(), d.begin() + 1, d.end() - 1);
  return r;
}
// [N, C, sp...] -> [N, sp..., C].
inline std::vector<int64_t> ChannelsLast(const std::vector<int64_t>& d) {
  std::vector<int64_t> r = {d[0]};
  r.insert(r.end(), d.begin() + 2, d.end());
  r.push_back(d[1]);
  return r;
}

// Descriptor of logical [N, C, sp...] dims stored as [N, C, sp...] or as [N, sp..., C].
inline dnnl::memory::desc ActivationDesc(const std::vector<int64_t>& dims,
                                         dnnl::memory::data_type dt, bool channels_last) {
  if (!channels_last) return PlainDesc(dims, dt);
  const std::vector<int64_t> st = DenseStrides(ChannelsLast(dims));
  std::vector<int64_t> strides = {st[0], st.back()};
  strides.insert(strides.end(), st.begin() + 1, st.end() - 1);
  return StridedDesc(dims, strides, dt);
}

}  // namespace mixtrain::dnnl_util
