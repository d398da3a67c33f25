// The copy engines behind the CPU data-movement kernels (see movement_util.h): strided copy and
// index-map copy (the transpose engine is movement_transpose.cc). All move elements by byte size
// (1, 2, 4 or 8 bytes), so the same code serves fp32/fp16/bf16/f64/int/bool tensors.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/half.h"
#include "kernels/cpu/movement_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain::cpu_movement {
namespace {

// Roughly how many bytes one thread should copy before splitting work pays off.
constexpr int64_t kCopyGrainBytes = 64 * 1024;

template <typename T>
void StridedRow(T* dst, const T* src, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
}

// One row of n elements read with `stride` (in elements).
void CopyRow(uint8_t* dst, const uint8_t* src, size_t esize, int64_t n, int64_t stride) {
  if (stride == 1) {
    std::memcpy(dst, src, n * esize);
    return;
  }
  if (stride == 0) {
    FillElements(dst, src, esize, n);
    return;
  }
  switch (esize) {
    case 1: StridedRow(dst, src, n, stride); break;
    case 2: StridedRow(reinterpret_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t*>(src), n, stride); break;
    case 4: StridedRow(reinterpret_cast<uint32_t*>(dst), reinterpret_cast<const uint32_t*>(src), n, stride); break;
    case 8: StridedRow(reinterpret_cast<uint64_t*>(dst), reinterpret_cast<const uint64_t*>(src), n, stride); break;
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * esize, src + i * stride * esize, esize);
  }
}

}  // namespace

int64_t RowGrain(int64_t row_bytes) {
  return std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(row_bytes, 1));
}

Layout Simplify(Dims dims, Dims strides) {
  Layout l;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) l.empty = true;
    if (dims[i] == 1) continue;
    if (!l.dims.empty() && l.strides.back() == strides[i] * dims[i]) {
      l.dims.back() *= dims[i];
      l.strides.back() = strides[i];
    } else {
      l.dims.push_back(dims[i]);
      l.strides.push_back(strides[i]);
    }
  }
  return l;
}

int64_t OffsetOf(int64_t row, Dims dims, Dims strides) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    off += (row % dims[d]) * strides[d];
    row /= dims[d];
  }
  return off;
}

absl::StatusOr<std::vector<int64_t>> ReadInts(const KernelContext& ctx, const TensorView& t) {
  std::vector<int64_t> v(t.numel());
  if (t.dtype == DType::kI64) {
    if (!v.empty()) std::memcpy(v.data(), t.data, v.size() * 8);
  } else if (t.dtype == DType::kI32) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.as<const int32_t>()[i];
  } else {
    return ctx.Error(absl::StrCat("expected an int32/int64 tensor, got ", DTypeName(t.dtype)));
  }
  return v;
}

DimVec StridesOf(Dims dims) {
  DimVec s(dims.size());
  int64_t acc = 1;
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= dims[d];
  }
  return s;
}

void CopyBytes(void* dst, const void* src, size_t nbytes) {
  if (dst == src || nbytes == 0) return;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  ParallelFor(static_cast<int64_t>(nbytes), 4 * kCopyGrainBytes,
              [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, e - b); });
}

void FillElements(void* dst, const void* value, size_t esize, int64_t count) {
  auto fill = [&](int64_t b, int64_t e) {
    switch (esize) {
      case 1: std::memset(static_cast<uint8_t*>(dst) + b, *static_cast<const uint8_t*>(value), e - b); break;
      case 2: std::fill(static_cast<uint16_t*>(dst) + b, static_cast<uint16_t*>(dst) + e, *static_cast<const uint16_t*>(value)); break;
      case 4: std::fill(static_cast<uint32_t*>(dst) + b, static_cast<uint32_t*>(dst) + e, *static_cast<const uint32_t*>(value)); break;
      case 8: std::fill(static_cast<uint64_t*>(dst) + b, static_cast<uint64_t*>(dst) + e, *static_cast<const uint64_t*>(value)); break;
      default:
        for (int64_t i = b; i < e; ++i) std::memcpy(static_cast<uint8_t*>(dst) + i * esize, value, esize);
    }
  };
  ParallelFor(count, std::max<int64_t>(1, 4 * kCopyGrainBytes / static_cast<int64_t>(esize)), fill);
}

void StridedCopy(void* dst, const void* src, size_t esize, Dims dims, Dims src_strides) {
  Layout l = Simplify(dims, src_strides);
  if (l.empty) return;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (l.dims.empty()) {
    std::memcpy(d, s, esize);
    return;
  }
  const int64_t n = l.dims.back(), stride = l.strides.back();
  l.dims.pop_back();
  l.strides.pop_back();
  int64_t rows = 1;
  for (int64_t x : l.dims) rows *= x;
  if (rows == 1) {  // one long run: parallelize inside it
    if (stride == 1) return CopyBytes(d, s, n * esize);
    ParallelFor(n, RowGrain(esize), [&](int64_t b, int64_t e) {
      CopyRow(d + b * esize, s + b * stride * esize, esize, e - b, stride);
    });
    return;
  }
  ParallelFor(rows, RowGrain(n * esize), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      CopyRow(d + r * n * esize, s + OffsetOf(r, l.dims, l.strides) * static_cast<int64_t>(esize), esize, n, stride);
  });
}

void IndexMapCopy(void* dst, const void* src, size_t esize, const std::vector<int64_t>& in_dims,
                  const std::vector<int64_t>& out_dims,
                  const std::vector<std::vector<int64_t>>& maps, const void* fill) {
  const int64_t rank = static_cast<int64_t>(out_dims.size());
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (rank == 0) {
    std::memcpy(d, s, esize);
    return;
  }
  for (int64_t x : out_dims)
    if (x == 0) return;
  const DimVec in_strides = StridesOf(in_dims);
  // The innermost dim as runs: consecutive source indices become one memcpy, -1s one fill.
  struct Run {
    int64_t dst, len, src;  // src -1: fill
  };
  std::vector<Run> runs;
  const std::vector<int64_t>& inner = maps.back();
  for (int64_t o = 0; o < out_dims.back(); ++o) {
    int64_t m = inner[o];
    if (!runs.empty()) {
      Run& r = runs.back();
      if ((m < 0 && r.src < 0) || (m >= 0 && r.src >= 0 && m == r.src + r.len)) {
        ++r.len;
        continue;
      }
    }
    runs.push_back({o, 1, m < 0 ? -1 : m});
  }
  const int64_t n = out_dims.back();
  int64_t rows = 1;
  for (int64_t k = 0; k + 1 < rank; ++k) rows *= out_dims[k];
  ParallelFor(rows, RowGrain(n * esize), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      uint8_t* row = d + r * n * esize;
      int64_t off = 0, rest = r;
      bool filled = false;
      for (int64_t k = rank - 2; k >= 0; --k) {
        int64_t m = maps[k][rest % out_dims[k]];
        rest /= out_dims[k];
        if (m < 0) filled = true;
        off += m * in_strides[k];
      }
      if (filled) {
        FillElements(row, fill, esize, n);
        continue;
      }
      const uint8_t* srow = s + off * esize;
      for (const Run& run : runs) {
        if (run.src < 0)
          FillElements(row + run.dst * esize, fill, esize, run.len);
        else
          std::memcpy(row + run.dst * esize, srow + run.src * in_strides.back() * esize,
                      run.len * esize);
      }
    }
  });
}

std::vector<uint8_t> ScalarBytes(DType dtype, double value) {
  std::vector<uint8_t> b(DTypeSize(dtype));
  auto put = [&](auto v) { std::memcpy(b.data(), &v, sizeof(v)); };
  switch (dtype) {
    case DType::kF32: put(static_cast<float>(value)); break;
    case DType::kF16: put(FloatToHalf(static_cast<float>(value))); break;
    case DType::kBF16: put(FloatToBFloat16(static_cast<float>(value))); break;
    case DType::kF64: put(value); break;
    case DType::kI8: put(static_cast<int8_t>(value)); break;
    case DType::kI32: put(static_cast<int32_t>(value)); break;
    case DType::kI64: put(static_cast<int64_t>(value)); break;
    case DType::kU8: put(static_cast<uint8_t>(value)); break;
    case DType::kBool: put(static_cast<uint8_t>(value != 0)); break;
    default: break;
  }
  return b;
}

}  // namespace mixtrain::cpu_movement
