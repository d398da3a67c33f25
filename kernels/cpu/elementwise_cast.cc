// CPU Cast and CastLike between every executable dtype of graph/dtype.h (see ew::CastOp for the
// conversion rules). opset 19's `saturate` only concerns float8 types, which the IR has not.
#include <cstring>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/rows_avx512.h"

namespace mixtrain::cpu_ew {

absl::Status CastBuffer(const KernelContext& ctx, DType from, const void* in, DType to, void* out,
                        int64_t n) {
  absl::Status inner = absl::OkStatus();
  // The float-source branches read `in` as float, not `src`: clang checks calls that do not
  // depend on D while S is bool, in branches that only D would discard.
  absl::Status outer = Dispatch(AllStorage{}, from, ctx, [&](auto from_tag) {
    using S = typename decltype(from_tag)::type;
    inner = Dispatch(AllStorage{}, to, ctx, [&](auto to_tag) {
      using D = typename decltype(to_tag)::type;
      const S* src = static_cast<const S*>(in);
      D* dst = static_cast<D*>(out);
      if constexpr (std::is_same_v<S, D>) {
        if (src != dst) ParallelFor(n, 1 << 18, [&](int64_t b, int64_t e) {
          std::memcpy(dst + b, src + b, (e - b) * sizeof(S));
        });
      } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, ew::bf16>) {
        if (cpu::Avx512Enabled()) {
          ParallelFor(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
            cpu::avx512::FloatToBFloat16Row(static_cast<const float*>(in) + b, reinterpret_cast<uint16_t*>(dst + b), e - b);
          });
        } else {
          cpu::FloatToBFloat16N(static_cast<const float*>(in), reinterpret_cast<uint16_t*>(dst), n);
        }
      } else if constexpr (std::is_same_v<S, ew::bf16> && std::is_same_v<D, float>) {
        cpu::BFloat16ToFloatN(reinterpret_cast<const uint16_t*>(src), dst, n);
      } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, ew::f16>) {
        cpu::FloatToHalfN(static_cast<const float*>(in), reinterpret_cast<uint16_t*>(dst), n);
      } else if constexpr (std::is_same_v<S, ew::f16> && std::is_same_v<D, float>) {
        cpu::HalfToFloatN(reinterpret_cast<const uint16_t*>(src), dst, n);
      } else {
        UnaryMap(src, dst, n, ew::CastOp<S, D>{});
      }
    });
  });
  MT_RETURN_IF_ERROR(outer);
  return inner;
}

namespace {

absl::Status CastKernel(KernelContext& ctx) {
  const TensorView* x = ctx.input(0);
  TensorView* y = ctx.output(0);
  if (x == nullptr || y == nullptr) return ctx.Error("missing input 0");
  if (x->numel() != y->numel()) return ctx.Error("output size differs from the input's");
  return CastBuffer(ctx, x->dtype, x->data, y->dtype, y->data, x->numel());
}

}  // namespace

MT_REGISTER_KERNELS(cpu_elementwise_cast) {
  r.Register({"Cast", "", DeviceType::kCPU, DTypes(AllStorage{}), 0, FnKernel(CastKernel)});
  r.Register({"CastLike", "", DeviceType::kCPU, DTypes(AllStorage{}), 0, FnKernel(CastKernel)});
}

}  // namespace mixtrain::cpu_ew
