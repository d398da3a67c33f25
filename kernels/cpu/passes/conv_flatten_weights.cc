// conv_flatten_weights (inference pass, position 47): the classifier head of a CNN flattens
// the last feature map; after conv_layout the map is channels-last (or channel-blocked) and a
// Transpose back to NC<spatial> (for blocked maps followed by a Reshape merging C/16 and 16)
// is left just before the Flatten. Flattening the map as stored instead only reorders the K
// axis of the following product, so the constant weight's K axis is permuted once here and
// the Transpose disappears:
//   Gemm / MatMul / FusedMatMul(Flatten([Reshape(] Transpose(x, p) [)], axis=1), B, ...)
//     => same(Flatten(x, axis=1), B') with B'[k_x] = B[k_t]
// for any p keeping the batch dim first: k_t indexes the flattened Transpose (= the Reshape,
// which keeps the batch dim) and k_x the flattened x at the same element. Fires only when the
// Transpose (and Reshape) and the Flatten feed nothing else, B is a rank-2 constant the product
// reads unpermuted or transposed, and A is not transposed.
#include <cstring>

#include "graph/check.h"
#include "passes/conv_pass_util.h"
#include "kernels/cpu/passes/cpu_passes.h"

namespace mixtrain {
namespace {

using conv_pass::ConstantTensor;
using conv_pass::IsMixtrain;
using conv_pass::IsOnnx;
using conv_pass::SoleConsumer;
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

// B with its K axis (rows, or columns when `transposed`) taken from the order of the
// flattened Transpose(x, perm) into the order of the flattened x; `xd` are x's non-batch dims
// and perm[i] (i >= 1) says which x dim the Transpose's dim i is.
Tensor PermuteK(const Tensor& b, const std::vector<int64_t>& xd, const std::vector<int64_t>& perm,
                bool transposed) {
  Tensor out(b.dtype(), b.dims());
  const size_t elem = DTypeSize(b.dtype());
  const int64_t m = transposed ? b.dims()[0] : b.dims()[1];
  const int64_t k = transposed ? b.dims()[1] : b.dims()[0];
  const size_t r = xd.size();
  // Stride in the Transpose's flat order of each x dim.
  std::vector<int64_t> t_stride(r);
  for (int64_t i = static_cast<int64_t>(r) - 1, s = 1; i >= 0; --i) {
    t_stride[perm[i + 1] - 1] = s;
    s *= xd[perm[i + 1] - 1];
  }
  const auto* src = static_cast<const uint8_t*>(b.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  std::vector<int64_t> idx(r, 0);
  for (int64_t k_x = 0; k_x < k; ++k_x) {
    int64_t k_t = 0;
    for (size_t d = 0; d < r; ++d) k_t += idx[d] * t_stride[d];
    if (transposed) {
      for (int64_t j = 0; j < m; ++j)
        std::memcpy(dst + (j * k + k_x) * elem, src + (j * k + k_t) * elem, elem);
    } else {
      std::memcpy(dst + k_x * m * elem, src + k_t * m * elem, m * elem);
    }
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
      if (++idx[d] < xd[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

bool Rewrite(Graph& g, Node* flatten) {
  if (!IsOnnx(*flatten, "Flatten") || flatten->attr_int("axis", 1) != 1 ||
      flatten->input(0) == nullptr || flatten->output(0) == nullptr)
    return false;
  Node* t = flatten->input(0)->producer;
  // A Reshape keeping the batch dim flattens to the same [N, K] as its input.
  Node* reshape = nullptr;
  if (t != nullptr && IsOnnx(*t, "Reshape") && SoleConsumer(g, t->output(0)) == flatten) {
    const Shape& in = t->input(0)->shape;
    const Shape& out = t->output(0)->shape;
    if (!in.rank_known || !out.rank_known || out.rank() < 1 || in.rank() < 1 ||
        !(in.dims[0] == out.dims[0]) || (!in.dims[0].known() && in.dims[0].symbol.empty()))
      return false;
    reshape = t;
    t = t->input(0)->producer;
  }
  const Node* t_user = reshape != nullptr ? reshape : flatten;
  if (t == nullptr || !IsOnnx(*t, "Transpose") || SoleConsumer(g, t->output(0)) != t_user)
    return false;
  Value* x = t->input(0);
  const Shape& xs = x->shape;
  if (!xs.rank_known || xs.rank() < 2) return false;
  const std::vector<int64_t> perm = TransposePerm(*t, xs.rank());
  if (perm[0] != 0) return false;
  std::vector<int64_t> xd;
  int64_t k = 1;
  for (int64_t i = 1; i < xs.rank(); ++i) {
    if (!xs.dims[i].known()) return false;
    xd.push_back(xs.dims[i].value);
    k *= xs.dims[i].value;
  }
  Node* p = SoleConsumer(g, flatten->output(0));
  if (p == nullptr || p->input(0) != flatten->output(0) || p->input(1) == flatten->output(0))
    return false;
  bool ok;
  const bool transposed = ReadsBTransposed(*p, &ok);
  const Tensor* b = ConstantTensor(g, p->input(1));
  if (!ok || b == nullptr || b->rank() != 2 || b->dims()[transposed ? 1 : 0] != k) return false;
  Value* nb = g.AddInitializer(g.UniqueName(p->input(1)->name + "_permuted"),
                               PermuteK(*b, xd, perm, transposed));
  Value* old_b = p->input(1);
  g.SetInput(p, 1, nb);
  conv_pass::DropIfDeadInitializer(g, old_b);
  g.SetInput(flatten, 0, x);
  if (reshape != nullptr) conv_pass::RemoveNodeAndDeadInitializers(g, reshape);
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

std::unique_ptr<Pass> MakeConvFlattenWeightsPass() { return std::make_unique<ConvFlattenWeightsPass>(); }

}  // namespace mixtrain
