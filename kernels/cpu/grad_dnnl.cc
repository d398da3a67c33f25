#include "kernels/cpu/grad_dnnl.h"

#include "kernels/common/half.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu {

DType GradComputeType(DType t) {
  if (t == DType::kBF16 && GetCpuFeatures().native_bf16()) return DType::kBF16;
  return DType::kF32;
}

float* GradStaging::Scratch(int64_t n) {
  if (next_ == bufs_.size()) bufs_.emplace_back();
  std::vector<float>& b = bufs_[next_++];
  if (static_cast<int64_t>(b.size()) < n) b.resize(n);
  return b.data();
}

const void* GradStaging::Input(const TensorView& t) {
  if (GradComputeType(t.dtype) == t.dtype) return t.data;
  float* f = Scratch(t.numel());
  const uint16_t* in = t.as<uint16_t>();
  if (t.dtype == DType::kF16) {
    dnnl_util::HalfToFloatN(in, f, t.numel());
  } else {
    ParallelFor(t.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) f[i] = BFloat16ToFloat(in[i]);
    });
  }
  return f;
}

void* GradStaging::Output(TensorView& t) {
  if (GradComputeType(t.dtype) == t.dtype) return t.data;
  float* f = Scratch(t.numel());
  pending_.emplace_back(f, &t);
  return f;
}

void GradStaging::Finish() {
  for (auto& [f, t] : pending_) {
    uint16_t* out = t->as<uint16_t>();
    if (t->dtype == DType::kF16) {
      dnnl_util::FloatToHalfN(f, out, t->numel());
    } else {
      const float* src = f;
      ParallelFor(t->numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = FloatToBFloat16(src[i]);
      });
    }
  }
  pending_.clear();
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
