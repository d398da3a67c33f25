// The row loops of the 2x2/2 max pool and its gradient (pool2x2.h), shared by the AVX-512 and
// AVX2 files: each includes this after its target pragma and instantiates the loops with its own
// ISA policy `V` and storage policies `S` (fp32, bf16):
//   V::kStep                      outputs per step
//   V::MakeStep(left) -> Step     masks for min(left, kStep) outputs
//   V::Windows<S>(s, x0, x1, st)  the step's windows: .max, their first maxima as stored
//   V::Route(win, g, relu)        dy g sent to each window's winner, as .even0/.odd0 (row 2r)
//                                 and .even1/.odd1 (row 2r + 1); 0 elsewhere, and with relu 0
//                                 unless the window's max > 0
//   s.Load/Store(p, st, v), s.Split(p, st, even, odd), s.Zip(p, st, even, odd)
#pragma once

#include <algorithm>
#include <cstdint>

namespace mixtrain::cpu::pool2x2 {

template <typename V, typename S, typename T = typename S::T>
void Pool(const T* x, T* y, int64_t w, int64_t oh, int64_t ow) {
  const S s;
  for (int64_t r = 0; r < oh; ++r) {
    const T* x0 = x + 2 * r * w;
    for (int64_t q = 0; q < ow; q += V::kStep) {
      const auto st = V::MakeStep(ow - q);
      const typename V::template Windows<S> win(s, x0 + 2 * q, x0 + w + 2 * q, st);
      s.Store(y + r * ow + q, st, win.max);
    }
  }
}

template <typename V, typename S, typename T = typename S::T>
void PoolGrad(const T* x, const T* dy, T* dx, int64_t h, int64_t w, int64_t oh, int64_t ow,
              bool relu) {
  const S s;
  for (int64_t r = 0; r < oh; ++r) {
    const T* x0 = x + 2 * r * w;
    T* d0 = dx + 2 * r * w;
    T* d1 = d0 + w;
    for (int64_t q = 0; q < ow; q += V::kStep) {
      const auto st = V::MakeStep(ow - q);
      const typename V::template Windows<S> win(s, x0 + 2 * q, x0 + w + 2 * q, st);
      const auto g = V::Route(win, s.Load(dy + r * ow + q, st), relu);
      s.Zip(d0 + 2 * q, st, g.even0, g.odd0);
      s.Zip(d1 + 2 * q, st, g.even1, g.odd1);
    }
    std::fill(d0 + 2 * ow, d0 + w, T(0));  // columns past the last window
    std::fill(d1 + 2 * ow, d1 + w, T(0));
  }
  std::fill(dx + 2 * oh * w, dx + h * w, T(0));  // rows past the last window
}

}  // namespace mixtrain::cpu::pool2x2

// pool2x2.h's four functions in the including namespace, for ISA policy V and storage policies
// F32 and BF16.
#define MT_POOL2X2_DEFINE(V)                                                                    \
  void MaxPool2x2(const float* x, float* y, int64_t w, int64_t oh, int64_t ow) {                \
    pool2x2::Pool<V, F32>(x, y, w, oh, ow);                                                     \
  }                                                                                             \
  void MaxPool2x2(const uint16_t* x, uint16_t* y, int64_t w, int64_t oh, int64_t ow) {          \
    pool2x2::Pool<V, BF16>(x, y, w, oh, ow);                                                    \
  }                                                                                             \
  void MaxPoolGrad2x2(const float* x, const float* dy, float* dx, int64_t h, int64_t w,        \
                      int64_t oh, int64_t ow, bool relu) {                                      \
    pool2x2::PoolGrad<V, F32>(x, dy, dx, h, w, oh, ow, relu);                                   \
  }                                                                                             \
  void MaxPoolGrad2x2(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t h,          \
                      int64_t w, int64_t oh, int64_t ow, bool relu) {                           \
    pool2x2::PoolGrad<V, BF16>(x, dy, dx, h, w, oh, ow, relu);                                  \
  }
