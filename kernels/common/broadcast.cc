// Numpy broadcasting of concrete dims and the merged loop layout (see broadcast.h).
#include "kernels/common/broadcast.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"

namespace mixtrain {

absl::StatusOr<std::vector<int64_t>> BroadcastDims(std::span<const int64_t> a,
                                                   std::span<const int64_t> b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1)
      return absl::InvalidArgumentError(absl::StrCat("dims [", absl::StrJoin(a, ","), "] and [",
                                                     absl::StrJoin(b, ","),
                                                     "] do not broadcast"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> BroadcastStrides(std::span<const int64_t> in, std::span<const int64_t> out) {
  MT_CHECK(in.size() <= out.size()) << "BroadcastStrides: input rank above output rank";
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    size_t di = in.size() - 1 - k, dout = out.size() - 1 - k;
    MT_CHECK(in[di] == out[dout] || in[di] == 1) << "BroadcastStrides: dims do not broadcast";
    strides[dout] = in[di] == 1 ? 0 : s;
    s *= in[di];
  }
  return strides;
}

absl::StatusOr<BroadcastLayout> MakeBroadcastLayout(std::span<const std::span<const int64_t>> inputs,
                                                    std::span<const int64_t> out) {
  if (inputs.size() > static_cast<size_t>(kMaxBroadcastInputs))
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast of ", inputs.size(), " inputs (at most ", kMaxBroadcastInputs,
                     ")"));
  BroadcastLayout l;
  l.num_inputs = static_cast<int>(inputs.size());
  l.numel = 1;
  for (int64_t d : out) l.numel *= d;
  using Dims = absl::InlinedVector<int64_t, 8>;  // no heap for the ranks models use
  absl::InlinedVector<Dims, kMaxBroadcastInputs> strides;
  for (std::span<const int64_t> in : inputs) {
    bool ok = in.size() <= out.size();
    for (size_t k = 0; ok && k < in.size(); ++k) {
      int64_t di = in[in.size() - 1 - k], dout = out[out.size() - 1 - k];
      ok = di == dout || di == 1;
    }
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat("dims [", absl::StrJoin(in, ","),
                                                     "] do not broadcast to [",
                                                     absl::StrJoin(out, ","), "]"));
    Dims& st = strides.emplace_back(out.size(), 0);
    int64_t s = 1;
    for (size_t k = 0; k < in.size(); ++k) {
      size_t di = in.size() - 1 - k, dout = out.size() - 1 - k;
      st[dout] = in[di] == 1 ? 0 : s;
      s *= in[di];
    }
  }
  if (l.numel <= 1) return l;  // rank 0: every input is read at offset 0
  // Keep the non-1 output dims, merging a dim into its outer neighbour when every input walks
  // them as one (outer stride == inner stride * inner size; true for broadcast 0 strides too).
  Dims dims;
  absl::InlinedVector<Dims, kMaxBroadcastInputs> merged(inputs.size());
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    bool can_merge = !dims.empty();
    for (size_t i = 0; can_merge && i < inputs.size(); ++i)
      can_merge = merged[i].back() == strides[i][d] * out[d];
    if (can_merge) {
      dims.back() *= out[d];
      for (size_t i = 0; i < inputs.size(); ++i) merged[i].back() = strides[i][d];
    } else {
      dims.push_back(out[d]);
      for (size_t i = 0; i < inputs.size(); ++i) merged[i].push_back(strides[i][d]);
    }
  }
  if (dims.size() > static_cast<size_t>(kMaxBroadcastRank))
    return absl::UnimplementedError(absl::StrCat("broadcast needs ", dims.size(),
                                                 " loop dims (at most ", kMaxBroadcastRank, ")"));
  l.rank = static_cast<int>(dims.size());
  for (int d = 0; d < l.rank; ++d) {
    l.dims[d] = dims[d];
    for (size_t i = 0; i < inputs.size(); ++i) l.strides[i][d] = merged[i][d];
  }
  return l;
}

}  // namespace mixtrain
