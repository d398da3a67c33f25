// Activation layouts of the oneDNN conv and pooling kernels, described to oneDNN by their
// logical [N, C, spatial...] dims:
//   channels-last:   stored [N, spatial..., C] (strides);
//   channel-blocked: stored [N, C/b, spatial..., b], oneDNN's nC<spatial>16c (b = 16, its
//                    AVX-512 kernels' block) or nC<spatial>8c (b = 8, its AVX2 kernels'), a
//                    format tag: its strides are not expressible per dim.
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

// The channel block oneDNN's AVX-512 kernels use for fp32 and bf16; its AVX2 kernels use 8.
inline constexpr int64_t kChannelBlock = 16;
inline constexpr int64_t kAvx2ChannelBlock = 8;
inline bool SupportedChannelBlock(int64_t b) { return b == kChannelBlock || b == kAvx2ChannelBlock; }

// [N, C/b, sp..., b] -> [N, C, sp...].
inline std::vector<int64_t> UnblockedDims(const std::vector<int64_t>& d) {
  std::vector<int64_t> r = {d[0], d[1] * d.back()};
  r.insert(r.end(), d.begin() + 2, d.end() - 1);
  return r;
}
// [N, C, sp...] -> [N, C/b, sp..., b] (C a multiple of b).
inline std::vector<int64_t> BlockedDims(const std::vector<int64_t>& d, int64_t b) {
  std::vector<int64_t> r = {d[0], d[1] / b};
  r.insert(r.end(), d.begin() + 2, d.end());
  r.push_back(b);
  return r;
}

enum class Layout { kChannelsFirst, kChannelsLast, kBlocked };

// Logical [N, C, sp...] dims of a tensor stored in `layout`, and back.
inline std::vector<int64_t> LogicalDims(const std::vector<int64_t>& stored, Layout layout) {
  if (layout == Layout::kChannelsLast) return ChannelsFirst(stored);
  if (layout == Layout::kBlocked) return UnblockedDims(stored);
  return stored;
}
inline std::vector<int64_t> StoredDims(const std::vector<int64_t>& logical, Layout layout,
                                       int64_t block = kChannelBlock) {
  if (layout == Layout::kChannelsLast) return ChannelsLast(logical);
  if (layout == Layout::kBlocked) return BlockedDims(logical, block);
  return logical;
}

// Descriptor of logical [N, C, sp...] dims stored as [N, C, sp...], [N, sp..., C] or
// [N, C/b, sp..., b] (b = `block`, 16 or 8).
inline dnnl::memory::desc ActivationDesc(const std::vector<int64_t>& dims,
                                         dnnl::memory::data_type dt, Layout layout,
                                         int64_t block = kChannelBlock) {
  using tag = dnnl::memory::format_tag;
  if (layout == Layout::kBlocked) {
    const tag t = block == kAvx2ChannelBlock
                      ? (dims.size() == 3 ? tag::nCw8c : dims.size() == 4 ? tag::nChw8c : tag::nCdhw8c)
                      : (dims.size() == 3 ? tag::nCw16c : dims.size() == 4 ? tag::nChw16c : tag::nCdhw16c);
    return dnnl::memory::desc(ToDims(dims), dt, t);
  }
  if (layout == Layout::kChannelsFirst) return PlainDesc(dims, dt);
  const std::vector<int64_t> st = DenseStrides(ChannelsLast(dims));
  std::vector<int64_t> strides = {st[0], st.back()};
  strides.insert(strides.end(), st.begin() + 1, st.end() - 1);
  return StridedDesc(dims, strides, dt);
}

}  // namespace mixtrain::dnnl_util
