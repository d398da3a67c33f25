// FusedConv with a folded max pool (see conv_pool.h): the node's attributes and tensors mapped
// onto the stem kernel of conv_pool_stem.h, which computes conv + bias + max pool in registers
// and writes only the pooled, channel-blocked map. An image's first conv is bound by memory,
// not arithmetic: fashion_cnn's 1->32 3x3 conv at batch 64 writes a 6.4 MB fp32 map that the
// MaxPool after it reads back (0.15 + 0.065 ms standalone, more inside the model).
// The stem kernel applies a Relu as the max's floor (a Relu commutes with the max); any other
// activation is applied after the max, which equals applying it before since every supported
// activation is non-decreasing (LeakyRelu with a negative slope is rejected).
#include "kernels/cpu/conv_pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/ops/nn_geometry.h"
#include "graph/half.h"
#include "kernels/cpu/float_element.h"
#include "kernels/cpu/conv_pool_stem.h"

namespace mixtrain {
namespace {

using cpu::kStemBlock;
using cpu::LoadAsFloat;
using cpu::StoreFromFloat;

// The FusedConv's activation after the pool, other than Relu and none (the stem's floor).
absl::StatusOr<float (*)(float, float, float)> Activation(const KernelContext& ctx, float* a,
                                                          float* b) {
  const std::string act = ctx.node().attr_string("activation", "");
  const std::vector<float> p = ctx.node().attr_floats("activation_params");
  if (act == "LeakyRelu") {
    *a = p.empty() ? 0.01f : p[0];
    if (*a < 0) return ctx.Error("a pooled LeakyRelu needs a non-negative slope");
    return +[](float v, float s, float) { return v < 0 ? s * v : v; };
  }
  if (act == "Sigmoid") return +[](float v, float, float) { return 1.0f / (1.0f + std::exp(-v)); };
  if (act == "Tanh") return +[](float v, float, float) { return std::tanh(v); };
  if (act == "Clip" && p.size() == 2) {
    *a = p[0];
    *b = p[1];
    return +[](float v, float lo, float hi) { return std::min(std::max(v, lo), hi); };
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
      node.attr_int("channel_block", 0) != kStemBlock ||
      node.attr_int("input_channel_block", 0) != 0)
    return ctx.Error("a pooled FusedConv is 2-D, group 1, from NC<sp> X to channel-blocked Y");
  cpu::StemGeometry g;
  g.n = x->dims[0];
  g.c = x->dims[1];
  g.h = x->dims[2];
  g.w = x->dims[3];
  g.m = wt->dims[0];
  g.kh = wt->dims[2];
  g.kw = wt->dims[3];
  if (wt->dims[1] != g.c || (b != nullptr && b->numel() != g.m))
    return ctx.Error("W, B and X do not fit a pooled conv");
  MT_ASSIGN_OR_RETURN(WindowGeometry cg, ForwardWindowGeometry(node, {g.h, g.w}, {g.kh, g.kw}));
  if (cg.dilations != std::vector<int64_t>{1, 1}) return ctx.Error("no dilated pooled conv");
  g.sh = cg.strides[0];
  g.sw = cg.strides[1];
  g.pt = cg.pads_begin[0];
  g.pl = cg.pads_begin[1];
  g.oh = cg.out[0];
  g.ow = cg.out[1];
  const std::vector<int64_t> pk = node.attr_ints("pool_kernel_shape");
  std::vector<int64_t> ps = node.attr_ints("pool_strides");
  if (ps.empty()) ps = pk;
  if (pk.size() != 2 || ps.size() != 2) return ctx.Error("pool_kernel_shape needs 2 dims");
  g.pkh = pk[0];
  g.pkw = pk[1];
  g.psh = ps[0];
  g.psw = ps[1];
  if (!cpu::StemValid(g)) return ctx.Error("no pooled conv of this geometry");
  if (y->dims != std::vector<int64_t>{g.n, g.m / kStemBlock, g.qh(), g.qw(), kStemBlock})
    return ctx.Error("output allocated with unexpected dims");
  const std::string act = node.attr_string("activation", "");
  const bool floor_only = act.empty() || act == "Relu";
  float a = 0, c = 0;
  float (*post)(float, float, float) = nullptr;
  if (!floor_only) {
    MT_ASSIGN_OR_RETURN(post, Activation(ctx, &a, &c));
  }

  const bool constant = ctx.input_constant(1) && (b == nullptr || ctx.input_constant(2));
  if (!cache.packed || !constant) {
    std::vector<float> w(wt->numel());
    for (int64_t i = 0; i < wt->numel(); ++i) w[i] = LoadAsFloat(wt->dtype, wt->data, i);
    cache.w = cpu::PackStemWeights(g, w.data());
    cache.bias.assign(g.m, 0.0f);
    for (int64_t o = 0; b != nullptr && o < g.m; ++o)
      cache.bias[o] = LoadAsFloat(b->dtype, b->data, o);
    cache.packed = constant;
  }
  const float floor = act == "Relu" ? 0.0f : -std::numeric_limits<float>::infinity();
  if (floor_only) {
    cpu::ConvPoolStem(g, x->data, x->dtype, cache.w.data(), cache.bias.data(), floor, y->data,
                      y->dtype);
    return absl::OkStatus();
  }
  // Other activations: the pooled fp32 map, then the activation and Y's dtype.
  std::vector<float> pooled(y->numel());
  cpu::ConvPoolStem(g, x->data, x->dtype, cache.w.data(), cache.bias.data(), floor,
                    pooled.data(), DType::kF32);
  for (int64_t i = 0; i < y->numel(); ++i) StoreFromFloat(y->dtype, y->data, i, post(pooled[i], a, c));
  return absl::OkStatus();
}

}  // namespace mixtrain
