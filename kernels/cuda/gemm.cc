// MatMul, FusedMatMul and Gemm on CUDA through cuBLASLt: fp16/bf16 in and out with fp32
// accumulation, or fp32 (CUBLAS_COMPUTE_32F: true fp32, no TF32 until --allow-tf32 exists).
// Row-major tensors are column-major transposes, so Y = A.B is mostly computed as Y^T = B^T.A^T
// with the operands swapped. The cuBLASLt descriptors and the heuristic's algorithm are built once
// per GEMM and kept by the kernel instance; the workspace is the device's (kernels/cuda/cuda_device.h).
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/strided_matmul.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/owned_buffer.h"
#include "kernels/registry.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"

namespace mixtrain::cuda {
namespace {

using LtOperand = smm::Operand;
using LtGemm = smm::Gemm;
using smm::AsOperand;

// Row-major Gemm [m, k] . [k, n] -> dense [m, n] (A, B stored transposed when ta, tb), as the
// column-major D^T = B^T . A^T.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
};

LtGemm ToLt(const GemmShape& s) {
  LtGemm g;
  // X = op(B)^T, n x k: element (i, j) = B'[j, i] at j * (tb ? 1 : n) + i * (tb ? k : 1).
  MT_CHECK(AsOperand(s.n, s.k, s.tb ? s.k : 1, s.tb ? 1 : s.n, 0, &g.x));
  // W = op(A)^T, k x m: element (i, j) = A'[j, i].
  MT_CHECK(AsOperand(s.k, s.m, s.ta ? s.m : 1, s.ta ? 1 : s.k, 0, &g.w));
  g.d = {false, s.n, s.m, s.n, 0};
  return g;
}

cudaDataType_t CudaType(DType t) {
  return t == DType::kF16 ? CUDA_R_16F : t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// cuBLASLt state for one GEMM and dtype; destroyed with the kernel.
class LtPlan {
 public:
  LtPlan(cublasLtHandle_t lt, const LtGemm& g, DType t, size_t workspace_bytes) : gemm_(g), dtype_(t) {
    const cudaDataType_t dt = CudaType(t);
    MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opx = g.x.trans ? CUBLAS_OP_T : CUBLAS_OP_N, opw = g.w.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &opx, sizeof(opx)));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &opw, sizeof(opw)));
    x_ = Layout(dt, g.x, g.batch);
    w_ = Layout(dt, g.w, g.batch);
    d_ = Layout(dt, g.d, g.batch);
    cublasLtMatmulPreference_t pref;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes, sizeof(workspace_bytes)));
    int found = 0;
    MT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc_, x_, w_, d_, d_, pref, 1, &algo_, &found));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    MT_CHECK(found > 0) << "cuBLASLt has no algorithm for this GEMM";
  }
  ~LtPlan() {
    cublasLtMatrixLayoutDestroy(x_);
    cublasLtMatrixLayoutDestroy(w_);
    cublasLtMatrixLayoutDestroy(d_);
    cublasLtMatmulDescDestroy(desc_);
  }
  bool Matches(const LtGemm& g, DType t) const { return gemm_ == g && dtype_ == t; }

  // d = alpha * op(x).op(w) + beta * d
  void Run(cublasLtHandle_t lt, const CudaStreamResources& res, const void* x, const void* w, void* d,
           float alpha, float beta, cudaStream_t s) const {
    MT_CUBLAS_CHECK(cublasLtMatmul(lt, desc_, &alpha, x, x_, w, w_, &beta, d, d_, d, d_, &algo_.algo,
                                   res.workspace, res.workspace_bytes, s));
  }

 private:
  static cublasLtMatrixLayout_t Layout(cudaDataType_t dt, const LtOperand& o, int64_t batch) {
    cublasLtMatrixLayout_t l;
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, dt, o.rows, o.cols, o.ld));
    if (batch > 1) {
      int32_t count = static_cast<int32_t>(batch);
      MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &o.stride,
                                                       sizeof(o.stride)));
    }
    return l;
  }

  LtGemm gemm_;
  DType dtype_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t x_ = nullptr, w_ = nullptr, d_ = nullptr;
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
  // Plans `g` (kept until another GEMM or dtype comes) and runs it on the node's stream.
  void RunLt(KernelContext& ctx, const LtGemm& g, DType t, const void* x, const void* w, void* d, float alpha,
             float beta) {
    const CudaStreamResources& res = CudaResources(ctx);
    auto lt = static_cast<cublasLtHandle_t>(res.cublaslt);
    if (plan_ == nullptr || !plan_->Matches(g, t)) plan_ = std::make_unique<LtPlan>(lt, g, t, res.workspace_bytes);
    plan_->Run(lt, res, x, w, d, alpha, beta, static_cast<cudaStream_t>(ctx.stream()));
  }
  void Run(KernelContext& ctx, const GemmShape& s, DType t, const void* a, const void* b, void* y, float alpha,
           float beta) {
    RunLt(ctx, ToLt(s), t, b, a, y, alpha, beta);
  }

 private:
  std::unique_ptr<LtPlan> plan_;  // the last GEMM's
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

TransposeArgs ToTranspose(const smm::Permutation& p) {
  TransposeArgs t;
  t.rank = static_cast<int>(p.out_dims.size());
  for (int i = 0; i < t.rank; ++i) {
    t.out_dims[i] = p.out_dims[i];
    t.in_strides[i] = p.in_strides[i];
  }
  return t;
}

// ai.mixtrain FusedMatMul (graph/ops/fused_matmul_ops.cc), and MatMul as FusedMatMul without
// attributes or epilogue inputs:
//   Y = Transpose(act(alpha * A'.B' + bias) + Z, perm_y), A' = Transpose(A, perm_a), B' likewise.
// kernels/common/strided_matmul.h plans it (tested on the CPU): permuted operands and results are
// read and written in place where cuBLASLt can address them (attention's [0, 2, 1, 3] head split
// is), batch dims whose strides chain fold into one strided batch and the rest are separate
// launches, and what cuBLASLt cannot address is copied dense first (or scattered into Y after).
// Alpha goes to cuBLASLt; bias, activation and Z are one epilogue pass (gemm_epilogue.cu).
class FusedMatMulKernel final : public GemmKernelBase {
 public:
  absl::Status Compute(KernelContext& ctx) override {
    const TensorView *a = ctx.input(0), *b = ctx.input(1), *bias = ctx.input(2), *z = ctx.input(3);
    TensorView* y = ctx.output(0);
    MT_RETURN_IF_ERROR(CheckOperands(ctx, a, b, y));
    if ((bias != nullptr && bias->dtype != a->dtype) || (z != nullptr && z->dtype != a->dtype))
      return ctx.Error("A, B, bias, Z and Y dtypes differ");
    if (plan_ == nullptr || a->dims != a_dims_ || b->dims != b_dims_ || y->numel() != y_numel_) {
      MT_RETURN_IF_ERROR(Plan(ctx, *a, *b, bias, z, *y));
    } else if (z != nullptr && z->dims != y->dims) {
      return ctx.Error("Z must have the shape of Y");
    }
    const smm::MatMulPlan& p = *plan_;
    const auto stream = static_cast<cudaStream_t>(ctx.stream());
    if (p.empty) return absl::OkStatus();
    if (p.zero) {
      if (alpha_ != 1.0f || bias != nullptr || z != nullptr || act_ != MatMulAct::kNone)
        return ctx.Error("K == 0 with an epilogue is not supported");
      MT_CUDA_CHECK(cudaMemsetAsync(y->data, 0, y->nbytes(), stream));
      return absl::OkStatus();
    }
    const DType t = a->dtype;
    const size_t es = DTypeSize(t);
    const void* ap = a->data;
    const void* bp = b->data;
    if (p.copy_a) {
      void* dense = a_copy_.Get(a->nbytes());
      LaunchTranspose(es, ToTranspose(p.a_copy), a->numel(), a->data, dense, stream);
      ap = dense;
    }
    if (p.copy_b) {
      void* dense = b_copy_.Get(b->nbytes());
      LaunchTranspose(es, ToTranspose(p.b_copy), b->numel(), b->data, dense, stream);
      bp = dense;
    }
    void* dp = p.scatter ? y_copy_.Get(y->nbytes()) : y->data;
    const char* xp = static_cast<const char*>(p.x_is_b ? bp : ap);
    const char* wp = static_cast<const char*>(p.x_is_b ? ap : bp);
    for (const smm::MatMulPlan::Launch& l : p.launches)
      RunLt(ctx, p.gemm, t, xp + l.x * es, wp + l.w * es, static_cast<char*>(dp) + l.d * es, alpha_, 0.0f);
    if (bias != nullptr || z != nullptr || act_ != MatMulAct::kNone)
      LaunchMatMulEpilogue(t, dp, bias != nullptr ? bias->data : nullptr, z != nullptr ? z->data : nullptr,
                           y->numel(), p.n, p.bias_stride, act_, stream);
    if (p.scatter) LaunchTranspose(es, ToTranspose(p.y_scatter), y->numel(), dp, y->data, stream);
    return absl::OkStatus();
  }

 private:
  absl::Status Plan(const KernelContext& ctx, const TensorView& a, const TensorView& b, const TensorView* bias,
                    const TensorView* z, const TensorView& y) {
    const Node& node = ctx.node();
    const std::vector<int64_t> perm_y = node.attr_ints("perm_y");
    alpha_ = node.attr_float("alpha", 1.0f);
    const std::string act = node.attr_string("activation", "");
    if (act.empty()) act_ = MatMulAct::kNone;
    else if (act == "Relu") act_ = MatMulAct::kRelu;
    else if (act == "Gelu") act_ = MatMulAct::kGelu;
    else if (act == "GeluTanh") act_ = MatMulAct::kGeluTanh;
    else if (act == "Sigmoid") act_ = MatMulAct::kSigmoid;
    else if (act == "Tanh") act_ = MatMulAct::kTanh;
    else return ctx.Error(absl::StrCat("unknown activation '", act, "'"));
    auto plan = smm::PlanStridedMatMul(a.dims, b.dims, node.attr_ints("perm_a"), node.attr_ints("perm_b"), perm_y,
                                       y.numel());
    if (!plan.ok()) return ctx.Error(plan.status().message());
    if (bias != nullptr && (bias->numel() != plan->n || (bias->rank() > 0 && bias->dims.back() != plan->n)))
      return ctx.Error(absl::StrCat("bias must hold N = ", plan->n, " values along its last dim"));
    if (z != nullptr) {
      if (!perm_y.empty()) return ctx.Error("Z is not supported with perm_y");
      if (z->dims != y.dims) return ctx.Error("Z must have the shape of Y");
    }
    plan_ = std::make_unique<smm::MatMulPlan>(*std::move(plan));
    a_dims_ = a.dims;
    b_dims_ = b.dims;
    y_numel_ = y.numel();
    return absl::OkStatus();
  }

  std::unique_ptr<smm::MatMulPlan> plan_;  // for a_dims_, b_dims_, y_numel_
  std::vector<int64_t> a_dims_, b_dims_;
  int64_t y_numel_ = -1;
  float alpha_ = 1.0f;
  MatMulAct act_ = MatMulAct::kNone;
  OwnedBuffer a_copy_, b_copy_, y_copy_;
};

}  // namespace

MT_REGISTER_KERNELS(cuda_gemm) {
  // MatMul is FusedMatMul without attributes or epilogue inputs.
  r.Register({"MatMul", "", DeviceType::kCUDA, kFloatTypes, 0, ClassKernel<FusedMatMulKernel>()});
  r.Register({"Gemm", "", DeviceType::kCUDA, kFloatTypes, 0, ClassKernel<GemmKernel>()});
  r.Register({"FusedMatMul", "ai.mixtrain", DeviceType::kCUDA, kFloatTypes, 0, ClassKernel<FusedMatMulKernel>()});
}

}  // namespace mixtrain::cuda
