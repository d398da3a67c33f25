// FusedConv with a folded max pool (see conv_pool.h). An image's first conv is bound by
// memory, not arithmetic: fashion_cnn's 1->32 3x3 conv at batch 64 writes a 6.4 MB fp32 map
// that the MaxPool after it reads back (0.15 + 0.065 ms standalone, 0.2-0.35 ms inside the
// model). Here every pooled output block of 16 channels is the max over its window of conv
// outputs computed in registers (C * kh * kw broadcast-FMAs each), so only the pooled map is
// written. The activation is applied after the max, which equals applying it before since
// every supported activation is non-decreasing (LeakyRelu with a negative slope is rejected);
// Relu is max(0, ...), i.e. the max started at 0 instead of -inf.
#include "kernels/cpu/conv_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/ops/nn_geometry.h"
#include "kernels/common/half.h"

namespace mixtrain {
namespace {

constexpr int64_t kBlock = 16;

struct Geometry {
  int64_t c, h, w;         // input channels and size
  int64_t kh, kw, sh, sw;  // conv kernel and strides
  int64_t pt, pl;          // conv pads at the start
  int64_t pkh, pkw, psh, psw;  // pool kernel and strides
  int64_t qh, qw;          // pooled output size
};

// 16 floats: one zmm register in the AVX-512 clone, two ymm otherwise.
typedef float V16 __attribute__((vector_size(kBlock * sizeof(float))));

inline V16 Load16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Conv outputs computed together: independent FMA chains that share each weight load (14
// divides the 28 and 14 wide maps of small images; 14 + 1 zmm registers of 32).
constexpr int64_t kRun = 14;

// Conv output row `oy` of one channel block, ow (rounded up to kRun) vectors of 16, from
// `xp`, the image zero-padded to [C, hp, wp] with the conv's begin pads inside.
__attribute__((target_clones("avx512f", "default"))) void ConvRow(
    const Geometry& g, const float* xp, int64_t hp, int64_t wp, const float* w,
    const float* bias, int64_t oy, int64_t ow, float* row) {
  const V16 b = Load16(bias);
  for (int64_t ox0 = 0; ox0 < ow; ox0 += kRun) {
    V16 acc[kRun];
    for (int64_t k = 0; k < kRun; ++k) acc[k] = b;
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const float* xr = xp + (c * hp + oy * g.sh + ky) * wp + ox0 * g.sw;
        const float* wr = w + (c * g.kh + ky) * g.kw * kBlock;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const V16 wv = Load16(wr + kx * kBlock);
          for (int64_t k = 0; k < kRun; ++k) acc[k] += xr[k * g.sw + kx] * wv;
        }
      }
    std::memcpy(row + ox0 * kBlock, acc, sizeof(acc));
  }
}

// Pooled row qy from the pkh conv rows in `rows` (each `stride` floats apart).
__attribute__((target_clones("avx512f", "default"))) void PoolRow(
    const Geometry& g, const float* rows, int64_t stride, float floor, float* out) {
  for (int64_t qx = 0; qx < g.qw; ++qx) {
    V16 best = V16{} + floor;
    for (int64_t py = 0; py < g.pkh; ++py)
      for (int64_t px = 0; px < g.pkw; ++px) {
        const V16 v = Load16(rows + py * stride + (qx * g.psw + px) * kBlock);
        best = best > v ? best : v;
      }
    std::memcpy(out + qx * kBlock, &best, sizeof(best));
  }
}

// A pooled bf16 row, in a loop the compiler vectorizes.
__attribute__((target_clones("avx512f", "default"))) void StoreBf16(const float* src, int64_t n,
                                                                    uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
}

float ToFloat(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kBF16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    default:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
  }
}

// The FusedConv's activation on a pooled value (Relu and none are the floor of PooledRow).
absl::StatusOr<std::function<float(float)>> Activation(const KernelContext& ctx) {
  const std::string act = ctx.node().attr_string("activation", "");
  const std::vector<float> p = ctx.node().attr_floats("activation_params");
  if (act.empty()) return std::function<float(float)>([](float v) { return v; });
  if (act == "Relu") return std::function<float(float)>([](float v) { return std::max(v, 0.0f); });
  if (act == "LeakyRelu") {
    const float a = p.empty() ? 0.01f : p[0];
    if (a < 0) return ctx.Error("a pooled LeakyRelu needs a non-negative slope");
    return std::function<float(float)>([a](float v) { return v < 0 ? a * v : v; });
  }
  if (act == "Sigmoid")
    return std::function<float(float)>([](float v) { return 1.0f / (1.0f + std::exp(-v)); });
  if (act == "Tanh") return std::function<float(float)>([](float v) { return std::tanh(v); });
  if (act == "Clip" && p.size() == 2) {
    const float lo = p[0], hi = p[1];
    return std::function<float(float)>([lo, hi](float v) { return std::min(std::max(v, lo), hi); });
  }
  return ctx.Error(absl::StrCat("unsupported activation '", act, "'"));
}

}  // namespace

absl::Status ConvMaxPool(KernelContext& ctx, ConvPoolWeights& cache) {
  const Node& node = ctx.node();
  const TensorView* x = ctx.input(0);
  const TensorView* wt = ctx.input(1);
  const TensorView* b = ctx.input(2);
  TensorView* y = ctx.output(0);
  if (ctx.input(3) != nullptr) return ctx.Error("a pooled FusedConv takes no Z");
  if (x->rank() != 4 || wt->rank() != 4 || node.attr_int("group", 1) != 1 ||
      node.attr_int("channel_block", 0) != kBlock || node.attr_int("input_channel_block", 0) != 0)
    return ctx.Error("a pooled FusedConv is 2-D, group 1, from NC<sp> X to channel-blocked Y");
  const int64_t n = x->dims[0], m = wt->dims[0];
  Geometry g{};
  g.c = x->dims[1];
  g.h = x->dims[2];
  g.w = x->dims[3];
  g.kh = wt->dims[2];
  g.kw = wt->dims[3];
  if (wt->dims[1] != g.c || m % kBlock != 0 || (b != nullptr && b->numel() != m))
    return ctx.Error("W, B and X do not fit a pooled blocked conv");
  MT_ASSIGN_OR_RETURN(WindowGeometry cg, ForwardWindowGeometry(node, {g.h, g.w}, {g.kh, g.kw}));
  if (cg.dilations != std::vector<int64_t>{1, 1}) return ctx.Error("no dilated pooled conv");
  g.sh = cg.strides[0];
  g.sw = cg.strides[1];
  g.pt = cg.pads_begin[0];
  g.pl = cg.pads_begin[1];
  const std::vector<int64_t> pk = node.attr_ints("pool_kernel_shape");
  std::vector<int64_t> ps = node.attr_ints("pool_strides");
  if (ps.empty()) ps = pk;
  if (pk.size() != 2 || ps.size() != 2) return ctx.Error("pool_kernel_shape needs 2 dims");
  g.pkh = pk[0];
  g.pkw = pk[1];
  g.psh = ps[0];
  g.psw = ps[1];
  g.qh = (cg.out[0] - g.pkh) / g.psh + 1;
  g.qw = (cg.out[1] - g.pkw) / g.psw + 1;
  const int64_t mb = m / kBlock;
  if (y->dims != std::vector<int64_t>{n, mb, g.qh, g.qw, kBlock})
    return ctx.Error("output allocated with unexpected dims");
  MT_ASSIGN_OR_RETURN(auto act, Activation(ctx));
  const std::string act_name = node.attr_string("activation", "");
  const bool floor_only = act_name.empty() || act_name == "Relu";
  const float floor = act_name == "Relu" ? 0.0f : -std::numeric_limits<float>::infinity();
  const bool direct = floor_only && y->dtype == DType::kF32;

  const bool constant = ctx.input_constant(1) && (b == nullptr || ctx.input_constant(2));
  if (!cache.packed || !constant) {
    const int64_t taps = g.c * g.kh * g.kw;
    cache.w.resize(m * taps);
    for (int64_t o = 0; o < m; ++o)
      for (int64_t t = 0; t < taps; ++t)
        cache.w[((o / kBlock) * taps + t) * kBlock + o % kBlock] =
            ToFloat(wt->dtype, wt->data, o * taps + t);
    cache.bias.assign(m, 0.0f);
    for (int64_t o = 0; b != nullptr && o < m; ++o) cache.bias[o] = ToFloat(b->dtype, b->data, o);
    cache.packed = constant;
  }
  // Conv outputs per row, rounded up to whole runs; the padded image is wide enough for the
  // last run and high enough for every row a pooled row needs.
  const int64_t ow = (cg.out[1] + kRun - 1) / kRun * kRun;
  const int64_t wp = (ow - 1) * g.sw + g.kw;
  const int64_t hp = ((g.qh - 1) * g.psh + g.pkh - 1) * g.sh + g.kh;
  const int64_t out_row = g.qw * kBlock, taps = g.c * g.kh * g.kw;
  const DType xt = x->dtype;
#pragma omp parallel
  {
    std::vector<float> img(g.c * hp * wp), rows(g.pkh * ow * kBlock), pooled(out_row);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      std::fill(img.begin(), img.end(), 0.0f);
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t r = 0; r < g.h && r + g.pt < hp; ++r)
          for (int64_t q = 0; q < g.w && q + g.pl < wp; ++q)
            img[(c * hp + r + g.pt) * wp + q + g.pl] =
                ToFloat(xt, x->data, ((i * g.c + c) * g.h + r) * g.w + q);
      for (int64_t cb = 0; cb < mb; ++cb)
        for (int64_t qy = 0; qy < g.qh; ++qy) {
          for (int64_t py = 0; py < g.pkh; ++py)
            ConvRow(g, img.data(), hp, wp, cache.w.data() + cb * taps * kBlock,
                    cache.bias.data() + cb * kBlock, qy * g.psh + py, ow,
                    rows.data() + py * ow * kBlock);
          const int64_t at = ((i * mb + cb) * g.qh + qy) * out_row;
          float* dst = direct ? y->as<float>() + at : pooled.data();
          PoolRow(g, rows.data(), ow * kBlock, floor, dst);
          if (direct) continue;
          if (floor_only && y->dtype == DType::kBF16) {
            StoreBf16(pooled.data(), out_row, y->as<uint16_t>() + at);
            continue;
          }
          for (int64_t e = 0; e < out_row; ++e) {
            const float v = floor_only ? pooled[e] : act(pooled[e]);
            switch (y->dtype) {
              case DType::kF32:
                y->as<float>()[at + e] = v;
                break;
              case DType::kBF16:
                y->as<uint16_t>()[at + e] = FloatToBFloat16(v);
                break;
              default:
                y->as<uint16_t>()[at + e] = FloatToHalf(v);
            }
          }
        }
    }
  }
  return absl::OkStatus();
}

}  // namespace mixtrain
