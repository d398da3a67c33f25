// CUDA elementwise kernels: one grid-stride kernel per (functor, storage type), instantiated from
// the rows of kernels/cuda/elementwise_ops.h. A row's formula is, where one exists, the
// kernels/common/elementwise.h functor the CPU loops use (over the same broadcast layout), so the
// CPU tests of that math cover these kernels' arithmetic too. Load the storage type, compute in
// float, store the storage type (round to nearest even).
//
// Compile time is budgeted (two architectures, CI on 2 cores): only the float storage types are
// instantiated, and i32/i64 only for the kNumber rows (the step counter; integer shape arithmetic
// is folded on the host at plan time), and a binary op is one kernel whose flat fast path and
// broadcast path are a run-time branch, not two templates.
#include "kernels/common/elementwise.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

constexpr int kThreads = 256;

// Enough blocks to fill an H100 several times over; the loops stride over the rest.
unsigned Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 8192 ? (b > 0 ? b : 1) : 8192);
}

template <typename S, typename Op>
__global__ void UnaryKernel(const S* __restrict__ x, S* __restrict__ y, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads)
    y[i] = ew::Io<S>::Store(op(ew::Io<S>::Load(x[i])));
}

template <typename S, typename Op>
__global__ void BinaryKernel(const S* __restrict__ a, const S* __restrict__ b, S* __restrict__ o,
                             BroadcastLayout l, Op op) {
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (l.rank <= 1) {  // same shapes, or one operand a scalar: no index arithmetic
    const int64_t sa = l.rank == 0 ? 0 : l.strides[0][0], sb = l.rank == 0 ? 0 : l.strides[1][0];
    for (; i < l.numel; i += stride)
      o[i] = ew::Io<S>::Store(op(ew::Io<S>::Load(a[i * sa]), ew::Io<S>::Load(b[i * sb])));
  } else {
    for (; i < l.numel; i += stride)
      o[i] = ew::Io<S>::Store(op(ew::Io<S>::Load(a[l.InputOffset(0, i)]),
                                 ew::Io<S>::Load(b[l.InputOffset(1, i)])));
  }
}

template <typename SI, typename SO>
__global__ void CastKernel(const SI* __restrict__ x, SO* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads)
    y[i] = ew::Io<SO>::Store(ew::CastOp<SI, SO>{}(ew::Io<SI>::Load(x[i])));
}

// Running sums of one (outer, inner) line per thread, accumulated in A.
template <typename S, typename A>
__global__ void CumSumKernel(const S* __restrict__ x, S* __restrict__ y, int64_t outer, int64_t n, int64_t inner,
                             bool exclusive, bool reverse) {
  for (int64_t line = blockIdx.x * int64_t{kThreads} + threadIdx.x; line < outer * inner;
       line += int64_t{gridDim.x} * kThreads) {
    const int64_t o = line / inner, i = line % inner;
    A acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = (o * n + (reverse ? n - 1 - k : k)) * inner + i;
      const A v = static_cast<A>(ew::Io<S>::Load(x[at]));
      if (exclusive) {
        y[at] = ew::Io<S>::Store(static_cast<typename ew::Io<S>::C>(acc));
        acc += v;
      } else {
        acc += v;
        y[at] = ew::Io<S>::Store(static_cast<typename ew::Io<S>::C>(acc));
      }
    }
  }
}

template <typename S, typename Op>
__global__ void CompareKernel(const S* __restrict__ a, const S* __restrict__ b, uint8_t* __restrict__ o,
                              BroadcastLayout l, Op op) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < l.numel; i += int64_t{gridDim.x} * kThreads)
    o[i] = op(ew::Io<S>::Load(a[l.InputOffset(0, i)]), ew::Io<S>::Load(b[l.InputOffset(1, i)])) ? 1 : 0;
}

template <typename S>
__global__ void IsNaNKernel(const S* __restrict__ x, uint8_t* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const float v = ew::Io<S>::Load(x[i]);
    y[i] = v != v ? 1 : 0;
  }
}

// Calls fn(S{}) with the storage type of a float dtype.
template <typename Fn>
void ForFloat(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(float{}); break;
    case DType::kF16: fn(ew::f16{}); break;
    case DType::kBF16: fn(ew::bf16{}); break;
    default: MT_CHECK(false) << "CUDA elementwise: unsupported dtype " << DTypeName(t);
  }
}

// Calls fn(S{}) with the storage type of a float dtype, i32 or i64 (the arithmetic integer
// tensors a training step carries: its update counter).
template <typename Fn>
void ForNumber(DType t, Fn&& fn) {
  switch (t) {
    case DType::kI32: fn(int32_t{}); break;
    case DType::kI64: fn(int64_t{}); break;
    default: ForFloat(t, fn);
  }
}

// ForNumber and bool: every dtype Cast converts between on the GPU.
template <typename Fn>
void ForCastable(DType t, Fn&& fn) {
  if (t == DType::kBool) fn(bool{});
  else ForNumber(t, fn);
}

// The storage types of a row's dtypes: only those get a kernel.
template <EwTypes kTypes, typename Fn>
void ForRow(DType t, Fn&& fn) {
  if constexpr (kTypes == EwTypes::kNumber) ForNumber(t, fn);
  else ForFloat(t, fn);
}

template <EwTypes kTypes, typename Op>
void Unary(DType t, const Op& op, const void* x, void* y, int64_t n, cudaStream_t s) {
  ForRow<kTypes>(t, [&](auto tag) {
    using S = decltype(tag);
    UnaryKernel<S><<<Blocks(n), kThreads, 0, s>>>(static_cast<const S*>(x), static_cast<S*>(y), n, op);
  });
}

template <EwTypes kTypes, typename Op>
void Binary(DType t, const Op& op, const BroadcastLayout& l, const void* a, const void* b, void* o,
            cudaStream_t s) {
  ForRow<kTypes>(t, [&](auto tag) {
    using S = decltype(tag);
    BinaryKernel<S><<<Blocks(l.numel), kThreads, 0, s>>>(
        static_cast<const S*>(a), static_cast<const S*>(b), static_cast<S*>(o), l, op);
  });
}

}  // namespace

void LaunchUnary(UnaryOp op, DType dtype, float alpha, float beta, const void* x, void* y, int64_t n,
                 void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (op) {  // a row's formula may use alpha and beta
#define MT_EW_CASE(Name, domains, types, formula, attrs) \
    case UnaryOp::k##Name: Unary<EwTypes::types>(dtype, formula, x, y, n, s); break;
    MT_CUDA_UNARY_OPS(MT_EW_CASE)
#undef MT_EW_CASE
  }
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchBinary(BinaryOp op, DType dtype, const BroadcastLayout& l, const void* a,
                  const void* b, void* o, void* stream) {
  MT_CHECK(l.num_inputs == 2) << "LaunchBinary needs a two-input layout";
  if (l.numel == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (op) {
#define MT_EW_CASE(Name, domains, types, formula, attrs) \
    case BinaryOp::k##Name: Binary<EwTypes::types>(dtype, formula, l, a, b, o, s); break;
    MT_CUDA_BINARY_OPS(MT_EW_CASE)
#undef MT_EW_CASE
  }
  MT_CUDA_CHECK_LAUNCH();
}

namespace {
template <typename Op>
void Compare(DType t, const BroadcastLayout& l, const void* a, const void* b, uint8_t* o, cudaStream_t s) {
  auto launch = [&](auto tag) {
    using S = decltype(tag);
    CompareKernel<S><<<Blocks(l.numel), kThreads, 0, s>>>(static_cast<const S*>(a), static_cast<const S*>(b), o, l,
                                                          Op{});
  };
  switch (t) {
    case DType::kF32: launch(float{}); break;
    case DType::kF16: launch(ew::f16{}); break;
    case DType::kBF16: launch(ew::bf16{}); break;
    case DType::kI32: launch(int32_t{}); break;
    case DType::kI64: launch(int64_t{}); break;
    case DType::kBool: launch(bool{}); break;
    default: MT_CHECK(false) << "CUDA compare: unsupported dtype " << DTypeName(t);
  }
}
}  // namespace

void LaunchCompare(CompareOp op, DType dtype, const BroadcastLayout& l, const void* a, const void* b, uint8_t* o,
                   void* stream) {
  MT_CHECK(l.num_inputs == 2) << "LaunchCompare needs a two-input layout";
  if (l.numel == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (op) {
    case CompareOp::kEqual: Compare<ew::Equal>(dtype, l, a, b, o, s); break;
    case CompareOp::kLess: Compare<ew::Less>(dtype, l, a, b, o, s); break;
    case CompareOp::kLessOrEqual: Compare<ew::LessOrEqual>(dtype, l, a, b, o, s); break;
    case CompareOp::kGreater: Compare<ew::Greater>(dtype, l, a, b, o, s); break;
    case CompareOp::kGreaterOrEqual: Compare<ew::GreaterOrEqual>(dtype, l, a, b, o, s); break;
    case CompareOp::kAnd: Compare<ew::And>(dtype, l, a, b, o, s); break;
    case CompareOp::kOr: Compare<ew::Or>(dtype, l, a, b, o, s); break;
    case CompareOp::kXor: Compare<ew::Xor>(dtype, l, a, b, o, s); break;
  }
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchCumSum(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool exclusive,
                  bool reverse, void* stream) {
  if (outer * inner == 0 || n == 0) return;
  ForNumber(dtype, [&](auto tag) {
    using S = decltype(tag);
    using A = std::conditional_t<std::is_integral_v<typename ew::Io<S>::C>, int64_t, double>;
    CumSumKernel<S, A><<<Blocks(outer * inner), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const S*>(x), static_cast<S*>(y), outer, n, inner, exclusive, reverse);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchIsNaN(DType dtype, const void* x, uint8_t* y, int64_t n, void* stream) {
  if (n == 0) return;
  ForFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    IsNaNKernel<S><<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const S*>(x), y, n);
  });
  MT_CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void NotKernel(const uint8_t* x, uint8_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads)
    y[i] = x[i] ? 0 : 1;
}
}  // namespace

void LaunchNot(const uint8_t* x, uint8_t* y, int64_t n, void* stream) {
  if (n == 0) return;
  NotKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchCast(DType from, DType to, const void* x, void* y, int64_t n, void* stream) {
  MT_CHECK(from != to) << "LaunchCast of a dtype to itself (a copy)";
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  ForCastable(from, [&](auto from_tag) {
    ForCastable(to, [&](auto to_tag) {
      using SI = decltype(from_tag);
      using SO = decltype(to_tag);
      if constexpr (!std::is_same_v<SI, SO>)
        CastKernel<SI, SO><<<Blocks(n), kThreads, 0, s>>>(static_cast<const SI*>(x), static_cast<SO*>(y), n);
    });
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
