// Device helpers the CUDA kernel files share: the block shape, grid sizing, the float dtype
// dispatch, a NaN-keeping max, a block-wide reduction, and loading one element of any float dtype
// as float.
#pragma once

#include <cstdint>

#include "graph/check.h"
#include "graph/dtype.h"
#include "graph/half.h"
#include "kernels/common/reduce.h"

namespace mixtrain::cuda {

constexpr int kThreads = 256;
constexpr unsigned kMaxGrid = 65535;

inline unsigned GridFor(int64_t items) {
  return static_cast<unsigned>(items < kMaxGrid ? (items > 0 ? items : 1) : kMaxGrid);
}
// Blocks for one thread per element (grid-stride loops take the rest).
inline unsigned BlocksFor(int64_t elements) { return GridFor((elements + kThreads - 1) / kThreads); }

// Calls fn(Io{}) with the load/store policy (kernels/common/reduce.h) of a float dtype.
template <typename Fn>
void ForFloatIo(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(red::F32Io{}); break;
    case DType::kF16: fn(red::F16Io{}); break;
    case DType::kBF16: fn(red::BF16Io{}); break;
    default: MT_CHECK(false) << "CUDA kernel: unsupported dtype " << DTypeName(t);
  }
}

// Calls fn(E{}) with the unsigned integer type of `esize` bytes (data movement by element size).
template <typename Fn>
void ForElement(size_t esize, Fn&& fn) {
  switch (esize) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    case 8: fn(uint64_t{}); break;
    default: MT_CHECK(false) << "CUDA movement: element size " << esize;
  }
}

// The offset `strides` give element i of a dense walk over `dims` (rank of them).
__device__ __forceinline__ int64_t DimsOffset(int rank, const int64_t* dims, const int64_t* strides, int64_t i) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (i % dims[d]) * strides[d];
    i /= dims[d];
  }
  return off;
}

// The offset Transpose-like strides give element i of a dense walk over t.out_dims.
template <typename Args>
__device__ __forceinline__ int64_t StridedOffset(const Args& t, int64_t i) {
  return DimsOffset(t.rank, t.out_dims, t.in_strides, i);
}

// Max that lets NaN win, as the CPU's softmax rows do.
__device__ __forceinline__ float NanMax(float a, float b) { return a != a ? a : ((b > a || b != b) ? b : a); }

// Block-wide reduction of one value per thread (blocks of kThreads); every thread gets the result.
// `scratch` holds kThreads / 32 values; the trailing sync lets the caller reuse it. The order of
// combination is fixed, so results do not vary from run to run.
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) r = op(r, scratch[w]);
  __syncthreads();
  return r;
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct NanMaxOp {
  __device__ float operator()(float a, float b) const { return NanMax(a, b); }
};

// Element i of a float tensor of dtype t, as float.
__device__ __forceinline__ float LoadParam(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF16: return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Stores v into element i of a float tensor of dtype t.
__device__ __forceinline__ void StoreParam(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF16: static_cast<uint16_t*>(p)[i] = FloatToHalf(v); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = FloatToBFloat16(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

}  // namespace mixtrain::cuda
