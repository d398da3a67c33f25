// fp16 and bf16 <-> fp32 conversion, bit-exact, round-to-nearest-even, usable on host and device.
// Written by hand (not <cuda_fp16.h>) so the CPU build needs no CUDA headers and both backends share
// exactly one definition; tests/kernels/half_test checks all 65536 bit patterns of each type.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MT_HD __host__ __device__ __forceinline__
#else
#define MT_HD inline
#endif

// On x86 hosts with F16C (the x86-64-v3 baseline) the fp16 conversions are one instruction each;
// the hardware rounds exactly as the portable code below. Widening differs only for signalling
// NaNs, which F16C quiets: those take the portable path, so the payload is kept bit for bit.
#if !defined(__CUDACC__) && defined(__F16C__)
#include <immintrin.h>
#define MT_HALF_F16C 1
#endif

namespace mixtrain {

MT_HD float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
MT_HD uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

MT_HD float BFloat16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

MT_HD uint16_t FloatToBFloat16(float f) {
  uint32_t u = FloatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

MT_HD float HalfToFloatPortable(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);  // normal: rebias 15 -> 127
  } else if (man == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: value = man * 2^-24, exact in fp32.
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    bits = sign | FloatToBits(v);
  }
  return BitsToFloat(bits);
}

MT_HD uint16_t FloatToHalfPortable(float f) {
  uint32_t u = FloatToBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a >= 0x38800000u) {
    // Normal half: rebias exponent, round mantissa (23 -> 10 bits) to nearest even.
    uint32_t r = a - 0x38000000u;  // exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): zero
  // Subnormal half: shift the full mantissa with its implicit bit, round to nearest even.
  uint32_t exp = a >> 23;
  uint32_t man = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exp;  // 14..24 so the result counts units of 2^-24
  uint32_t q = man >> shift;
  uint32_t rem = man & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

MT_HD float HalfToFloat(uint16_t h) {
#if MT_HALF_F16C
  if ((h & 0x7c00u) != 0x7c00u) return _cvtsh_ss(h);
#endif
  return HalfToFloatPortable(h);
}

MT_HD uint16_t FloatToHalf(float f) {
#if MT_HALF_F16C
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  return FloatToHalfPortable(f);
#endif
}

}  // namespace mixtrain
