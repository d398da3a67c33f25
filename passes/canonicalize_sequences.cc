// Sequences as plain tensors (see canonicalize_rules.h). The runtime has no sequence type and
// autodiff no sequence gradients; exporters use sequences only to pass a fixed number of pieces
// from where a tensor is split or listed to where they are read: the dynamo exporter splits
// GPT-2's qkv projection with SplitToSequence + SequenceAt, unbind (keepdims=0) likewise, and
// stack/cat of a list can come as ConcatFromSequence. With the piece count known and every
// position constant, the sequence is its pieces:
//   SplitToSequence(x, split, axis, keepdims) -> Split(x, sizes) [+ Squeeze(axis) per piece when
//                                                keepdims = 0 and no split is given]
//   SequenceConstruct(x0, x1, ...)            -> x0, x1, ...
//   SequenceAt(seq, k)          -> piece k (k < 0 counts from the end)
//   SequenceLength(seq)         -> the piece count, a constant
//   ConcatFromSequence(seq, axis, new_axis)  -> Concat(pieces, axis) (of Unsqueeze(piece, axis)
//                                               for new_axis = 1)
// Nothing changes unless every reader of the sequence is one of these (and no reader's result
// is a graph output), so no sequence op is left half-rewritten.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "passes/canonicalize_rules.h"

namespace mixtrain {
namespace {

bool IsOnnx(const Node& n, const char* op) { return n.domain().empty() && n.op_type() == op; }

Value* Ints(Graph& g, const std::string& base, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return g.AddInitializer(g.UniqueName(base), Tensor::FromVector<int64_t>(DType::kI64, {n}, v));
}

// Squeeze/Unsqueeze of `x` at `axis`, axes as an input from opset 13, an attribute before.
Value* AxisOp(Graph& g, const char* op, Value* x, int64_t axis, const std::string& name, const Node* before) {
  Node* n;
  if (g.opset("") >= 13) {
    n = g.AddNode(op, {x, Ints(g, name + "_axes", {axis})}, 1, g.UniqueName(name));
  } else {
    n = g.AddNode(op, {x}, 1, g.UniqueName(name));
    n->SetAttr(Attribute::Ints("axes", {axis}));
  }
  g.MoveBefore(n, before);
  return n->output(0);
}

// The sizes SplitToSequence cuts x into along `axis`, or empty when they are not known here.
std::vector<int64_t> SplitSizes(const Node& n, int64_t axis, const ConstantLookup& constant) {
  const Dim& d = n.input(0)->shape.dims[axis];
  if (n.input(1) == nullptr) return d.known() ? std::vector<int64_t>(d.value, 1) : std::vector<int64_t>();
  const Tensor* t = constant(n.input(1));
  if (t == nullptr || (t->dtype() != DType::kI64 && t->dtype() != DType::kI32)) return {};
  std::vector<int64_t> split = t->ToInt64Vector();
  if (t->rank() != 0) return split;  // explicit sizes (the Split's shape rule checks their sum)
  if (!d.known() || split.empty() || split[0] <= 0) return {};
  std::vector<int64_t> sizes;
  for (int64_t left = d.value; left > 0; left -= split[0]) sizes.push_back(std::min(split[0], left));
  return sizes;
}

// The pieces of the sequence `n` produces, made as tensors before `before`; empty when unknown.
std::vector<Value*> Pieces(Graph& g, Node* n, const ConstantLookup& constant, const Node* before) {
  if (IsOnnx(*n, "SequenceConstruct")) return std::vector<Value*>(n->inputs().begin(), n->inputs().end());
  Value* x = n->input(0);
  if (!x->shape.rank_known) return {};
  int64_t axis = n->attr_int("axis", 0);
  if (axis < 0) axis += x->shape.rank();
  if (axis < 0 || axis >= x->shape.rank()) return {};
  const std::vector<int64_t> sizes = SplitSizes(*n, axis, constant);
  if (sizes.empty()) return {};
  const std::string name = g.UniqueName(n->name());
  Node* split;
  if (g.opset("") >= 13) {
    split = g.AddNode("Split", {x, Ints(g, name + "_sizes", sizes)}, static_cast<int>(sizes.size()), name);
  } else {
    split = g.AddNode("Split", {x}, static_cast<int>(sizes.size()), name);
    split->SetAttr(Attribute::Ints("split", sizes));
  }
  split->SetAttr(Attribute::Int("axis", axis));
  g.MoveBefore(split, before);
  std::vector<Value*> pieces(split->outputs().begin(), split->outputs().end());
  if (n->input(1) == nullptr && n->attr_int("keepdims", 1) == 0)
    for (Value*& p : pieces) p = AxisOp(g, "Squeeze", p, axis, name + "_squeeze", before);
  return pieces;
}

}  // namespace

bool SequenceToTensors(Graph& g, Node* n, const ConstantLookup& constant) {
  if (!IsOnnx(*n, "SplitToSequence") && !IsOnnx(*n, "SequenceConstruct")) return false;
  Value* seq = n->output(0);
  if (seq == nullptr || seq->consumers.empty() || g.IsGraphOutput(seq)) return false;
  if (IsOnnx(*n, "SplitToSequence") && n->input(0) == nullptr) return false;
  // How many pieces of which rank, before making any: every reader must be one this rule replaces.
  int64_t count = static_cast<int64_t>(n->num_inputs()), piece_rank = -1;
  if (IsOnnx(*n, "SplitToSequence")) {
    const Shape& s = n->input(0)->shape;
    int64_t axis = n->attr_int("axis", 0);
    if (!s.rank_known || axis < -s.rank() || axis >= s.rank()) return false;
    count = static_cast<int64_t>(SplitSizes(*n, axis < 0 ? axis + s.rank() : axis, constant).size());
    if (count == 0) return false;
    piece_rank = s.rank() - (n->input(1) == nullptr && n->attr_int("keepdims", 1) == 0 ? 1 : 0);
  } else if (count > 0 && n->input(0) != nullptr && n->input(0)->shape.rank_known) {
    piece_rank = n->input(0)->shape.rank();
  }
  if (count == 0) return false;
  std::vector<int64_t> positions;  // per reader; -1 for readers that take all the pieces
  for (const Node* c : seq->consumers) {
    if (c->output(0) == nullptr || g.IsGraphOutput(c->output(0)) || c->input(0) != seq) return false;
    if (IsOnnx(*c, "SequenceAt")) {
      const Tensor* p = c->input(1) ? constant(c->input(1)) : nullptr;
      if (p == nullptr || p->numel() != 1 || IsFloat(p->dtype())) return false;
      int64_t pos = p->ToInt64Vector()[0];
      if (pos < 0) pos += count;
      if (pos < 0 || pos >= count) return false;
      positions.push_back(pos);
    } else if (IsOnnx(*c, "SequenceLength")) {
      positions.push_back(-1);
    } else if (IsOnnx(*c, "ConcatFromSequence")) {
      if (c->attr_int("new_axis", 0) != 0 && piece_rank < 0) return false;  // where to stack
      positions.push_back(-1);
    } else {
      return false;
    }
  }
  const Node* before = n;
  std::vector<Value*> pieces = Pieces(g, n, constant, before);
  if (static_cast<int64_t>(pieces.size()) != count) return false;  // SplitSizes agreed: not reached
  const std::vector<Node*> readers = seq->consumers;
  for (size_t i = 0; i < readers.size(); ++i) {
    Node* c = readers[i];
    Value* result = nullptr;
    if (positions[i] >= 0) {
      result = pieces[positions[i]];
    } else if (IsOnnx(*c, "SequenceLength")) {
      result = g.AddInitializer(g.UniqueName(c->name() + "_length"), Tensor::FromVector<int64_t>(DType::kI64, {}, {count}));
    } else {  // ConcatFromSequence
      const bool new_axis = c->attr_int("new_axis", 0) != 0;
      int64_t axis = c->attr_int("axis", 0);
      std::vector<Value*> parts = pieces;
      if (new_axis) {
        if (axis < 0) axis += piece_rank + 1;
        for (Value*& p : parts) p = AxisOp(g, "Unsqueeze", p, axis, c->name() + "_unsqueeze", before);
      }
      Node* concat = g.AddNode("Concat", parts, 1, g.UniqueName(c->name()));
      concat->SetAttr(Attribute::Int("axis", axis));
      g.MoveBefore(concat, before);
      result = concat->output(0);
    }
    g.ReplaceAllUsesWith(c->output(0), result);
  }
  return true;
}

}  // namespace mixtrain
