// MatMul and Gemm on CUDA through cuBLASLt: fp16/bf16 in and out with fp32 accumulation, or
// fp32 (CUBLAS_COMPUTE_32F: true fp32, no TF32 until --allow-tf32 exists). Row-major tensors are
// column-major transposes, so Y = A.B is computed as Y^T = B^T.A^T with the operands swapped.
// The cuBLASLt descriptors and the heuristic's algorithm are built once per shape and kept by the
// kernel instance; the workspace is the device's (runtime/cuda/cuda_device.h).
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch.h"
#include "kernels/registry.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_device.h"

namespace mixtrain::cuda {
namespace {

// One GEMM in row-major terms: batch x [m, k] . [k, n] -> [m, n], with strides between batches
// (0 = the operand is shared by every batch).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool ta = false, tb = false;
  int64_t stride_a = 0, stride_b = 0, stride_y = 0;
  bool operator==(const GemmShape&) const = default;
};

cudaDataType_t CudaType(DType t) {
  return t == DType::kF16 ? CUDA_R_16F : t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// cuBLASLt state for one shape and dtype; destroyed with the kernel.
class LtPlan {
 public:
  LtPlan(cublasLtHandle_t lt, const GemmShape& s, DType t, size_t workspace_bytes) : shape_(s) {
    const cudaDataType_t dt = CudaType(t);
    MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major view: D[n, m] = op(B)[n, k] . op(A)[k, m].
    cublasOperation_t opb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof(opb)));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof(opa)));
    // B stored row-major [k, n] (or [n, k] when transposed) is column-major [n, k] (or [k, n]).
    b_ = Layout(dt, s.tb ? s.k : s.n, s.tb ? s.n : s.k, s.stride_b, s.batch);
    a_ = Layout(dt, s.ta ? s.m : s.k, s.ta ? s.k : s.m, s.stride_a, s.batch);
    y_ = Layout(dt, s.n, s.m, s.stride_y, s.batch);
    cublasLtMatmulPreference_t pref;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes, sizeof(workspace_bytes)));
    int found = 0;
    MT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc_, b_, a_, y_, y_, pref, 1, &algo_, &found));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    MT_CHECK(found > 0) << "cuBLASLt has no algorithm for this GEMM";
  }
  ~LtPlan() {
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(y_);
    cublasLtMatmulDescDestroy(desc_);
  }
  const GemmShape& shape() const { return shape_; }

  // y = alpha * a.b + beta * y
  void Run(cublasLtHandle_t lt, const CudaStreamResources& res, const void* a, const void* b, void* y,
           float alpha, float beta, cudaStream_t s) const {
    MT_CUBLAS_CHECK(cublasLtMatmul(lt, desc_, &alpha, b, b_, a, a_, &beta, y, y_, y, y_, &algo_.algo,
                                   res.workspace, res.workspace_bytes, s));
  }

 private:
  static cublasLtMatrixLayout_t Layout(cudaDataType_t dt, int64_t rows, int64_t cols, int64_t stride,
                                       int64_t batch) {
    cublasLtMatrixLayout_t l;
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, dt, rows, cols, rows));
    if (batch > 1) {
      int32_t count = static_cast<int32_t>(batch);
      MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                       sizeof(stride)));
    }
    return l;
  }

  GemmShape shape_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, y_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
};

absl::Status CheckOperands(const KernelContext& ctx, const TensorView* a, const TensorView* b, const TensorView* y) {
  if (a == nullptr || b == nullptr || y == nullptr) return ctx.Error("needs A, B and an output");
  if (a->dtype != b->dtype || y->dtype != a->dtype)
    return ctx.Error(absl::StrCat("A, B and Y must share one dtype (", DTypeName(a->dtype), ", ",
                                  DTypeName(b->dtype), ", ", DTypeName(y->dtype), ")"));
  if (a->dtype != DType::kF32 && a->dtype != DType::kF16 && a->dtype != DType::kBF16)
    return ctx.Error(absl::StrCat("unsupported dtype ", DTypeName(a->dtype)));
  return absl::OkStatus();
}

class GemmKernelBase : public OpKernel {
 protected:
  void Run(KernelContext& ctx, const GemmShape& s, DType t, const void* a, const void* b, void* y, float alpha,
           float beta) {
    const CudaStreamResources& res = CudaResourcesFor(ctx.stream());
    auto lt = static_cast<cublasLtHandle_t>(res.cublaslt);
    if (plan_ == nullptr || !(plan_->shape() == s)) plan_ = std::make_unique<LtPlan>(lt, s, t, res.workspace_bytes);
    plan_->Run(lt, res, a, b, y, alpha, beta, static_cast<cudaStream_t>(ctx.stream()));
  }

 private:
  std::unique_ptr<LtPlan> plan_;  // the last shape's; a new shape replaces it
};

// numpy matmul: 1-D operands get a unit dim; batch dims broadcast. Supported batch patterns:
// B without batch (A's batches fold into m: one GEMM), equal batches, A without batch.
class MatMulKernel final : public GemmKernelBase {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView *a = ctx.input(0), *b = ctx.input(1);
    TensorView* y = ctx.output(0);
    MT_RETURN_IF_ERROR(CheckOperands(ctx, a, b, y));
    std::vector<int64_t> ad = a->dims, bd = b->dims;
    if (ad.empty() || bd.empty()) return ctx.Error("MatMul operands must have rank >= 1");
    if (ad.size() == 1) ad.insert(ad.begin(), 1);
    if (bd.size() == 1) bd.push_back(1);
    GemmShape s;
    s.m = ad[ad.size() - 2];
    s.k = ad.back();
    s.n = bd.back();
    if (bd[bd.size() - 2] != s.k)
      return ctx.Error(absl::StrCat("inner dims differ: ", s.k, " and ", bd[bd.size() - 2]));
    int64_t batch_a = NumElements(std::vector<int64_t>(ad.begin(), ad.end() - 2));
    int64_t batch_b = NumElements(std::vector<int64_t>(bd.begin(), bd.end() - 2));
    if (batch_b == 1) {
      s.m *= batch_a;  // rows of every A batch are contiguous: one GEMM
    } else if (batch_a == batch_b || batch_a == 1) {
      s.batch = batch_b;
      s.stride_a = batch_a == 1 ? 0 : s.m * s.k;
      s.stride_b = s.k * s.n;
      s.stride_y = s.m * s.n;
    } else {
      return ctx.Error("the CUDA MatMul broadcasts batch dims only when one side has none or they are equal");
    }
    if (y->numel() != s.batch * s.m * s.n) return ctx.Error("output size does not match A.B");
    if (y->numel() == 0) return absl::OkStatus();
    if (s.k == 0) {
      MT_CUDA_CHECK(cudaMemsetAsync(y->data, 0, y->nbytes(), static_cast<cudaStream_t>(ctx.stream())));
      return absl::OkStatus();
    }
    Run(ctx, s, a->dtype, a->data, b->data, y->data, 1.0f, 0.0f);
    return absl::OkStatus();
  }
};

// Gemm: Y = alpha op(A) op(B) + beta C, C broadcast to [M, N].
class GemmKernel final : public GemmKernelBase {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView *a = ctx.input(0), *b = ctx.input(1), *c = ctx.input(2);
    TensorView* y = ctx.output(0);
    MT_RETURN_IF_ERROR(CheckOperands(ctx, a, b, y));
    if (a->rank() != 2 || b->rank() != 2) return ctx.Error("Gemm takes 2-D A and B");
    const Node& node = ctx.node();
    GemmShape s;
    s.ta = node.attr_int("transA", 0) != 0;
    s.tb = node.attr_int("transB", 0) != 0;
    s.m = s.ta ? a->dims[1] : a->dims[0];
    s.k = s.ta ? a->dims[0] : a->dims[1];
    s.n = s.tb ? b->dims[0] : b->dims[1];
    if ((s.tb ? b->dims[1] : b->dims[0]) != s.k) return ctx.Error("inner dims of op(A) and op(B) differ");
    if (y->numel() != s.m * s.n) return ctx.Error("output size does not match op(A).op(B)");
    const float alpha = node.attr_float("alpha", 1.0f);
    float beta = node.attr_float("beta", 1.0f);
    auto stream = static_cast<cudaStream_t>(ctx.stream());
    if (c != nullptr && beta != 0.0f) {
      if (c->dtype != y->dtype) return ctx.Error("C must have the dtype of A and B");
      if (c->numel() == y->numel()) {
        if (c->data != y->data) MT_CUDA_CHECK(cudaMemcpyAsync(y->data, c->data, c->nbytes(), cudaMemcpyDeviceToDevice, stream));
      } else {
        // Broadcast C into Y first: Max(c, c) = c through the broadcasting binary kernel.
        auto l = MakeBroadcastLayout({c->dims, c->dims}, y->dims);
        if (!l.ok()) return ctx.Error(absl::StrCat("C: ", l.status().message()));
        LaunchBinary(BinaryOp::kMax, c->dtype, *l, c->data, c->data, y->data, stream);
      }
    } else {
      beta = 0.0f;
    }
    if (y->numel() == 0) return absl::OkStatus();
    if (s.k == 0) {  // alpha * (empty product) + beta * C
      if (beta == 0.0f) MT_CUDA_CHECK(cudaMemsetAsync(y->data, 0, y->nbytes(), stream));
      else if (beta != 1.0f) return ctx.Error("Gemm with K = 0 and beta != 1 is not supported on CUDA");
      return absl::OkStatus();
    }
    Run(ctx, s, a->dtype, a->data, b->data, y->data, alpha, beta);
    return absl::OkStatus();
  }
};


}  // namespace

MT_REGISTER_KERNELS(cuda_gemm) {
  r.Register({"MatMul", "", DeviceType::kCUDA, kFloatTypes, 0, ClassKernel<MatMulKernel>()});
  r.Register({"Gemm", "", DeviceType::kCUDA, kFloatTypes, 0, ClassKernel<GemmKernel>()});
}

}  // namespace mixtrain::cuda
