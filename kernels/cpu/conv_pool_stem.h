// A network's stem: a 2-D conv over an image's few channels, its bias and a Relu (or nothing),
// then a max pool, computed in registers so that only the pooled map reaches memory, written
// channel-blocked ([N, M/16, PH, PW, 16], oneDNN's nChw16c). See conv_pool_stem.cc for why this
// is hand-written and what it costs.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/dtype.h"

namespace mixtrain::cpu {

inline constexpr int64_t kStemBlock = 16;

struct StemGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // X [N, C, H, W]
  int64_t m = 0;                       // output channels, a multiple of kStemBlock
  int64_t kh = 1, kw = 1;              // conv kernel (undilated, group 1)
  int64_t sh = 1, sw = 1;              // conv strides
  int64_t pt = 0, pl = 0;              // conv pads at the start (the end pads only set oh, ow)
  int64_t oh = 0, ow = 0;              // conv output size
  int64_t pkh = 2, pkw = 2;            // max pool window (no pads, no dilation, floor mode)
  int64_t psh = 2, psw = 2;            // max pool strides

  int64_t qh() const { return (oh - pkh) / psh + 1; }  // pooled output size
  int64_t qw() const { return (ow - pkw) / psw + 1; }
};

// Whether ConvPoolStem takes the AVX-512 path for g on this CPU (C <= 4, kernel <= 7x7, conv
// stride 1 or 2, pool 2x2 stride 2); any other valid geometry runs the plain C++ loops.
bool StemFastPath(const StemGeometry& g);

// Whether g is a geometry ConvPoolStem computes at all: positive sizes, M a multiple of 16,
// the pool window inside the conv output.
bool StemValid(const StemGeometry& g);

// W [M, C, kh, kw] (fp32) regrouped per output block: [M/16, C, kh, kw, 16].
std::vector<float> PackStemWeights(const StemGeometry& g, const float* w);

// Y[n, o/16, qy, qx, o%16] = max(floor, max over the pool window of conv(X, W) + bias[o]):
// floor 0 is a Relu after the conv (a Relu commutes with the max), -inf none. x is [N, C, H, W]
// of x_type, y of y_type (kF32, kBF16 or kF16; narrow stores round to nearest even), packed_w
// from PackStemWeights, bias M floats. Runs on all threads (ParallelFor).
void ConvPoolStem(const StemGeometry& g, const void* x, DType x_type, const float* packed_w,
                  const float* bias, float floor, void* y, DType y_type);

}  // namespace mixtrain::cpu
