// CPU kernel of ai.mixtrain.PrecisionStats (the precision debugger's per-value statistics; see
// kernels/common/precision_stats.h for the row).
#include <mutex>

#include "absl/strings/str_cat.h"
#include "graph/half.h"
#include "kernels/common/precision_stats.h"
#include "kernels/cpu/parallel.h"
#include "kernels/registry.h"

namespace mixtrain {
namespace {

template <typename T, typename Load>
StatsAccumulator Measure(const T* x, int64_t n, const StatsRange& range, Load load) {
  StatsAccumulator total;
  std::mutex mu;
  ParallelFor(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    StatsAccumulator a;
    a.elements = end - begin;
    for (int64_t i = begin; i < end; ++i) a.Add(load(x[i]), range);
    std::lock_guard<std::mutex> lock(mu);
    total.Merge(a);
  });
  return total;
}

// stats[8] <- PrecisionStats(x), attribute `to`: the ONNX dtype whose range the values are
// measured against (the value's own, or the type a Cast converts them to).
absl::Status PrecisionStatsKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* out = ctx.output(0);
  if (x == nullptr || out == nullptr || out->numel() != kNumStatFields)
    return ctx.Error("expects one tensor and an f32 output of 8 statistics");
  absl::StatusOr<DType> to = FromOnnxType(static_cast<int32_t>(ctx.node().attr_int("to", 1)));
  if (!to.ok()) return ctx.Error(absl::StrCat("attribute 'to': ", to.status().message()));
  const StatsRange range = StatsRangeOf(*to);
  const int64_t n = x->numel();
  StatsAccumulator a;
  switch (x->dtype) {
    case DType::kF32: a = Measure(x->as<float>(), n, range, [](float v) { return v; }); break;
    case DType::kF64:
      a = Measure(x->as<double>(), n, range, [](double v) { return static_cast<float>(v); });
      break;
    case DType::kF16: a = Measure(x->as<uint16_t>(), n, range, HalfToFloat); break;
    case DType::kBF16: a = Measure(x->as<uint16_t>(), n, range, BFloat16ToFloat); break;
    default: return ctx.Error(absl::StrCat("input must be a float tensor, got ", DTypeName(x->dtype)));
  }
  a.Write(out->as<float>());
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(precision_stats) {
  r.Register({"PrecisionStats", "ai.mixtrain", DeviceType::kCPU, {}, 0, FnKernel(PrecisionStatsKernel)});
}

}  // namespace mixtrain
