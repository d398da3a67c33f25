// Included by a .cc file all of whose code that follows is AVX-512 (rows_avx512.cc,
// pool2x2_avx512.cc), after its other includes: every function defined from here on is
// compiled for AVX-512 (with BW/VL/DQ, as MT_TARGET_AVX512 in simd_target.h), so callers check
// Avx512Enabled() first. Include the standard headers before it: templates defined after it
// would be instantiated as AVX-512 code that the linker may pick for every other file. Under
// clang the file ends with `#pragma clang attribute pop`.
#pragma once

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once per inlined use (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
#endif
