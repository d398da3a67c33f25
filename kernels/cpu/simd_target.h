// Run-time choice of the AVX-512 code path for our own CPU kernels. The build's baseline ISA is
// x86-64-v3 (AVX2), so AVX-512 code lives in functions marked MT_TARGET_AVX512: GCC compiles
// them (and whatever baseline inline code they call: the elementwise functors, fastmath, the
// bf16/fp16 conversions of graph/half.h) for AVX-512, and the kernels call them only
// when the CPU and the OS support it.
//
// Why it pays even on CPUs that split 512-bit operations in two (Zen 4): the bf16 conversions
// narrow 32-bit lanes to 16 with one vpmovdw instead of AVX2's pack-and-permute sequences, tails
// use masks instead of scalar loops, and the polynomial math issues half the instructions.
// Measured on the gpt_mini shapes: bf16 Add 2.6x, fp32 Erf 2x faster than the AVX2 loops.
#pragma once

#include "kernels/cpu/cpu_features.h"

// BW/VL/DQ come with every AVX-512 CPU that has AVX512-BF16 (Cooper Lake, Sapphire Rapids,
// Zen 4); the function bodies use 16-bit lanes (BW) and 256-bit masked forms (VL). `flatten`
// inlines everything the function calls: a callee left out of line (GCC declines large ones
// such as the softmax row) would run its baseline AVX2 copy. Use it on leaf row loops only.
#if defined(__clang__)
// clang takes no prefer-vector-width in target() (it drops the whole attribute); its
// min_vector_width(512) asks for the same 512-bit vectors.
#define MT_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), min_vector_width(512), flatten))
#else
#define MT_TARGET_AVX512                                                                 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512"), \
                 flatten))
#endif

namespace mixtrain::cpu {

// Whether kernels take their AVX-512 paths: the CPU and the OS support them and MIXTRAIN_MAX_ISA
// allows them (cpu_features.h). Detected once; tests set it to false to run the AVX2 paths on an
// AVX-512 machine (a plain flag: set it only while no kernel runs).
inline bool& Avx512Enabled() {
  static bool enabled = GetCpuFeatures().avx512_core;
  return enabled;
}

}  // namespace mixtrain::cpu
