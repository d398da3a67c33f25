// conv_flatten_weights (inference pass, position 47): the classifier head of a CNN flattens
// the last feature map; after conv_layout the map is channels-last and a Transpose back to
// NC<spatial> is left just before the Flatten. Flattening the channels-last map instead only
// reorders the K axis of the following product, so the constant weight's K axis is permuted
// once here and the Transpose disappears:
//   Gemm / MatMul / FusedMatMul(Flatten(Transpose(x, to_first), axis=1), B, ...)
//     => same(Flatten(x, axis=1), B') with B'[k_last] = B[k_first]
// where x is [N, sp..., C], k_first = c * S + s and k_last = s * C + c (s the flat spatial
// index, S their count). Fires only when the Transpose and the Flatten feed nothing else, B is
// a rank-2 constant the product reads unpermuted or transposed, and A is not transposed.
#include <cstring>

#include "graph/check.h"
#include "passes/conv_pass_util.h"
#include "passes/inference.h"

namespace mixtrain {
namespace {

using conv_pass::ConstantTensor;
using conv_pass::IsMixtrain;
using conv_pass::IsOnnx;
using conv_pass::SoleConsumer;
using conv_pass::ToChannelsFirstPerm;
using conv_pass::TransposePerm;

// Whether the product `p` reads its B (input 1) as [K, M] (false) or [M, K] (true); false
// with *ok = false when p is no product this pass understands.
bool ReadsBTransposed(const Node& p, bool* ok) {
  *ok = false;
  if (IsOnnx(p, "MatMul")) {
    *ok = true;
    return false;
  }
  if (IsOnnx(p, "Gemm")) {
    *ok = p.attr_int("transA", 0) == 0;
    return p.attr_int("transB", 0) != 0;
  }
  if (IsMixtrain(p, "FusedMatMul")) {
    const std::vector<int64_t> pb = p.attr_ints("perm_b");
    *ok = !p.has_attr("perm_a") && (pb.empty() || pb == std::vector<int64_t>{1, 0});
    return !pb.empty();
  }
  return false;
}

// B with its K axis (rows, or columns when `transposed`) taken from channels-first order into
// channels-last order.
Tensor PermuteK(const Tensor& b, int64_t spatial, int64_t channels, bool transposed) {
  Tensor out(b.dtype(), b.dims());
  const size_t elem = DTypeSize(b.dtype());
  const int64_t m = transposed ? b.dims()[0] : b.dims()[1];
  const auto* src = static_cast<const uint8_t*>(b.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int64_t s = 0; s < spatial; ++s)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t k_last = s * channels + c, k_first = c * spatial + s;
      if (transposed) {
        const int64_t k = spatial * channels;
        for (int64_t j = 0; j < m; ++j)
          std::memcpy(dst + (j * k + k_last) * elem, src + (j * k + k_first) * elem, elem);
      } else {
        std::memcpy(dst + k_last * m * elem, src + k_first * m * elem, m * elem);
      }
    }
  return out;
}

bool Rewrite(Graph& g, Node* flatten) {
  if (!IsOnnx(*flatten, "Flatten") || flatten->attr_int("axis", 1) != 1 ||
      flatten->input(0) == nullptr || flatten->output(0) == nullptr)
    return false;
  Node* t = flatten->input(0)->producer;
  if (t == nullptr || !IsOnnx(*t, "Transpose") || SoleConsumer(g, t->output(0)) != flatten)
    return false;
  Value* x = t->input(0);
  const Shape& xs = x->shape;
  if (!xs.rank_known || xs.rank() < 3 ||
      TransposePerm(*t, xs.rank()) != ToChannelsFirstPerm(xs.rank()))
    return false;
  int64_t spatial = 1;
  for (int64_t i = 1; i < xs.rank(); ++i) {
    if (!xs.dims[i].known()) return false;
    if (i + 1 < xs.rank()) spatial *= xs.dims[i].value;
  }
  const int64_t channels = xs.dims.back().value;
  Node* p = SoleConsumer(g, flatten->output(0));
  if (p == nullptr || p->input(0) != flatten->output(0) || p->input(1) == flatten->output(0))
    return false;
  bool ok;
  const bool transposed = ReadsBTransposed(*p, &ok);
  const Tensor* b = ConstantTensor(g, p->input(1));
  if (!ok || b == nullptr || b->rank() != 2 ||
      b->dims()[transposed ? 1 : 0] != spatial * channels)
    return false;
  Value* nb = g.AddInitializer(g.UniqueName(p->input(1)->name + "_channels_last"),
                               PermuteK(*b, spatial, channels, transposed));
  g.SetInput(p, 1, nb);
  g.SetInput(flatten, 0, x);
  g.RemoveNode(t);
  return true;
}

class ConvFlattenWeightsPass final : public Pass {
 public:
  absl::string_view name() const override { return "conv_flatten_weights"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    std::vector<Node*> flattens;
    for (const auto& n : g.nodes())
      if (IsOnnx(*n, "Flatten")) flattens.push_back(n.get());
    bool changed = false;
    for (Node* f : flattens) changed |= Rewrite(g, f);
    return changed;
  }
};

}  // namespace

MT_REGISTER_INFERENCE_PASS(conv_flatten_weights, 47,
                           [] { return std::make_unique<ConvFlattenWeightsPass>(); });

}  // namespace mixtrain
