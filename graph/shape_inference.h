// Shape and type inference: one rule per op, kept in the op table (graph/ops/*.cc). Debian's ONNX
// (1.12) knows opsets <= 17 only, so these rules are ours. The same rules serve the importer
// (symbolic dims, `dump`) and the runtime planner (concrete dims, values of small int tensors
// computed by running their kernels — Shape -> Gather -> Concat -> Reshape chains).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"

namespace mixtrain {

// One element of a small int tensor as far as inference knows it: a number, a symbolic dim of
// some value's shape ("N"), or unknown (neither). Shape arithmetic (Shape -> Gather -> Concat ->
// Reshape) is propagated element by element, as ONNX's partial data propagation does, so a
// dynamic axis named "N" stays "N" through the Reshapes an exporter computes from it.
struct SymInt {
  std::optional<int64_t> value;
  std::string symbol;
  bool known() const { return value.has_value(); }
  bool operator==(const SymInt& o) const { return value == o.value && symbol == o.symbol; }
  static SymInt Of(const Dim& d) {
    SymInt s;
    if (d.known()) s.value = d.value; else s.symbol = d.symbol;
    return s;
  }
};
using SymInts = std::vector<SymInt>;
// Propagated contents of small int tensors (0-D or 1-D), by value.
using ShapeData = std::map<const Value*, SymInts>;

struct TypeInfo {
  DType dtype = DType::kUndefined;
  Shape shape;
  const Tensor* value = nullptr;  // known contents (initializer, Constant, folded), or null
  const SymInts* data = nullptr;  // partially known contents (shape arithmetic), or null
  bool present = true;            // false for an omitted optional input/output
};

class InferContext {
 public:
  InferContext(const Node& node, int64_t opset, std::vector<TypeInfo> inputs)
      : node_(node), opset_(opset), inputs_(std::move(inputs)),
        outputs_(node.num_outputs()) {
    for (size_t i = 0; i < node.num_outputs(); ++i) outputs_[i].present = node.output(i) != nullptr;
  }
  const Node& node() const { return node_; }
  int64_t opset() const { return opset_; }  // of the node's domain
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i].present; }
  // An omitted or out-of-range input reads as a not-present TypeInfo.
  const TypeInfo& input(size_t i) const;
  TypeInfo& output(size_t i) { return outputs_.at(i); }
  const std::vector<TypeInfo>& outputs() const { return outputs_; }

  // An error naming the node and op: "node 'conv1' (Conv): <msg>".
  absl::Status Error(absl::string_view msg) const;

 private:
  const Node& node_;
  int64_t opset_;
  std::vector<TypeInfo> inputs_;
  std::vector<TypeInfo> outputs_;
};

using InferFn = absl::Status (*)(InferContext&);

// What passes and the planner need to know about an op beyond its shapes, kept on its row so no
// pass keeps its own list of op names.
enum OpTrait : uint32_t {
  kOpView = 1u << 0,               // output 0 is input 0's bytes under new dims (zero-copy)
  kOpRandom = 1u << 1,             // draws random numbers: never folded, merged or cached
  kOpElementwiseUnary = 1u << 2,   // output element i depends on input 0's element i only
  kOpElementwiseBinary = 1u << 3,  // numpy-broadcast elementwise of two inputs
  kOpOverwritesInput0 = 1u << 4,   // its kernel may write its output over a dying input 0
  kOpReadsOnlyDims = 1u << 5,      // reads its input's dims only (Shape, Size): computed at plan time
  // Every output element i is computed from the inputs' elements i (and scalars), all read before
  // it is written: an output may share any same-sized input's buffer (optimizer state updates
  // written straight into the parameter and its moments).
  kOpIndexAligned = 1u << 6,
  // Its kernel may write its output over a dying input 1 of the same size: each row is read
  // whole before it is written (the loss gradient over the logits it is computed from).
  kOpOverwritesInput1 = 1u << 7,
};

// One row of the op table.
struct OpSchema {
  std::string_view op_type;
  std::string_view domain;  // "" for ai.onnx
  InferFn infer;
  uint32_t traits = 0;      // OpTrait bits
  // Inputs (a bit per index) that stay fp32 when the op runs in a low type: statistics, scales,
  // ratios (the precision pass reads this).
  uint32_t fp32_inputs = 0;
};
constexpr uint32_t InputBits(std::initializer_list<int> idx) {
  uint32_t m = 0;
  for (int i : idx) m |= 1u << i;
  return m;
}
// Whether input `i` of the node stays fp32 in a low-precision region (OpSchema::fp32_inputs).
bool KeepsInputFp32(const Node& n, size_t i);

// Whether the node's op (by its schema row) has all of `traits`; false for unknown ops.
bool HasOpTraits(const Node& n, uint32_t traits);
// The one view-op test passes and the planner share: an op with kOpView (Identity, Reshape,
// Flatten, Squeeze, Unsqueeze) with its data input and output present.
bool IsViewNode(const Node& n);
// Whether two runs of the node on equal inputs may differ (random ops, and ops with no schema,
// whose behaviour nothing here knows): never folded or merged.
bool MayDiffer(const Node& n);

// Null when the op is unknown. Unknown ops still import and dump; only execution refuses them.
const OpSchema* FindOpSchema(std::string_view domain, std::string_view op_type);
// Every op with a rule (for tests and `mixtrain --help`).
std::vector<const OpSchema*> AllOpSchemas();
// Registers rows; graph/ops/*.cc call it from a static initializer:
//   MT_REGISTER_OP_SCHEMAS(elementwise, {{"Relu", "", InferUnary}, {"Add", "", InferBroadcast}});
void RegisterOpSchemas(std::initializer_list<OpSchema> rows);
#define MT_REGISTER_OP_SCHEMAS(tag, ...) \
  static const bool mt_schemas_registered_##tag = (::mixtrain::RegisterOpSchemas(__VA_ARGS__), true)

// Runs the node's rule. Unknown ops leave outputs untouched (dtype undefined) and return OK.
absl::Status InferNode(const Node& node, int64_t opset, std::vector<TypeInfo> inputs,
                       std::vector<TypeInfo>* outputs);

// Infers every value's dtype and shape in a topologically sorted graph, in place. Declared graph
// input/output types are kept where inference knows less. Errors name the node.
// With `data`, also returns the propagated contents of the small int tensors (see SymInt).
absl::Status InferShapes(Graph& g, ShapeData* data = nullptr);

// The tensor a Constant node (ai.onnx) makes, from whichever value attribute it has; nullopt for
// other nodes and for the forms nothing here executes (strings, sparse).
std::optional<Tensor> ConstantNodeValue(const Node& n);

// Numpy-style broadcast of two shapes; symbolic dims broadcast against 1 or an equal symbol.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// numpy matmul of ranks >= 1: 1-D operands are promoted and their dim dropped from the result,
// batch dims broadcast. Fails when the known inner dims differ (the message shows both shapes).
absl::StatusOr<Shape> MatMulShape(const Shape& a, const Shape& b);

}  // namespace mixtrain
