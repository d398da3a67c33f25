// The IR: values, nodes and graphs (docs/architecture.md). A Graph owns its nodes and values; values keep
// producer/consumer links, which every mutation below keeps up to date.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "graph/dtype.h"
#include "graph/tensor.h"

namespace mixtrain {

class Node;

// One dimension: a known size (>= 0), a named symbol ("batch"), or unknown (neither).
struct Dim {
  int64_t value = -1;
  std::string symbol;

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit from a size is the common case
  static Dim Symbol(std::string s) {
    Dim d;
    d.symbol = std::move(s);
    return d;
  }
  bool known() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
};

// A shape of known rank, or of unknown rank (rank_known == false, dims empty).
struct Shape {
  bool rank_known = false;
  std::vector<Dim> dims;

  Shape() = default;
  explicit Shape(std::vector<Dim> d) : rank_known(true), dims(std::move(d)) {}
  static Shape Of(const std::vector<int64_t>& sizes);
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool fully_known() const;  // rank known and every dim a number
  std::vector<int64_t> sizes() const;  // requires fully_known()
  std::string ToString() const;  // "[N,1,28,28]", "[?]", "unknown"
  bool operator==(const Shape& o) const { return rank_known == o.rank_known && dims == o.dims; }
};

// A named SSA value: a graph input, an initializer, or a node output.
struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  Node* producer = nullptr;       // null for graph inputs and initializers
  int producer_output = -1;
  std::vector<Node*> consumers;   // one entry per use (a node using it twice appears twice)
  std::optional<Tensor> initializer;  // set for initializers (weights, constants)
  std::string doc_string;
  // The model's metadata_props for this value (value_info or initializer), e.g. torch's dynamo
  // exporter marks initializers "pkg.torch.export.graph_signature.InputSpec.kind" = PARAMETER,
  // BUFFER or CONSTANT_TENSOR.
  std::map<std::string, std::string> metadata;

  bool is_initializer() const { return initializer.has_value(); }
};

// A node attribute. Subgraphs and other kinds nothing here interprets (GRAPH, SPARSE_TENSOR,
// TYPE_PROTO) are kept as their serialized onnx::AttributeProto so export reproduces them.
struct Attribute {
  enum class Kind { kFloat, kInt, kString, kTensor, kFloats, kInts, kStrings, kOpaque };
  std::string name;
  Kind kind = Kind::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::string opaque;  // serialized onnx::AttributeProto for kOpaque
  std::string doc_string;

  static Attribute Int(std::string name, int64_t v);
  static Attribute Float(std::string name, float v);
  static Attribute String(std::string name, std::string v);
  static Attribute Ints(std::string name, std::vector<int64_t> v);
  static Attribute Floats(std::string name, std::vector<float> v);
  static Attribute TensorAttr(std::string name, Tensor v);
  bool operator==(const Attribute& o) const;
};

class Node {
 public:
  const std::string& name() const { return name_; }
  const std::string& op_type() const { return op_type_; }
  const std::string& domain() const { return domain_; }  // "" is the default ONNX domain
  void set_name(std::string n) { name_ = std::move(n); }

  // Inputs may contain nullptr for an omitted optional input ("" in ONNX).
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }

  const std::vector<Attribute>& attributes() const { return attrs_; }
  const Attribute* attr(std::string_view name) const;
  bool has_attr(std::string_view name) const { return attr(name) != nullptr; }
  int64_t attr_int(std::string_view name, int64_t dflt) const;
  float attr_float(std::string_view name, float dflt) const;
  std::string attr_string(std::string_view name, std::string dflt) const;
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> dflt = {}) const;
  std::vector<float> attr_floats(std::string_view name, std::vector<float> dflt = {}) const;
  void SetAttr(Attribute a);  // replaces an attribute of the same name
  void RemoveAttr(std::string_view name);

  // Free-form annotations passes leave for later passes and for dump ("precision" = "f16", ...).
  std::map<std::string, std::string>& annotations() { return annotations_; }
  const std::map<std::string, std::string>& annotations() const { return annotations_; }
  std::string doc_string;

 private:
  friend class Graph;
  std::string name_, op_type_, domain_;
  std::vector<Value*> inputs_, outputs_;
  std::vector<Attribute> attrs_;
  std::map<std::string, std::string> annotations_;
};

// The whole model: a graph plus the ModelProto fields export needs to reproduce.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  // A deep copy (values, nodes, initializer tensors shared copy-on-nothing: tensors are
  // immutable once in a graph, so sharing their buffers is safe).
  std::unique_ptr<Graph> Clone() const;

  // --- values ---
  // Creates a value; the name must be new (MT_CHECK). Use UniqueName() for generated names.
  Value* AddValue(std::string name, DType dtype = DType::kUndefined, Shape shape = Shape());
  Value* FindValue(std::string_view name) const;
  // A name not yet used in this graph, derived from `base` ("base", "base_1", ...).
  std::string UniqueName(std::string_view base);
  void AddInput(Value* v);
  void AddOutput(Value* v);
  Value* AddInitializer(std::string name, Tensor t);
  void SetInitializer(Value* v, Tensor t);  // makes v an initializer (or replaces its tensor)
  void RemoveInitializer(Value* v);          // v stays a value with no producer (e.g. to an input)
  // Removes a value nothing uses or produces.
  void RemoveValue(Value* v);

  // --- nodes ---
  // Appends a node; outputs are created if they do not exist yet (MT_CHECK they have no producer).
  Node* AddNode(std::string op_type, const std::vector<Value*>& inputs,
                const std::vector<Value*>& outputs, std::string name = "",
                std::string domain = "");
  // Convenience: creates fresh outputs named after `name`.
  Node* AddNode(std::string op_type, const std::vector<Value*>& inputs, int num_outputs,
                std::string name = "", std::string domain = "");
  void SetInput(Node* n, size_t i, Value* v);  // also grows the input list if i is past the end
  void AddNodeInput(Node* n, Value* v);
  // Makes `v` (a value without producer, not an initializer) output i of n; the old output value
  // loses its producer (and is removed if nothing uses it and it is no graph output).
  void SetNodeOutput(Node* n, size_t i, Value* v);
  // Removes output i of n (an omitted optional output from now on; trailing ones are dropped).
  // The old value is removed if nothing uses it and it is no graph output.
  void DropNodeOutput(Node* n, size_t i);
  // Moves a node to just before `before` in the node order (for passes that insert producers).
  void MoveBefore(Node* n, const Node* before);
  // Detaches the node from its inputs and outputs and deletes it; its outputs remain as values
  // without producer unless nothing else uses them, in which case they are removed too.
  void RemoveNode(Node* n);
  // Replaces `old` by a new node in its place in the node order, writing old's outputs (their
  // names and readers stay), named as old was; old is deleted. For rewrites that swap an op for
  // another (appended and sorted instead, the new node could land far from where old ran).
  Node* ReplaceNode(Node* old, std::string op_type, const std::vector<Value*>& inputs, std::string domain = "");
  // Every use of `from` (node inputs and graph outputs) now uses `to`.
  void ReplaceAllUsesWith(Value* from, Value* to);

  // Nodes in their current order (topological after TopoSort()).
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t num_nodes() const { return nodes_.size(); }
  // Stable topological sort (keeps the existing order where it is valid). Fails naming a node on
  // a cycle.
  absl::Status TopoSort();

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  const std::vector<Value*>& initializers() const { return initializers_; }
  // All values in creation order.
  std::vector<Value*> values() const;
  bool IsGraphOutput(const Value* v) const;

  // --- model metadata ---
  std::string name;
  std::string doc_string;
  int64_t ir_version = 8;
  std::string producer_name = "mixtrain";
  std::string producer_version;
  std::string model_domain;
  int64_t model_version = 0;
  std::string model_doc_string;
  std::vector<std::pair<std::string, std::string>> metadata_props;
  // The GraphProto's own metadata_props (ONNX 1.16+), e.g. torch's dynamo exporter stores the
  // ExportedProgram's graph signature (which inputs are parameters, buffers) there. Import only.
  std::map<std::string, std::string> graph_metadata;
  // Domain ("" = ai.onnx) -> opset version.
  std::map<std::string, int64_t> opset_imports;
  int64_t opset(std::string_view domain = "") const;
  // Serialized onnx::FunctionProto / TrainingInfoProto entries, kept verbatim for export.
  std::vector<std::string> opaque_functions;

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> value_storage_;
  absl::flat_hash_map<std::string, Value*> values_by_name_;
  std::vector<Value*> inputs_, outputs_, initializers_;
  absl::flat_hash_map<std::string, int> name_counters_;
  int node_counter_ = 0;
};

}  // namespace mixtrain
