// conv_transposes (inference pass, position 46): removes the Transposes conv_layout put around
// channels-last ops wherever two of them meet, so a region of such ops keeps one only at its
// boundaries:
//   Transpose(Transpose(x, p), q), q undoing p          => x
//   U(Transpose(x, to_first)) for elementwise unary U    => Transpose(U(x), to_first)
//   B(Transpose(a, to_first), Transpose(b, to_first) or a one-element value)
//     for elementwise binary B                           => Transpose(B(a, b), to_first)
//   Reshape(Reshape(x, s1), s2)                          => Reshape(x, s2)
//   Reshape(x, s) giving x's own shape                   => x
//   Transpose(x, p) moving only size-1 dims              => Reshape(x, shape) (a free view)
// to_first = [N, sp..., C] -> [N, C, sp...]. Sinking moves a Transpose towards the next
// channels-last op, whose own input Transpose then cancels it; it only fires when the
// Transpose feeds nothing else (no work is duplicated) and only for to_first, the layout
// pass's permutation (other Transposes, e.g. attention's, are left where they are). The Reshape
// rules bring the blocked layout's conversions, Transpose(Reshape(Reshape(Transpose(y)))),
// together so that their Transposes cancel too.
#include "graph/check.h"
#include "graph/shape_inference.h"
#include "passes/conv_pass_util.h"
#include "kernels/cpu/passes/cpu_passes.h"

namespace mixtrain {
namespace {

using conv_pass::ConstantTensor;
using conv_pass::Determined;
using conv_pass::IsOnnx;
using conv_pass::PermuteShape;
using conv_pass::RemoveNodeAndDeadInitializers;
using conv_pass::SoleConsumer;
using conv_pass::ToChannelsFirstPerm;
using conv_pass::ToChannelsLastPerm;
using conv_pass::ToFixedPoint;
using conv_pass::TransposePerm;

bool IsTranspose(const Node* n) {
  return n != nullptr && IsOnnx(*n, "Transpose") && n->input(0) != nullptr &&
         n->input(0)->shape.rank_known && n->output(0) != nullptr;
}

// Transpose(Transpose(x, p), q) => x when q undoes p.
bool CancelPair(Graph& g, Node* outer) {
  if (!IsTranspose(outer)) return false;
  Node* inner = outer->input(0)->producer;
  if (!IsTranspose(inner) || g.IsGraphOutput(outer->output(0))) return false;
  const int64_t rank = inner->input(0)->shape.rank();
  const std::vector<int64_t> p = TransposePerm(*inner, rank), q = TransposePerm(*outer, rank);
  for (int64_t i = 0; i < rank; ++i)
    if (p[q[i]] != i) return false;
  g.ReplaceAllUsesWith(outer->output(0), inner->input(0));
  g.RemoveNode(outer);
  if (inner->output(0)->consumers.empty() && !g.IsGraphOutput(inner->output(0)))
    g.RemoveNode(inner);
  return true;
}

bool IsElementwiseUnary(const Node& n) { return n.domain().empty() && HasOpTraits(n, kOpElementwiseUnary); }

bool IsElementwiseBinary(const Node& n) {
  return n.domain().empty() && HasOpTraits(n, kOpElementwiseBinary) && n.num_inputs() == 2;
}

// x when `v` is Transpose(x, to_first) and the transpose feeds only `user`.
Value* ChannelsLastSource(const Graph& g, const Value* v, const Node* user) {
  Node* t = v->producer;
  if (!IsTranspose(t) || SoleConsumer(g, v) != user) return nullptr;
  const int64_t rank = t->input(0)->shape.rank();
  if (rank < 3 || TransposePerm(*t, rank) != ToChannelsFirstPerm(rank)) return nullptr;
  return t->input(0);
}

// One known element: broadcasts the same way against any layout of the other operand.
bool OneElement(const Value* v, int64_t rank) {
  if (!v->shape.fully_known() || v->shape.rank() > rank) return false;
  for (const Dim& d : v->shape.dims)
    if (d.value != 1) return false;
  return true;
}

// Sinks the to_first Transposes feeding elementwise node `n` below it.
bool SinkThrough(Graph& g, Node* n) {
  if (n->num_outputs() != 1 || n->output(0) == nullptr || !n->output(0)->shape.rank_known)
    return false;
  const bool unary = IsElementwiseUnary(*n);
  if (!unary && !IsElementwiseBinary(*n)) return false;
  const int64_t rank = n->output(0)->shape.rank();
  // Inputs 1.. of a unary op (Clip's bounds) are scalars and stay.
  const size_t moved = unary ? 1 : 2;
  std::vector<Value*> sources(moved, nullptr);
  int transposed = 0;
  for (size_t i = 0; i < moved; ++i) {
    Value* in = n->input(i);
    if (in == nullptr) return false;
    sources[i] = ChannelsLastSource(g, in, n);
    if (sources[i] != nullptr && sources[i]->shape.rank() == rank) {
      ++transposed;
    } else if (unary || !OneElement(in, rank)) {
      return false;
    } else {
      sources[i] = in;
    }
  }
  if (transposed == 0) return false;
  for (size_t i = 0; i < moved; ++i) {
    Node* t = n->input(i)->producer;
    if (sources[i] == n->input(i)) continue;
    g.SetInput(n, i, sources[i]);
    g.RemoveNode(t);
  }
  Value* y = n->output(0);
  const std::vector<int64_t> to_last = ToChannelsLastPerm(rank);
  Value* mid =
      g.AddValue(g.UniqueName(y->name + "_nhwc"), y->dtype, PermuteShape(y->shape, to_last));
  g.SetNodeOutput(n, 0, mid);
  Node* t = g.AddNode("Transpose", {mid}, {y}, g.UniqueName(y->name + "_transpose"));
  t->SetAttr(Attribute::Ints("perm", ToChannelsFirstPerm(rank)));
  return true;
}

// Transpose(x, p) => Reshape(x, shape) when p keeps the order of every dim that is not 1.
bool TransposeToReshape(Graph& g, Node* t) {
  if (!IsTranspose(t)) return false;
  const Shape& in = t->input(0)->shape;
  const int64_t rank = in.rank();
  const std::vector<int64_t> perm = TransposePerm(*t, rank);
  int64_t last = -1;
  std::vector<int64_t> shape(rank);
  int unknown = 0;
  for (int64_t i = 0; i < rank; ++i) {
    const Dim& d = in.dims[perm[i]];
    if (d.value == 0) return false;  // Reshape would read a 0 as "copy this dim"
    if (d.value == 1) {
      shape[i] = 1;
      continue;
    }
    if (perm[i] < last) return false;
    last = perm[i];
    if (d.known()) {
      shape[i] = d.value;
    } else if (perm[i] == i) {
      shape[i] = 0;  // Reshape copies the input's dim at the same index
    } else {
      shape[i] = -1;  // the only one left unknown: Reshape infers it
      ++unknown;
    }
  }
  if (unknown > 1) return false;
  Value* y = t->output(0);
  Value* x = t->input(0);
  const std::string name = t->name();
  g.RemoveNode(t);
  Value* s = g.AddInitializer(g.UniqueName(y->name + "_shape"),
                              Tensor::FromVector<int64_t>(DType::kI64, {rank}, shape));
  g.AddNode("Reshape", {x, s}, {y}, name);
  return true;
}

bool IsReshape(const Graph& g, const Node* n) {
  return n != nullptr && IsOnnx(*n, "Reshape") && n->attr_int("allowzero", 0) == 0 &&
         n->input(0) != nullptr && n->output(0) != nullptr &&
         ConstantTensor(g, n->input(1)) != nullptr;
}

// Reshape(Reshape(x, s1), s2) => Reshape(x, s2) when the inner one feeds only the outer and
// every 0 in s2 (copy this dim) copies the same dim from x as from the intermediate.
bool MergeReshapes(Graph& g, Node* outer) {
  if (!IsReshape(g, outer)) return false;
  Node* inner = outer->input(0)->producer;
  if (!IsReshape(g, inner) || SoleConsumer(g, outer->input(0)) != outer) return false;
  const Shape& xs = inner->input(0)->shape;
  const Shape& mid = outer->input(0)->shape;
  const Tensor* s2 = ConstantTensor(g, outer->input(1));
  if (!Determined(xs) || !Determined(mid)) return false;
  for (int64_t i = 0; i < s2->numel(); ++i)
    if (s2->data_as<int64_t>()[i] == 0 &&
        (i >= xs.rank() || i >= mid.rank() || !(xs.dims[i] == mid.dims[i])))
      return false;
  g.SetInput(outer, 0, inner->input(0));
  RemoveNodeAndDeadInitializers(g, inner);
  return true;
}

// Reshape(x, s) => x when the result has x's (determined) shape.
bool DropIdentityReshape(Graph& g, Node* r) {
  if (!IsReshape(g, r) || g.IsGraphOutput(r->output(0))) return false;
  const Shape& in = r->input(0)->shape;
  if (!Determined(in) || !Determined(r->output(0)->shape) || !(in == r->output(0)->shape))
    return false;
  g.ReplaceAllUsesWith(r->output(0), r->input(0));
  RemoveNodeAndDeadInitializers(g, r);
  return true;
}

class ConvTransposesPass final : public Pass {
 public:
  absl::string_view name() const override { return "conv_transposes"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    bool changed = ToFixedPoint(g, [](Graph& g, Node* n) {
      return CancelPair(g, n) || SinkThrough(g, n) || MergeReshapes(g, n) ||
             DropIdentityReshape(g, n);
    });
    // Last, so that no Transpose that could still cancel becomes a Reshape first.
    changed |= ToFixedPoint(g, TransposeToReshape);
    if (changed) MT_RETURN_IF_ERROR(g.TopoSort());
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeConvTransposesPass() { return std::make_unique<ConvTransposesPass>(); }

}  // namespace mixtrain
