// Refuses to run on a CPU that lacks the instruction set the library was compiled for
// (MIXTRAIN_ARCH in CMakeLists.txt), with a message instead of an illegal-instruction crash.
#include <cstdio>
#include <cstdlib>

namespace mixtrain {
namespace {

const bool isa_ok = [] {
#if defined(__AVX2__) && defined(__FMA__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr,
                 "mixtrain: this build needs a CPU with AVX2 and FMA (compiled for %s); this CPU "
                 "lacks them. Rebuild with -DMIXTRAIN_ARCH= for a generic build.\n",
#ifdef MIXTRAIN_ARCH
                 MIXTRAIN_ARCH
#else
                 "x86-64-v3"
#endif
    );
    std::exit(1);
  }
#endif
  return true;
}();

}  // namespace
}  // namespace mixtrain
