// GetCpuInfo: what the CPU backend detected and chose, for `mixtrain info` and embedders.
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/simd_target.h"
#include "mixtrain/mixtrain.h"

namespace mixtrain {
inline namespace v1 {

CpuInfo GetCpuInfo() {
  CpuInfo i;
  i.detected = GetDetectedCpuFeatures().ToString();
  i.cap = CpuIsaCap();
  i.usable = GetCpuFeatures().ToString();
  i.onednn_isa = dnnl_util::DnnlIsaName();
  i.native_bf16 = dnnl_util::NativeBf16();
  i.row_kernels = cpu::Avx512Enabled() ? "avx512" : "avx2";
  i.auto_dtype = i.native_bf16 ? "bf16" : "fp32";
  i.cap_error = CpuCapError();
  return i;
}

}  // namespace v1
}  // namespace mixtrain
