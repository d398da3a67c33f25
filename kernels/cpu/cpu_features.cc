#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>

namespace mixtrain {
namespace {

// XGETBV: which register states the OS saves (a CPU feature is usable only if it does).
uint64_t Xgetbv(uint32_t index) {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(index));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx >> 27) & 1, fma = (ecx >> 12) & 1, f16c = (ecx >> 29) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = Xgetbv(0);
  const bool ymm_os = (xcr0 & 0x6) == 0x6;             // SSE + AVX state
  const bool zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM state
  const bool tile_os = (xcr0 & 0x60000) == 0x60000;    // XTILECFG + XTILEDATA
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = ymm_os && fma && f16c && ((ebx >> 5) & 1);
  const bool avx512f = (ebx >> 16) & 1, avx512dq = (ebx >> 17) & 1, avx512bw = (ebx >> 30) & 1,
             avx512vl = (ebx >> 31) & 1;
  f.avx512_core = f.avx2 && zmm_os && avx512f && avx512dq && avx512bw && avx512vl;
  const bool amx_bf16_bit = (edx >> 22) & 1;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  f.avx512_bf16 = f.avx512_core && ((eax >> 5) & 1);
  f.amx_bf16 = f.avx512_core && tile_os && amx_bf16_bit;
  return f;
}

struct Capped {
  CpuFeatures features;
  std::string cap = "native";
  std::string error;
};

const Capped& GetCapped() {
  static const Capped c = [] {
    Capped r;
    r.features = GetDetectedCpuFeatures();
    const char* env = std::getenv("MIXTRAIN_MAX_ISA");
    if (env == nullptr || *env == '\0') return r;
    const std::string v = env;
    CpuFeatures& f = r.features;
    if (v == "avx2") {
      f.avx512_core = f.avx512_bf16 = f.amx_bf16 = false;
    } else if (v == "avx512_core") {
      f.avx512_bf16 = f.amx_bf16 = false;
    } else if (v == "avx512") {
      f.amx_bf16 = false;
    } else if (v != "native") {
      r.error = "MIXTRAIN_MAX_ISA='" + v + "': expected avx2, avx512_core, avx512 or native";
      return r;
    }
    r.cap = v;
    return r;
  }();
  return c;
}

}  // namespace

std::string CpuFeatures::ToString() const {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(avx512_core, "avx512_core");
  add(avx512_bf16, "avx512_bf16");
  add(amx_bf16, "amx_bf16");
  return s.empty() ? "baseline" : s;
}

const CpuFeatures& GetDetectedCpuFeatures() {
  static const CpuFeatures f = Detect();
  return f;
}

const CpuFeatures& GetCpuFeatures() { return GetCapped().features; }
const std::string& CpuIsaCap() { return GetCapped().cap; }
const std::string& CpuCapError() { return GetCapped().error; }

}  // namespace mixtrain
