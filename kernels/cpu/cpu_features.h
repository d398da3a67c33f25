// CPU features that decide the CPU backend's code paths (and what `mixtrain info` reports).
// Detected from CPUID bits, never from the CPU's model name, which hypervisors hide or fake.
//
// MIXTRAIN_MAX_ISA caps what the project's own dispatch may use, so that a machine with AVX-512
// also runs (and tests) the paths of older CPUs:
//   avx2        AVX2 + FMA + F16C only (the x86-64-v3 baseline every build needs)
//   avx512_core AVX-512 F/BW/VL/DQ, no bf16 dot products
//   avx512      AVX-512 with AVX512-BF16, no AMX
//   native      whatever the CPU has (the default)
// The cap applies to oneDNN as well (dnnl::set_max_cpu_isa) unless DNNL_MAX_CPU_ISA or
// ONEDNN_MAX_CPU_ISA is set; native bf16 GEMM/conv is used only where both agree.
#pragma once

#include <string>

namespace mixtrain {

struct CpuFeatures {
  bool avx2 = false;         // with FMA and F16C: the build's baseline
  bool avx512_core = false;  // AVX-512 F, BW, VL, DQ
  bool avx512_bf16 = false;  // native bf16 dot products (vdpbf16ps)
  bool amx_bf16 = false;     // AMX tiles with bf16 (also needs the OS to enable tile state)
  // bf16 GEMM/conv run natively (oneDNN avx512_core_bf16 or AMX) rather than emulated.
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
  std::string ToString() const;  // "avx2 avx512_core avx512_bf16"
};

// What the CPU has, before any cap.
const CpuFeatures& GetDetectedCpuFeatures();
// What the project's kernels may use: the detected features under MIXTRAIN_MAX_ISA. Detected once.
const CpuFeatures& GetCpuFeatures();

// The cap in force: "native" when MIXTRAIN_MAX_ISA is unset. An unknown value is reported by
// CpuCapError() and treated as "native".
const std::string& CpuIsaCap();
// Empty, or why MIXTRAIN_MAX_ISA was not understood (the CLI refuses to run with it).
const std::string& CpuCapError();

}  // namespace mixtrain
