// Host-side checks the CUDA kernel classes (kernels/cuda/*.cc) share.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/registry.h"

namespace mixtrain::cuda {

// The float dtypes the CUDA float kernels take (f64 is not one).
inline bool IsGpuFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Movement kernels work by element size: 1, 2, 4 or 8 bytes.
inline absl::Status CheckElementSize(const KernelContext& ctx, DType t) {
  const size_t e = DTypeSize(t);
  if (e == 1 || e == 2 || e == 4 || e == 8) return absl::OkStatus();
  return ctx.Error(absl::StrCat("cannot move ", DTypeName(t), " tensors on the GPU"));
}

}  // namespace mixtrain::cuda
