// oneDNN's ways of running GPT-2 small's products, timed side by side (the evidence for
// kernels/cpu/dnnl_product.cc's UseSgemm and SplitRows; numbers in tools/bench/RESULTS.md):
//   fp32: the matmul primitive (brgemm on AVX-512) vs dnnl_sgemm (gemm:jit), per shape;
//   bf16, A transposed: the whole product (brgemm) vs 2 and 4 row blocks of C (gemm:jit).
// Shapes at 512 tokens (batch 4 x 128) and 2048 (batch 16): the blocks' weights (d = 768, MLP
// 3072, QKV 2304) and the tied classifier over 50257 tokens.
//
//   cmake --build build --target dnnl_products_bench   (or g++ -O2 this file -ldnnl)
//   OMP_NUM_THREADS=2 build/dnnl_products_bench
//
// Prints GFLOP/s (2 M N K over the median of a few runs); nothing asserts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

using namespace dnnl;
using dt = memory::data_type;

namespace {

engine eng(engine::kind::cpu, 0);
stream strm(eng);

double Now() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class F>
double Median(F f, int iters) {
  std::vector<double> t;
  for (int i = 0; i < iters + 1; ++i) {  // the first run (primitive warm-up) is dropped
    const double t0 = Now();
    f();
    t.push_back(Now() - t0);
  }
  std::sort(t.begin() + 1, t.end());
  return t[1 + iters / 2];
}

struct Bound {
  matmul p;
  memory a, b, c;
  std::string impl;
  void Run() { p.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}}); }
};

Bound Make(const memory::desc& a, const memory::desc& b, const memory::desc& c, void* pa, void* pb, void* pc) {
  matmul::primitive_desc pd(matmul::desc(a, b, c), eng);
  return {matmul(pd), memory(a, eng, pa), memory(b, eng, pb), memory(c, eng, pc), pd.impl_info_str()};
}

struct Shape {
  int64_t m, n, k;
  bool ta, tb;  // A stored [K, M], B stored [N, K]
  const char* what;
};

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  std::vector<Shape> shapes;
  for (int64_t t : {512, 2048}) {
    shapes.push_back({t, 2304, 768, false, false, "fwd QKV"});
    shapes.push_back({t, 3072, 768, false, false, "fwd MLP up"});
    shapes.push_back({t, 768, 3072, false, false, "fwd MLP down"});
    shapes.push_back({t, 768, 3072, false, true, "dX MLP up (dY W^T)"});
    shapes.push_back({768, 2304, t, true, false, "dW QKV (X^T dY)"});
    shapes.push_back({768, 768, t, true, false, "dW attn out"});
    shapes.push_back({768, 3072, t, true, false, "dW MLP up"});
    shapes.push_back({3072, 768, t, true, false, "dW MLP down"});
    shapes.push_back({t, 50257, 768, false, true, "fwd classifier (X W^T)"});
    shapes.push_back({t, 768, 50257, false, false, "dX classifier (dY W)"});
    shapes.push_back({50257, 768, t, true, false, "dW classifier (dY^T X)"});
  }
  const size_t most = 50257LL * 2048;
  std::vector<float> fa(most, 0.5f), fb(most, 0.25f), fc(most);
  std::vector<uint16_t> ha(most, 0x3f00), hb(most, 0x3e80);  // bf16 0.5, 0.25
  printf("fp32: matmul primitive vs dnnl_sgemm, GFLOP/s\n");
  for (const Shape& s : shapes) {
    const memory::desc a({s.m, s.k}, dt::f32, s.ta ? memory::dims{1, s.m} : memory::dims{s.k, 1});
    const memory::desc b({s.k, s.n}, dt::f32, s.tb ? memory::dims{1, s.k} : memory::dims{s.n, 1});
    const memory::desc c({s.m, s.n}, dt::f32, memory::dims{s.n, 1});
    Bound mm = Make(a, b, c, fa.data(), fb.data(), fc.data());
    const double gf = 2.0 * s.m * s.n * s.k / 1e9;
    const int iters = gf > 20 ? 3 : 9;
    const double t1 = Median([&] { mm.Run(); strm.wait(); }, iters);
    const double t2 = Median([&] {
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, fa.data(), s.ta ? s.m : s.k, fb.data(),
                 s.tb ? s.k : s.n, 0.0f, fc.data(), s.n);
    }, iters);
    printf("  %-24s %5ld x %5ld x %5ld  %-20s %6.1f   sgemm %6.1f\n", s.what, static_cast<long>(s.m),
           static_cast<long>(s.n), static_cast<long>(s.k), mm.impl.c_str(), gf / t1 * 1e3, gf / t2 * 1e3);
  }
  printf("bf16, A transposed: whole vs row blocks of C, GFLOP/s\n");
  for (const Shape& s : shapes) {
    if (!s.ta) continue;
    const double gf = 2.0 * s.m * s.n * s.k / 1e9;
    const int iters = gf > 20 ? 3 : 9;
    printf("  %-24s %5ld x %5ld x %5ld", s.what, static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k));
    for (int parts : {1, 2, 4}) {
      std::vector<Bound> blocks;
      const int64_t rows = (s.m + parts - 1) / parts;
      for (int64_t r0 = 0; r0 < s.m; r0 += rows) {
        const int64_t r = std::min(rows, s.m - r0);
        blocks.push_back(Make(memory::desc({r, s.k}, dt::bf16, memory::dims{1, s.m}),
                              memory::desc({s.k, s.n}, dt::bf16, memory::dims{s.n, 1}),
                              memory::desc({r, s.n}, dt::f32, memory::dims{s.n, 1}), ha.data() + r0, hb.data(),
                              fc.data() + r0 * s.n));
      }
      const double t = Median([&] {
        for (Bound& b : blocks) b.Run();
        strm.wait();
      }, iters);
      printf("   %d: %s %6.1f", parts, blocks[0].impl.c_str(), gf / t * 1e3);
    }
    printf("\n");
  }
}
