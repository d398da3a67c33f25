// The winner of a 2x2 pooling window, shared by the MaxPool forward (dnnl_pool.cc) and
// MaxPoolGrad (grad_pool.cc) loops so both follow one tie rule: the first maximum in scan order
// (a b / c d; ties go to the earlier tap, a NaN wins only as the first tap). Branch-free, for
// loops that vectorize.
#pragma once

namespace mixtrain::cpu {

struct Max2x2 {
  bool tb, tc, td;  // b beat a; c beat max(a, b); d beat max(a, b, c)
  float m;          // the maximum
};

[[gnu::always_inline]] inline Max2x2 FirstMax2x2(float a, float b, float c, float d) {
  Max2x2 w;
  w.tb = b > a;
  w.m = w.tb ? b : a;
  w.tc = c > w.m;
  w.m = w.tc ? c : w.m;
  w.td = d > w.m;
  w.m = w.td ? d : w.m;
  return w;
}

}  // namespace mixtrain::cpu
