#include "kernels/cpu/dnnl_common.h"

#include "kernels/common/half.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::dnnl_util {

dnnl::engine& Engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& Stream() {
  thread_local dnnl::stream s(Engine());
  return s;
}

absl::StatusOr<dnnl::memory::data_type> ToDnnl(DType t) {
  switch (t) {
    case DType::kF32:
      return dnnl::memory::data_type::f32;
    case DType::kBF16:
      return dnnl::memory::data_type::bf16;
    case DType::kF16:
      return dnnl::memory::data_type::f16;
    default:
      return absl::UnimplementedError(absl::StrCat("dtype ", DTypeName(t), " has no oneDNN path"));
  }
}

dnnl::memory::dims ToDims(std::span<const int64_t> v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

std::vector<int64_t> DenseStrides(std::span<const int64_t> dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * std::max<int64_t>(dims[i + 1], 1);
  return s;
}

dnnl::memory::desc PlainDesc(std::span<const int64_t> dims, dnnl::memory::data_type dt) {
  return StridedDesc(dims, DenseStrides(dims), dt);
}

dnnl::memory::desc StridedDesc(std::span<const int64_t> dims, std::span<const int64_t> strides,
                               dnnl::memory::data_type dt) {
  return dnnl::memory::desc(ToDims(dims), dt, ToDims(strides));
}

std::vector<int64_t> ShapeKey(const KernelContext& ctx) {
  std::vector<int64_t> key;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorView* t = ctx.input(i);
    if (t == nullptr) {
      key.push_back(-2);
      continue;
    }
    key.push_back(static_cast<int64_t>(t->dtype));
    key.push_back(t->rank());
    key.insert(key.end(), t->dims.begin(), t->dims.end());
  }
  return key;
}

void HalfToFloatN(const uint16_t* in, float* out, int64_t n) {
#pragma omp parallel for if (n > (1 << 16)) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalfN(const float* in, uint16_t* out, int64_t n) {
#pragma omp parallel for if (n > (1 << 16)) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

float* Fp32Staging::Scratch(int64_t n) {
  if (next_ == bufs_.size()) bufs_.emplace_back();
  std::vector<float>& b = bufs_[next_++];
  if (static_cast<int64_t>(b.size()) < n) b.resize(n);
  return b.data();
}

const void* Fp32Staging::Input(const TensorView& t) {
  if (!Staged(t.dtype)) return t.data;
  float* f = Scratch(t.numel());
  const uint16_t* in = t.as<uint16_t>();
  if (t.dtype == DType::kF16) {
    HalfToFloatN(in, f, t.numel());
  } else {
    ParallelFor(t.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) f[i] = BFloat16ToFloat(in[i]);
    });
  }
  return f;
}

void* Fp32Staging::Output(TensorView& t) {
  if (!Staged(t.dtype)) return t.data;
  float* f = Scratch(t.numel());
  pending_.emplace_back(f, &t);
  return f;
}

void Fp32Staging::Finish() {
  for (auto& [f, t] : pending_) {
    uint16_t* out = t->as<uint16_t>();
    if (t->dtype == DType::kF16) {
      FloatToHalfN(f, out, t->numel());
    } else {
      const float* src = f;
      ParallelFor(t->numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = FloatToBFloat16(src[i]);
      });
    }
  }
  pending_.clear();
}

}  // namespace mixtrain::dnnl_util
