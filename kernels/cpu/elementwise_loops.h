// The CPU loops that apply kernels/common/elementwise.h functors to tensors, shared by the
// elementwise kernel files (elementwise*.cc). Why they look the way they do:
// - the functor is a template parameter, so each loop is one tight, inlinable body with no
//   per-element indirection; contiguous fp32 rows are plain `y[i] = op(a[i], b[i])` loops marked
//   `omp simd` so GCC vectorizes them at -O2;
// - fp16 rows are converted in small blocks to float (F16C, convert.h), computed there
//   (vectorized) and rounded back, so the conversion code stays out of the math loop; bf16 rows
//   convert inline;
// - broadcasting walks the merged layout of kernels/common/broadcast.h row by row, with the four
//   innermost stride cases (both contiguous, either operand fixed, both fixed) specialized;
// - each row loop is compiled twice, for the AVX2 baseline and for AVX-512 (simd_target.h),
//   and the row functions pick one at run time;
// - large tensors are split over both cores with ParallelFor.
#pragma once

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/broadcast.h"
#include "kernels/common/elementwise.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_target.h"
#include "kernels/registry.h"

namespace mixtrain::cpu_ew {

using ew::Io;

// --- dtype <-> storage type -------------------------------------------------------------------
template <typename S>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<S, float>) return DType::kF32;
  else if constexpr (std::is_same_v<S, ew::f16>) return DType::kF16;
  else if constexpr (std::is_same_v<S, ew::bf16>) return DType::kBF16;
  else if constexpr (std::is_same_v<S, double>) return DType::kF64;
  else if constexpr (std::is_same_v<S, int8_t>) return DType::kI8;
  else if constexpr (std::is_same_v<S, int32_t>) return DType::kI32;
  else if constexpr (std::is_same_v<S, int64_t>) return DType::kI64;
  else if constexpr (std::is_same_v<S, uint8_t>) return DType::kU8;
  else if constexpr (std::is_same_v<S, bool>) return DType::kBool;
  else static_assert(sizeof(S) == 0, "no DType for this storage type");
}

template <typename S>
struct Tag {
  using type = S;
};

template <typename... Ts>
struct TypeList {};
using FloatStorage = TypeList<float, ew::f16, ew::bf16>;
using SignedStorage = TypeList<float, ew::f16, ew::bf16, double, int8_t, int32_t, int64_t>;
using NumericStorage = TypeList<float, ew::f16, ew::bf16, double, int8_t, int32_t, int64_t, uint8_t>;
using AllStorage =
    TypeList<float, ew::f16, ew::bf16, double, int8_t, int32_t, int64_t, uint8_t, bool>;

template <typename... Ts>
std::vector<DType> DTypes(TypeList<Ts...>) {
  return {DTypeOf<Ts>()...};
}

// Calls fn(Tag<S>{}) for the storage type S of `t` among the list; an error when none matches.
template <typename... Ts, typename Fn>
absl::Status Dispatch(TypeList<Ts...>, DType t, const KernelContext& ctx, const Fn& fn) {
  bool done = ((t == DTypeOf<Ts>() ? (fn(Tag<Ts>{}), true) : false) || ...);
  if (done) return absl::OkStatus();
  return ctx.Error(absl::StrCat("unsupported dtype ", DTypeName(t)));
}

// --- loops ---------------------------------------------------------------------------------------
inline constexpr int64_t kBlock = 256;  // floats per conversion block (1 KiB on the stack)

// fp16 rows go through float blocks: its conversion (subnormals, variable shifts) does not
// vectorize inside the math loop. bf16's (a shift to load, integer rounding to store) does, and
// one fused pass is 3x faster than four passes over stack blocks on rows as short as a
// transformer's hidden size.
template <typename S>
inline constexpr bool kBlocked = std::is_same_v<S, ew::f16>;

// Unary ops are mostly the long polynomials (Erf, Exp, Gelu): there a fused bf16 loop runs out
// of vector registers (the constants spill) and the blocked form is 20% faster; binary ops are
// cheap, and the fused loop wins.
template <typename S>
inline constexpr bool kBlockedUnary = kBlocked<S> || std::is_same_v<S, ew::bf16>;

// Block loads and stores of the blocked loops: fp16 <-> float with F16C (convert.h), the rest
// through Io.
template <typename S, typename C>
[[gnu::always_inline]] inline void LoadBlock(const S* x, C* out, int64_t len) {
  if constexpr (std::is_same_v<S, ew::f16> && std::is_same_v<C, float>) {
    cpu::HalfToFloatRow(reinterpret_cast<const uint16_t*>(x), out, len);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) out[i] = Io<S>::Load(x[i]);
  }
}
template <typename C, typename S>
[[gnu::always_inline]] inline void StoreBlock(const C* in, S* y, int64_t len) {
  if constexpr (std::is_same_v<S, ew::f16> && std::is_same_v<C, float>) {
    cpu::FloatToHalfRow(in, reinterpret_cast<uint16_t*>(y), len);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) y[i] = Io<S>::Store(in[i]);
  }
}

// y[i] = op(x[i]) for i in [0, n), rows of one thread.
template <typename Op, typename SI, typename SO>
[[gnu::always_inline]] inline void UnaryRowBody(const SI* x, SO* y, int64_t n, const Op& op) {
  if constexpr (kBlockedUnary<SI> || kBlockedUnary<SO>) {
    using CI = typename Io<SI>::C;
    for (int64_t s = 0; s < n; s += kBlock) {
      int64_t len = n - s < kBlock ? n - s : kBlock;
      CI in[kBlock];
      LoadBlock(x + s, in, len);
      decltype(op(in[0])) out[kBlock];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) out[i] = op(in[i]);
      StoreBlock(out, y + s, len);
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = Io<SO>::Store(op(Io<SI>::Load(x[i])));
  }
}

template <typename Op, typename SI, typename SO>
MT_TARGET_AVX512 void UnaryRowAvx512(const SI* x, SO* y, int64_t n, const Op& op) {
  UnaryRowBody(x, y, n, op);
}

template <typename Op, typename SI, typename SO>
void UnaryRow(const SI* x, SO* y, int64_t n, const Op& op) {
  if (cpu::Avx512Enabled())
    UnaryRowAvx512(x, y, n, op);
  else
    UnaryRowBody(x, y, n, op);
}

template <typename Op, typename SI, typename SO>
void UnaryMap(const SI* x, SO* y, int64_t n, const Op& op, int64_t grain = kElementwiseGrain) {
  ParallelFor(n, grain, [&](int64_t b, int64_t e) { UnaryRow(x + b, y + b, e - b, op); });
}

// o[i] = op(a[i * sa], b[i * sb]) for a row, with sa, sb in {0, 1}.
template <typename Op, typename SA, typename SB, typename SO>
[[gnu::always_inline]] inline void BinaryRowBody(const SA* a, int64_t sa, const SB* b, int64_t sb,
                                                 SO* o, int64_t n, const Op& op) {
  using CA = typename Io<SA>::C;
  using CB = typename Io<SB>::C;
  if constexpr (kBlocked<SA> || kBlocked<SB> || kBlocked<SO>) {
    CA av[kBlock];
    CB bv[kBlock];
    const CA a0 = Io<SA>::Load(a[0]);
    const CB b0 = Io<SB>::Load(b[0]);
    for (int64_t s = 0; s < n; s += kBlock) {
      int64_t len = n - s < kBlock ? n - s : kBlock;
      if (sa) {
        LoadBlock(a + s, av, len);
      } else {
        for (int64_t i = 0; i < len; ++i) av[i] = a0;
      }
      if (sb) {
        LoadBlock(b + s, bv, len);
      } else {
        for (int64_t i = 0; i < len; ++i) bv[i] = b0;
      }
      decltype(op(av[0], bv[0])) out[kBlock];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) out[i] = op(av[i], bv[i]);
      StoreBlock(out, o + s, len);
    }
  } else if (sa && sb) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = Io<SO>::Store(op(Io<SA>::Load(a[i]), Io<SB>::Load(b[i])));
  } else if (sa) {
    const CB bv = Io<SB>::Load(b[0]);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = Io<SO>::Store(op(Io<SA>::Load(a[i]), bv));
  } else if (sb) {
    const CA av = Io<SA>::Load(a[0]);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = Io<SO>::Store(op(av, Io<SB>::Load(b[i])));
  } else {
    const SO v = Io<SO>::Store(op(Io<SA>::Load(a[0]), Io<SB>::Load(b[0])));
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

template <typename Op, typename SA, typename SB, typename SO>
MT_TARGET_AVX512 void BinaryRowAvx512(const SA* a, int64_t sa, const SB* b, int64_t sb, SO* o,
                                      int64_t n, const Op& op) {
  BinaryRowBody(a, sa, b, sb, o, n, op);
}

template <typename Op, typename SA, typename SB, typename SO>
void BinaryRow(const SA* a, int64_t sa, const SB* b, int64_t sb, SO* o, int64_t n, const Op& op) {
  if (cpu::Avx512Enabled())
    BinaryRowAvx512(a, sa, b, sb, o, n, op);
  else
    BinaryRowBody(a, sa, b, sb, o, n, op);
}

// o = op(a, b) over a two-input broadcast layout.
template <typename Op, typename SA, typename SB, typename SO>
void BinaryMap(const BroadcastLayout& l, const SA* a, const SB* b, SO* o, const Op& op,
               int64_t grain = kElementwiseGrain) {
  const int64_t sa = l.inner_stride(0), sb = l.inner_stride(1);
  ParallelFor(l.numel, grain, [&](int64_t begin, int64_t end) {
    ForEachRow(l, begin, end, [&](int64_t out, const int64_t* in, int64_t len) {
      BinaryRow(a + in[0], sa, b + in[1], sb, o + out, len, op);
    });
  });
}

// Converts n elements between any two dtypes (Cast's rules); defined in elementwise_cast.cc.
absl::Status CastBuffer(const KernelContext& ctx, DType from, const void* in, DType to, void* out,
                        int64_t n);

// The broadcast layout of `ins` read at every element of `out`; errors name the node.
absl::StatusOr<BroadcastLayout> LayoutOf(const KernelContext& ctx,
                                         std::initializer_list<const TensorView*> ins,
                                         const TensorView& out);

}  // namespace mixtrain::cpu_ew
