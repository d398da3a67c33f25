// The CUDA kernels a transformer's training step needs beyond GEMMs and elementwise ops, with the
// CPU kernels' math: MaskedSoftmax and SoftmaxGrad (kernels/cpu/softmax.cc), LayerNormalizationGrad
// (kernels/cpu/grad_norm.cc), Gather (kernels/cpu/movement_index.cc) and GatherGrad
// (kernels/cpu/grad_gather.cc). Row kernels take one block per row; every sum runs in a fixed
// order, so a step gives the same bits every time: GatherGrad sorts the indices (CUB's stable
// radix sort) and each output row then adds its dY rows in index order, without atomics.
#include <cub/device/device_radix_sort.cuh>

#include <cmath>

#include "kernels/common/reduce.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain::cuda {
namespace {

// The mask offset of row r (MaskedRowsArgs).
__device__ __forceinline__ int64_t MaskOffset(const MaskedRowsArgs& a, int64_t r) {
  return DimsOffset(a.rank, a.row_dims, a.mask_step, r);
}

// Element i of a row whose mask starts at m (null: no mask).
__device__ __forceinline__ bool Kept(const uint8_t* m, int64_t inner, int64_t i) {
  return m == nullptr || m[inner == 0 ? 0 : i] != 0;
}

template <typename Io>
__global__ void MaskedSoftmaxKernel(MaskedRowsArgs a, const typename Io::T* x, const uint8_t* mask,
                                    typename Io::T* y) {
  __shared__ float scratch[kThreads / 32];
  const int64_t n = a.n;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const typename Io::T* xr = x + r * n;
    typename Io::T* yr = y + r * n;
    const uint8_t* m = mask + MaskOffset(a, r);
    auto v = [&](int64_t i) { return Kept(m, a.mask_inner, i) ? Io::Load(xr[i]) * a.scale : a.fill; };
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) mx = NanMax(mx, v(i));
    mx = BlockReduce(mx, NanMaxOp{}, scratch);
    float sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += red::FastExp(v(i) - mx);
    sum = BlockReduce(sum, SumOp{}, scratch);
    const float inv = 1.0f / sum;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = Io::Store(red::FastExp(v(i) - mx) * inv);
  }
}

template <typename Io>
__global__ void SoftmaxGradKernel(MaskedRowsArgs a, const typename Io::T* dy, const typename Io::T* y,
                                  const uint8_t* mask, typename Io::T* dx) {
  __shared__ float scratch[kThreads / 32];
  const int64_t n = a.n;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const typename Io::T* gr = dy + r * n;
    const typename Io::T* yr = y + r * n;
    typename Io::T* dr = dx + r * n;
    const uint8_t* m = mask != nullptr ? mask + MaskOffset(a, r) : nullptr;
    float dot = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) dot += Io::Load(gr[i]) * Io::Load(yr[i]);
    dot = BlockReduce(dot, SumOp{}, scratch);
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
      dr[i] = Io::Store(Kept(m, a.mask_inner, i) ? a.scale * Io::Load(yr[i]) * (Io::Load(gr[i]) - dot) : 0.0f);
  }
}

// Per row: mean and inv-std in two passes (as the CPU), dX, and the statistics for the column sums.
template <typename Io>
__global__ void LayerNormGradRowsKernel(const typename Io::T* dy, const typename Io::T* x, DType pt,
                                        const void* scale, float eps, int64_t rows, int64_t n,
                                        typename Io::T* dx, float* stats) {
  __shared__ float scratch[kThreads / 32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename Io::T* xr = x + r * n;
    const typename Io::T* gr = dy + r * n;
    float s = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) s += Io::Load(xr[i]);
    const float mean = BlockReduce(s, SumOp{}, scratch) / static_cast<float>(n);
    float v = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float d = Io::Load(xr[i]) - mean;
      v += d * d;
    }
    const float inv = 1.0f / sqrtf(BlockReduce(v, SumOp{}, scratch) / static_cast<float>(n) + eps);
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = inv;
    }
    if (dx == nullptr) continue;
    float sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float g = Io::Load(gr[i]) * LoadParam(scale, pt, i);
      sg += g;
      sgx += g * (Io::Load(xr[i]) - mean) * inv;
    }
    sg = BlockReduce(sg, SumOp{}, scratch) / static_cast<float>(n);
    sgx = BlockReduce(sgx, SumOp{}, scratch) / static_cast<float>(n);
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float h = (Io::Load(xr[i]) - mean) * inv;
      dx[r * n + i] = Io::Store(inv * (Io::Load(gr[i]) * LoadParam(scale, pt, i) - sg - h * sgx));
    }
  }
}

// dScale[i] = sum_r dY[r, i] * xhat[r, i], dBias[i] = sum_r dY[r, i]: 32 columns per block, the
// rows split over 8 thread rows and combined in a fixed order, in double.
constexpr int kColTile = 32, kRowLanes = kThreads / kColTile;
template <typename Io>
__global__ void LayerNormGradColumnsKernel(const typename Io::T* dy, const typename Io::T* x, const float* stats,
                                           int64_t rows, int64_t n, DType pt, void* ds, void* db) {
  __shared__ double ps[kRowLanes][kColTile], pb[kRowLanes][kColTile];
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  for (int64_t c0 = int64_t{blockIdx.x} * kColTile; c0 < n; c0 += int64_t{gridDim.x} * kColTile) {
    const int64_t c = c0 + tx;
    double s = 0, b = 0;
    if (c < n)
      for (int64_t r = ty; r < rows; r += kRowLanes) {
        const float g = Io::Load(dy[r * n + c]);
        s += g * ((Io::Load(x[r * n + c]) - stats[2 * r]) * stats[2 * r + 1]);
        b += g;
      }
    ps[ty][tx] = s;
    pb[ty][tx] = b;
    __syncthreads();
    if (ty == 0 && c < n) {
      for (int k = 1; k < kRowLanes; ++k) {
        s += ps[k][tx];
        b += pb[k][tx];
      }
      if (ds != nullptr) StoreParam(ds, pt, c, static_cast<float>(s));
      if (db != nullptr) StoreParam(db, pt, c, static_cast<float>(b));
    }
    __syncthreads();
  }
}

__device__ __forceinline__ int64_t IndexAt(const void* idx, bool i64, int64_t k) {
  return i64 ? static_cast<const int64_t*>(idx)[k] : static_cast<const int32_t*>(idx)[k];
}

template <typename E>
__global__ void GatherKernel(const E* data, int64_t outer, int64_t n, int64_t inner, const void* idx, bool i64,
                             int64_t K, E* out, E fill) {
  const int64_t total = outer * K * inner;
  for (int64_t e = blockIdx.x * int64_t{kThreads} + threadIdx.x; e < total; e += int64_t{gridDim.x} * kThreads) {
    const int64_t i = e % inner, k = (e / inner) % K, o = e / (inner * K);
    int64_t j = IndexAt(idx, i64, k);
    if (j < 0) j += n;
    out[e] = j >= 0 && j < n ? data[(o * n + j) * inner + i] : fill;
  }
}

// keys[k] = the row index k gathers (n when out of range: sorted last, matched by no row).
__global__ void GatherKeysKernel(const void* idx, bool i64, int64_t K, int64_t n, int32_t* keys, int32_t* pos) {
  for (int64_t k = blockIdx.x * int64_t{kThreads} + threadIdx.x; k < K; k += int64_t{gridDim.x} * kThreads) {
    int64_t j = IndexAt(idx, i64, k);
    if (j < 0) j += n;
    keys[k] = static_cast<int32_t>(j >= 0 && j < n ? j : n);
    pos[k] = static_cast<int32_t>(k);
  }
}

// Row (o, j) of dX: the dY rows of the positions whose index is j, in position order.
template <typename Io>
__global__ void GatherGradRowsKernel(const typename Io::T* dy, const int32_t* keys, const int32_t* pos, int64_t K,
                                     int64_t outer, int64_t n, int64_t inner, DType dxt, void* dx) {
  for (int64_t row = blockIdx.x; row < outer * n; row += gridDim.x) {
    const int64_t o = row / n;
    const int32_t j = static_cast<int32_t>(row % n);
    int64_t lo = 0, hi = K;  // lower bound of j
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (keys[mid] < j) lo = mid + 1;
      else hi = mid;
    }
    for (int64_t i = threadIdx.x; i < inner; i += kThreads) {
      float s = 0;
      for (int64_t p = lo; p < K && keys[p] == j; ++p) s += Io::Load(dy[(o * K + pos[p]) * inner + i]);
      StoreParam(dx, dxt, row * inner + i, s);
    }
  }
}

int SortBits(int64_t n) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= n) ++bits;  // keys go up to n inclusive
  return bits;
}

size_t Align(size_t b) { return (b + 255) / 256 * 256; }

size_t CubTempBytes(int64_t K) {
  size_t bytes = 0;
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<int>(K)));
  return bytes;
}

}  // namespace

void LaunchMaskedSoftmax(DType dtype, const MaskedRowsArgs& a, const void* x, const uint8_t* mask, void* y,
                         void* stream) {
  if (a.rows == 0 || a.n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    MaskedSoftmaxKernel<Io><<<GridFor(a.rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        a, static_cast<const T*>(x), mask, static_cast<T*>(y));
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchSoftmaxGrad(DType dtype, const MaskedRowsArgs& a, const void* dy, const void* y, const uint8_t* mask,
                       void* dx, void* stream) {
  if (a.rows == 0 || a.n == 0) return;
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    SoftmaxGradKernel<Io><<<GridFor(a.rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        a, static_cast<const T*>(dy), static_cast<const T*>(y), mask, static_cast<T*>(dx));
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchLayerNormGrad(DType dtype, const void* dy, const void* x, DType param_dtype, const void* scale,
                         float eps, int64_t rows, int64_t n, void* dx, void* ds, void* db, float* stats,
                         void* stream) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  ForFloatIo(dtype, [&](auto io) {
    using Io = decltype(io);
    using T = typename Io::T;
    if (rows > 0)
      LayerNormGradRowsKernel<Io><<<GridFor(rows), kThreads, 0, s>>>(static_cast<const T*>(dy),
                                                                      static_cast<const T*>(x), param_dtype, scale,
                                                                      eps, rows, n, static_cast<T*>(dx), stats);
    if (ds != nullptr || db != nullptr)
      LayerNormGradColumnsKernel<Io><<<GridFor((n + kColTile - 1) / kColTile), kThreads, 0, s>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), stats, rows, n, param_dtype, ds, db);
  });
  MT_CUDA_CHECK_LAUNCH();
}

void LaunchGather(size_t esize, const void* data, int64_t outer, int64_t n, int64_t inner, const void* indices,
                  bool indices_i64, int64_t K, void* out, bool nan_fill, DType dtype, void* stream) {
  const int64_t total = outer * K * inner;
  if (total == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = BlocksFor(total);
  switch (esize) {
    case 1:
      GatherKernel<uint8_t><<<blocks, kThreads, 0, s>>>(static_cast<const uint8_t*>(data), outer, n, inner, indices,
                                                         indices_i64, K, static_cast<uint8_t*>(out), 0);
      break;
    case 2: {
      const uint16_t fill = !nan_fill ? 0 : dtype == DType::kBF16 ? 0x7fc0 : 0x7e00;
      GatherKernel<uint16_t><<<blocks, kThreads, 0, s>>>(static_cast<const uint16_t*>(data), outer, n, inner,
                                                          indices, indices_i64, K, static_cast<uint16_t*>(out), fill);
      break;
    }
    case 4:
      GatherKernel<uint32_t><<<blocks, kThreads, 0, s>>>(static_cast<const uint32_t*>(data), outer, n, inner,
                                                          indices, indices_i64, K, static_cast<uint32_t*>(out),
                                                          nan_fill ? 0x7fc00000u : 0u);
      break;
    case 8:
      GatherKernel<uint64_t><<<blocks, kThreads, 0, s>>>(static_cast<const uint64_t*>(data), outer, n, inner,
                                                          indices, indices_i64, K, static_cast<uint64_t*>(out),
                                                          nan_fill ? 0x7ff8000000000000ull : 0ull);
      break;
    default: MT_CHECK(false) << "CUDA Gather: element size " << esize;
  }
  MT_CUDA_CHECK_LAUNCH();
}

size_t GatherGradScratchBytes(int64_t K) { return 4 * Align(K * sizeof(int32_t)) + Align(CubTempBytes(K)); }

void LaunchGatherGrad(DType dy_dtype, const void* dy, const void* indices, bool indices_i64, int64_t K,
                      int64_t outer, int64_t n, int64_t inner, DType dx_dtype, void* dx, void* scratch,
                      size_t scratch_bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (outer * n * inner == 0) return;
  if (K == 0) {
    MT_CUDA_CHECK(cudaMemsetAsync(dx, 0, outer * n * inner * DTypeSize(dx_dtype), s));
    return;
  }
  MT_CHECK(n < (int64_t{1} << 30)) << "GatherGrad: an axis of " << n << " rows";
  char* p = static_cast<char*>(scratch);
  const size_t part = Align(K * sizeof(int32_t));
  auto* keys_in = reinterpret_cast<int32_t*>(p);
  auto* keys = reinterpret_cast<int32_t*>(p + part);
  auto* pos_in = reinterpret_cast<int32_t*>(p + 2 * part);
  auto* pos = reinterpret_cast<int32_t*>(p + 3 * part);
  size_t temp_bytes = scratch_bytes - 4 * part;  // GatherGradScratchBytes(K)'s CUB part, not asked again
  GatherKeysKernel<<<BlocksFor(K), kThreads, 0, s>>>(indices, indices_i64, K, n, keys_in, pos_in);
  MT_CUDA_CHECK_LAUNCH();
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(p + 4 * part, temp_bytes, keys_in, keys, pos_in, pos,
                                                static_cast<int>(K), 0, SortBits(n), s));
  ForFloatIo(dy_dtype, [&](auto io) {
    using Io = decltype(io);
    GatherGradRowsKernel<Io><<<GridFor(outer * n), kThreads, 0, s>>>(static_cast<const typename Io::T*>(dy), keys,
                                                                     pos, K, outer, n, inner, dx_dtype, dx);
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mixtrain::cuda
