// See parameter_positions.h.
#include "passes/parameter_positions.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

bool IsOnnxOp(const Node* n, std::string_view op) { return n != nullptr && n->domain().empty() && n->op_type() == op; }

// Ops whose output holds input 0's elements, moved or a part of them: the view ops (Reshape,
// Squeeze, Unsqueeze, Flatten, Identity) by their trait, and the copying moves.
bool MovesElements(const Node& n) {
  if (!n.domain().empty()) return false;
  return HasOpTraits(n, kOpView) || n.op_type() == "Transpose" || n.op_type() == "Slice" || n.op_type() == "Split";
}

// What a parameter passes through on its way to the node that uses it as one: moves, and
// elementwise functions of it alone (Cast, Neg: tf2onnx stores a Keras PReLU slope negated).
bool PassesThrough(const Node& n) {
  return MovesElements(n) || (n.domain().empty() && HasOpTraits(n, kOpElementwiseUnary));
}

// The initializer (or Constant node output) that `v` is a view or an elementwise function of, or
// null when v is computed from anything else.
const Value* ConstantRoot(const Value* v) {
  while (v != nullptr) {
    if (v->is_initializer()) return v;
    const Node* p = v->producer;
    if (p == nullptr) return nullptr;
    if (p->op_type() == "Constant" && p->domain().empty()) return v;
    if (!PassesThrough(*p) || p->num_inputs() == 0) return nullptr;
    v = p->input(0);
  }
  return nullptr;
}

// Whether v is a constant: an initializer or a Constant node's value, seen through what
// PassesThrough and through Concats of constants (a weight assembled from pieces).
bool IsConstant(const Value* v) {
  if (v == nullptr) return false;
  if (ConstantRoot(v) != nullptr) return true;
  const Node* p = v->producer;
  while (p != nullptr && PassesThrough(*p) && p->num_inputs() > 0 && p->input(0) != nullptr) p = p->input(0)->producer;
  if (!IsOnnxOp(p, "Concat")) return false;
  for (const Value* in : p->inputs())
    if (!IsConstant(in)) return false;
  return true;
}

// v's dims as its reader sees them, from shape inference or else from its initializer.
std::optional<std::vector<int64_t>> DimsOf(const Value* v) {
  if (v->shape.fully_known()) return v->shape.sizes();
  const Value* root = ConstantRoot(v);
  if (root != nullptr && root->is_initializer()) return root->initializer->dims();
  return std::nullopt;
}

// One value per channel: no more than one axis longer than 1 (a bias [C], [1, C, 1, 1]). A mask
// [1, 1, T, T] or a rotary table [T, d] has two.
bool PerChannel(const Value* v) {
  std::optional<std::vector<int64_t>> dims = DimsOf(v);
  return dims && std::count_if(dims->begin(), dims->end(), [](int64_t d) { return d != 1; }) <= 1;
}

// The node that computed v, looking through moves; null for graph inputs and initializers.
const Node* ProducerPastMoves(const Value* v) {
  const Node* p = v->producer;
  while (p != nullptr && MovesElements(*p) && p->num_inputs() > 0 && p->input(0) != nullptr)
    p = p->input(0)->producer;
  return p;
}

// Ops whose result is a product with weights: what a bias is added to.
bool IsProduct(const Node& n) {
  static const absl::flat_hash_set<std::string_view> kProducts = {"MatMul", "Gemm", "Conv", "ConvTranspose",
                                                                   "Einsum"};
  return n.domain().empty() && kProducts.contains(n.op_type());
}

bool IsScale(const Node& n, size_t i);

// A Mul with a scale among its operands (x * gamma).
bool IsScaling(const Node* p) {
  if (!IsOnnxOp(p, "Mul")) return false;
  for (size_t k = 0; k < p->num_inputs(); ++k)
    if (IsScale(*p, k)) return true;
  return false;
}

// Add's (or Sub's) constant operand is a bias when it holds one value per channel and the other
// operand is, seen through moves, a product's result (tf2onnx adds a Conv1D's bias after the
// Squeeze that undoes its Unsqueeze, a Dense bias after the MatMul), a scale's (x * gamma +
// beta), or a scaled term of a norm written out (TF's batch_normalization, Keras's LayerNorm
// and training-mode BatchNorm: x * inv + (beta - mean * inv) with inv = gamma / sqrt(var + eps)).
// An attention mask added to the scores is no bias: it spans two axes.
bool IsBias(const Node& n, size_t i) {
  if (n.num_inputs() != 2 || n.input(1 - i) == nullptr || IsConstant(n.input(1 - i))) return false;
  if (!PerChannel(n.input(i))) return false;
  const Node* p = ProducerPastMoves(n.input(1 - i));
  if (p == nullptr) return false;
  if (IsProduct(*p) || IsScaling(p)) return true;
  if (!IsOnnxOp(p, "Mul")) return false;
  for (const Value* operand : p->inputs())
    if (operand != nullptr && IsScaling(ProducerPastMoves(operand))) return true;
  return false;
}

// relu(-x), which a PReLU written out multiplies by its slope: Keras's PReLU is
// relu(x) - alpha * relu(-x), one alpha per element (or per channel with shared_axes).
bool IsReluOfNegation(const Value* v) {
  const Node* relu = ProducerPastMoves(v);
  return IsOnnxOp(relu, "Relu") && relu->input(0) != nullptr && IsOnnxOp(ProducerPastMoves(relu->input(0)), "Neg");
}

// Mul's constant operand is a scale when the other operand is computed and it is a PReLU's
// slope written out, or it holds one value per channel with more than one (a layer scale, a
// norm's gamma written out, a folded BatchNorm). One-element factors are the exporters' own
// (attention scales, GELU's 0.5 and sqrt(2/pi), x * 0.25); rotary tables span two axes.
bool IsScale(const Node& n, size_t i) {
  if (n.num_inputs() != 2 || n.input(i) == nullptr || n.input(1 - i) == nullptr) return false;
  if (!IsConstant(n.input(i)) || IsConstant(n.input(1 - i))) return false;
  if (IsReluOfNegation(n.input(1 - i))) return true;
  std::optional<std::vector<int64_t>> dims = DimsOf(n.input(i));
  return PerChannel(n.input(i)) && NumElements(*dims) > 1;
}

// One row per op (ai.onnx): the inputs that hold a layer's parameters, named as in ONNX's
// schema ("" for the others), and, for ops that read parameters only in some uses, the test.
struct PositionRow {
  std::string_view op_type;
  std::array<const char*, 8> inputs;
  bool (*applies)(const Node& n, size_t i) = nullptr;  // null: always
  const char* what = "";                               // said after the input's name
};

constexpr PositionRow kPositions[] = {
    {"Conv", {"", "W", "B"}},
    {"ConvTranspose", {"", "W", "B"}},
    {"Gemm", {"", "B", "C"}},
    {"MatMul", {"A", "B"}, nullptr, ", a constant operand"},  // x W or W x
    {"Einsum", {"operand 0", "operand 1", "operand 2", "operand 3", "operand 4", "operand 5", "operand 6",
                "operand 7"}},
    {"PRelu", {"", "slope"}},
    {"LayerNormalization", {"", "Scale", "B"}},
    {"BatchNormalization", {"", "scale", "B"}},  // its mean and var are state (parameters.h)
    {"InstanceNormalization", {"", "scale", "B"}},
    {"GroupNormalization", {"", "scale", "bias"}},
    {"RMSNormalization", {"", "scale"}},
    {"Gather", {"data"}, nullptr, ", a table (embedding)"},
    {"RNN", {"", "W", "R", "B"}},
    {"GRU", {"", "W", "R", "B"}},
    {"LSTM", {"", "W", "R", "B", "", "", "", "P"}},
    {"Add", {"A", "B"}, IsBias, ", a bias"},
    {"Sub", {"A", "B"}, IsBias, ", a bias"},
    {"Mul", {"A", "B"}, IsScale, ", a scale"},
};

const PositionRow* FindRow(const Node& n) {
  if (!n.domain().empty()) return nullptr;
  for (const PositionRow& r : kPositions)
    if (r.op_type == n.op_type()) return &r;
  return nullptr;
}

// A Concat of constants only: a weight assembled from pieces (both torch exporters write an
// LSTM's W as a Concat of Slices of weight_ih, re-ordering the gates), each a part of it.
bool JoinsConstants(const Node& n) {
  if (!IsOnnxOp(&n, "Concat")) return false;
  for (const Value* in : n.inputs())
    if (!IsConstant(in)) return false;
  return true;
}

void CollectReads(const Value* v, absl::flat_hash_set<const Value*>& seen, std::vector<InitializerRead>& out) {
  if (!seen.insert(v).second) return;
  absl::flat_hash_set<const Node*> readers;
  for (const Node* n : v->consumers) {
    if (!readers.insert(n).second) continue;  // one entry per use: visit each reader once
    if (HasOpTraits(*n, kOpReadsOnlyDims)) continue;
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      if (n->input(i) != v) continue;
      if ((i == 0 && PassesThrough(*n)) || JoinsConstants(*n)) {
        for (const Value* o : n->outputs())
          if (o != nullptr) CollectReads(o, seen, out);
        continue;
      }
      out.push_back({n, i, ParameterPosition(*n, i)});
    }
  }
}

}  // namespace

std::string InitializerRead::Describe() const {
  return absl::StrCat(position.empty() ? absl::StrCat(node->op_type(), " input ", input) : position, " (node '",
                      node->name(), "')");
}

std::string ParameterPosition(const Node& n, size_t i) {
  const PositionRow* row = FindRow(n);
  if (row == nullptr || i >= row->inputs.size() || row->inputs[i] == nullptr || *row->inputs[i] == 0) return "";
  if (row->applies != nullptr && !row->applies(n, i)) return "";
  return absl::StrCat(n.op_type(), " ", row->inputs[i], row->what);
}

std::vector<InitializerRead> ReadsOf(const Value& v) {
  std::vector<InitializerRead> out;
  absl::flat_hash_set<const Value*> seen;
  CollectReads(&v, seen, out);
  return out;
}

}  // namespace mixtrain
