// CPU features that decide the CPU backend's code paths (and what `mixtrain` reports). Detected
// from CPUID bits, never from the CPU's model name, which hypervisors hide or fake.
#pragma once

#include <string>

namespace mixtrain {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false;
  bool avx512_bf16 = false;  // native bf16 dot products (vdpbf16ps)
  bool amx_bf16 = false;     // AMX tiles with bf16 (also needs the OS to enable tile state)
  // bf16 GEMM/conv run natively (oneDNN avx512_core_bf16 or AMX) rather than emulated.
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
  std::string ToString() const;  // "avx2 avx512f avx512_bf16"
};

// Detected once, on first use.
const CpuFeatures& GetCpuFeatures();

}  // namespace mixtrain
