// Checks for CUDA runtime, cuBLASLt and cuDNN calls. A failing call inside the runtime or a kernel is
// a broken invariant (bad launch, bad pointer, a sticky device fault): it aborts with file, line
// and the library's error string. User-visible conditions (no GPU, out of memory) are tested
// for explicitly and returned as absl::Status before such calls are made.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "graph/check.h"

#define MT_CUDA_CHECK(expr)                                                        \
  do {                                                                             \
    const cudaError_t _mt_err = (expr);                                            \
    MT_CHECK(_mt_err == cudaSuccess) << #expr << ": " << cudaGetErrorName(_mt_err) \
                                     << ": " << cudaGetErrorString(_mt_err);       \
  } while (0)

#define MT_CUBLAS_CHECK(expr)                                                                \
  do {                                                                                       \
    const cublasStatus_t _mt_st = (expr);                                                    \
    MT_CHECK(_mt_st == CUBLAS_STATUS_SUCCESS) << #expr << ": " << cublasGetStatusName(_mt_st) \
                                              << ": " << cublasGetStatusString(_mt_st);      \
  } while (0)

#define MT_CUDNN_CHECK(expr)                                                                         \
  do {                                                                                               \
    const cudnnStatus_t _mt_st = (expr);                                                             \
    MT_CHECK(_mt_st == CUDNN_STATUS_SUCCESS) << #expr << ": " << cudnnGetErrorString(_mt_st);        \
  } while (0)

// After a <<<...>>> launch: configuration errors surface here, not at the next sync.
#define MT_CUDA_CHECK_LAUNCH() MT_CUDA_CHECK(cudaGetLastError())
