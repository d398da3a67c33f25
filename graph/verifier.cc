// See verifier.h.
#include "graph/verifier.h"

#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/onnx_export.h"
#include "onnx/defs/data_type_utils.h"
#include "onnx/defs/schema.h"

namespace mixtrain {
namespace {

std::string NodeRef(const Node& n) { return absl::StrCat("node '", n.name(), "' (", n.op_type(), ")"); }

}  // namespace

absl::Status Verify(const Graph& g) {
  absl::flat_hash_set<const Value*> available;
  absl::flat_hash_set<std::string> names;
  for (const Value* v : g.values()) {
    if (!names.insert(v->name).second)
      return absl::InternalError(absl::StrCat("duplicate value name '", v->name, "'"));
    if (v->is_initializer() && v->producer)
      return absl::InternalError(absl::StrCat("initializer '", v->name, "' has a producer"));
  }
  for (const Value* v : g.inputs()) available.insert(v);
  for (const Value* v : g.initializers()) available.insert(v);
  for (const auto& up : g.nodes()) {
    const Node* n = up.get();
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      const Value* in = n->input(i);
      if (in == nullptr) continue;
      if (!available.contains(in)) {
        if (in->producer == nullptr)
          return absl::InvalidArgumentError(
              absl::StrCat(NodeRef(*n), " input ", i, " '", in->name,
                           "' is not produced by any node, input or initializer"));
        return absl::InvalidArgumentError(
            absl::StrCat(NodeRef(*n), " uses '", in->name, "' before its producer '",
                         in->producer->name(), "' (not topological)"));
      }
      int uses = 0;
      for (const Node* c : in->consumers) uses += c == n;
      int expected = 0;
      for (const Value* x : n->inputs()) expected += x == in;
      if (uses != expected)
        return absl::InternalError(
            absl::StrCat("consumer links of '", in->name, "' disagree with node '", n->name(), "'"));
    }
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      const Value* out = n->output(i);
      if (out == nullptr) continue;
      if (out->producer != n || out->producer_output != static_cast<int>(i))
        return absl::InternalError(
            absl::StrCat("producer link of '", out->name, "' disagrees with node '", n->name(), "'"));
      if (available.contains(out))
        return absl::InvalidArgumentError(
            absl::StrCat("value '", out->name, "' is assigned twice (", NodeRef(*n), ")"));
      available.insert(out);
    }
  }
  for (const Value* out : g.outputs())
    if (!available.contains(out))
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", out->name, "' is not produced by any node"));
  return absl::OkStatus();
}

absl::Status VerifyAcyclic(const Graph& g) {
  // Iterative depth-first search over producer edges; a node met again while still on the stack
  // closes a cycle, and the stack from that node on is the cycle.
  enum class Mark : uint8_t { kNew, kOnStack, kDone };
  absl::flat_hash_map<const Node*, Mark> mark;
  for (const auto& up : g.nodes()) mark[up.get()] = Mark::kNew;
  struct Frame {
    const Node* node;
    size_t next_input;
  };
  for (const auto& root : g.nodes()) {
    if (mark[root.get()] != Mark::kNew) continue;
    std::vector<Frame> stack{{root.get(), 0}};
    mark[root.get()] = Mark::kOnStack;
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.next_input == f.node->num_inputs()) {
        mark[f.node] = Mark::kDone;
        stack.pop_back();
        continue;
      }
      const Value* in = f.node->input(f.next_input++);
      if (in == nullptr || in->producer == nullptr) continue;
      const Node* p = in->producer;
      auto it = mark.find(p);
      if (it == mark.end() || it->second == Mark::kDone) continue;
      if (it->second == Mark::kNew) {
        it->second = Mark::kOnStack;
        stack.push_back({p, 0});
        continue;
      }
      // p is on the stack: the frames from p to the top consume each other's outputs.
      std::vector<std::string> cycle;
      size_t start = 0;
      while (stack[start].node != p) ++start;
      for (size_t i = stack.size(); i-- > start;) cycle.push_back(NodeRef(*stack[i].node));
      cycle.push_back(NodeRef(*stack.back().node));
      return absl::InvalidArgumentError(
          absl::StrCat("graph has a cycle: ", absl::StrJoin(cycle, " -> "),
                       " (each uses an output of the next)"));
    }
  }
  return absl::OkStatus();
}

namespace {

// --- schemas -------------------------------------------------------------------------------------

// Default-domain ops whose inputs, outputs or attributes changed in opsets 18..21, past what ONNX
// 1.12 (Debian's libonnx) knows: their 1.12 schema would refuse valid newer models.
const absl::flat_hash_set<std::string>& ChangedAfterLibrary() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      // 18: axes as an input, Pad's axes, Resize's and LpPool's new attributes, Split's
      // num_outputs, GroupNormalization; 19: AveragePool's dilations, Cast's saturate; 20: DFT's
      // inputs, GridSample's modes; 21: the quantizers' block_size/output_dtype, stash_type.
      "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
      "ReduceMin", "ReduceProd", "ReduceSumSquare", "Pad", "Resize", "LpPool", "Split",
      "GroupNormalization", "AveragePool", "Cast", "CastLike", "DFT", "GridSample",
      "DequantizeLinear", "QuantizeLinear", "Col2Im", "CenterCropPad", "ScatterElements",
      "ScatterND", "Equal", "IsInf", "IsNaN"};
  return *ops;
}

// The ONNX schema the node is checked against, or null when it is not checked (see verifier.h).
const onnx::OpSchema* SchemaFor(const Graph& g, const Node& n) {
  RegisterMixtrainSchemas();
  const std::string& domain = n.domain();
  if (domain == kMixtrainDomain)
    return onnx::OpSchemaRegistry::Schema(n.op_type(), 1, kMixtrainDomain);
  if (!domain.empty() && domain != "ai.onnx") return nullptr;
  const int64_t opset = g.opset("");
  static const int known = [] {
    const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    auto it = ranges.find(onnx::ONNX_DOMAIN);
    return it == ranges.end() ? 0 : it->second.second;
  }();
  if (opset > known && ChangedAfterLibrary().contains(n.op_type())) return nullptr;
  return onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset), onnx::ONNX_DOMAIN);
}

std::string SchemaName(const onnx::OpSchema& s) {
  return absl::StrCat(s.domain().empty() ? "" : absl::StrCat(s.domain(), "."), s.Name(), "-",
                      s.since_version());
}

onnx::AttributeProto::AttributeType AttrType(const Attribute& a) {
  switch (a.kind) {
    case Attribute::Kind::kFloat: return onnx::AttributeProto::FLOAT;
    case Attribute::Kind::kInt: return onnx::AttributeProto::INT;
    case Attribute::Kind::kString: return onnx::AttributeProto::STRING;
    case Attribute::Kind::kTensor: return onnx::AttributeProto::TENSOR;
    case Attribute::Kind::kFloats: return onnx::AttributeProto::FLOATS;
    case Attribute::Kind::kInts: return onnx::AttributeProto::INTS;
    case Attribute::Kind::kStrings: return onnx::AttributeProto::STRINGS;
    case Attribute::Kind::kOpaque: break;
  }
  onnx::AttributeProto p;
  // A reference to a function attribute has no type of its own: reported as UNDEFINED, skipped.
  if (!p.ParseFromString(a.opaque) || !p.ref_attr_name().empty()) return onnx::AttributeProto::UNDEFINED;
  return p.type();
}

const char* AttrTypeName(onnx::AttributeProto::AttributeType t) {
  return onnx::AttributeProto::AttributeType_Name(t).c_str();
}

// Element-type classes for type-constraint checks: mixtrain runs any float op in f16/bf16 (the
// precision pass keeps statistics and scales fp32 next to low-precision data), so the float types
// are one class where ONNX lists only some of them.
bool ConstraintAllows(const onnx::OpSchema::FormalParameter& p, DType t, bool* checked) {
  const onnx::DataTypeSet& allowed = p.GetTypes();
  bool any_tensor = false, any_float = false;
  for (onnx::DataType d : allowed) {
    if (d->rfind("tensor(", 0) != 0) continue;
    any_tensor = true;
    any_float |= *d == "tensor(float)" || *d == "tensor(float16)" || *d == "tensor(bfloat16)" ||
                 *d == "tensor(double)";
  }
  *checked = any_tensor;  // sequences, optionals: not represented in the IR's dtypes
  if (!any_tensor) return true;
  if (IsFloat(t) && any_float) return true;
  const std::string type = absl::StrCat("tensor(", onnx::Utils::DataTypeUtils::ToDataTypeString(ToOnnxType(t)), ")");
  return allowed.contains(onnx::Utils::DataTypeUtils::ToType(type));
}

DType TypeClass(DType t) { return IsFloat(t) ? DType::kF32 : t; }

// Element types of the node's present inputs and outputs whose dtype is known, against the
// schema's constraints: each in its allowed set, and the values bound to one homogeneous type
// parameter of one class.
absl::Status CheckTypes(const Node& n, const onnx::OpSchema& s) {
  // A Constant's type is its value's: old exporters wrote int64 Constants at opset 1, which
  // allowed only floats, and nothing downstream trips on them.
  if (n.op_type() == "Constant") return absl::OkStatus();
  struct Bound {
    DType dtype;
    std::string value;
  };
  absl::flat_hash_map<std::string, Bound> bound;  // type parameter -> first value bound to it
  auto check = [&](const std::vector<onnx::OpSchema::FormalParameter>& formals,
                   const std::vector<Value*>& values, const char* kind) -> absl::Status {
    for (size_t i = 0; i < values.size() && !formals.empty(); ++i) {
      const Value* v = values[i];
      if (v == nullptr || v->dtype == DType::kUndefined) continue;
      const auto& f = formals[std::min(i, formals.size() - 1)];
      bool checked = false;
      if (!ConstraintAllows(f, v->dtype, &checked))
        return absl::InvalidArgumentError(absl::StrCat(
            NodeRef(n), " ", kind, " ", i, " '", v->name, "' is ", DTypeName(v->dtype), ", which ",
            SchemaName(s), " does not allow for '", f.GetName(), "' (", f.GetTypeStr(), ")"));
      bool param = false;
      for (const auto& c : s.typeConstraintParams()) param |= c.type_param_str == f.GetTypeStr();
      if (!checked || !param || !f.GetIsHomogeneous()) continue;
      auto [it, fresh] = bound.try_emplace(f.GetTypeStr(), Bound{v->dtype, v->name});
      if (!fresh && TypeClass(it->second.dtype) != TypeClass(v->dtype))
        return absl::InvalidArgumentError(absl::StrCat(
            NodeRef(n), " ", kind, " ", i, " '", v->name, "' is ", DTypeName(v->dtype), " but '",
            it->second.value, "' is ", DTypeName(it->second.dtype), "; ", SchemaName(s),
            " binds both to type ", f.GetTypeStr()));
    }
    return absl::OkStatus();
  };
  MT_RETURN_IF_ERROR(check(s.inputs(), n.inputs(), "input"));
  return check(s.outputs(), n.outputs(), "output");
}

// "2", "1 to 3" or "1 or more": a schema's count range as the errors say it.
std::string CountRange(int min, int max) {
  if (max == min) return absl::StrCat(min);
  if (max == std::numeric_limits<int>::max()) return absl::StrCat(min, " or more");
  return absl::StrCat(min, " to ", max);
}

absl::Status CheckArity(const Node& n, const onnx::OpSchema& s) {
  const int ins = static_cast<int>(n.num_inputs()), outs = static_cast<int>(n.num_outputs());
  if (ins < s.min_input() || ins > s.max_input())
    return absl::InvalidArgumentError(absl::StrCat(NodeRef(n), " has ", ins, " inputs; ", SchemaName(s), " takes ",
                                                   CountRange(s.min_input(), s.max_input())));
  if (outs < s.min_output() || outs > s.max_output())
    return absl::InvalidArgumentError(absl::StrCat(NodeRef(n), " has ", outs, " outputs; ", SchemaName(s), " makes ",
                                                   CountRange(s.min_output(), s.max_output())));
  auto required = [&](const std::vector<onnx::OpSchema::FormalParameter>& formals,
                      const std::vector<Value*>& values, const char* kind) -> absl::Status {
    for (size_t i = 0; i < values.size() && !formals.empty(); ++i) {
      if (values[i] != nullptr) continue;
      const auto& f = formals[std::min(i, formals.size() - 1)];
      // Omitted ("") is legal for optional parameters only; a variadic list has no holes.
      if (f.GetOption() != onnx::OpSchema::Optional)
        return absl::InvalidArgumentError(absl::StrCat(
            NodeRef(n), " ", kind, " ", i, " ('", f.GetName(), "' of ", SchemaName(s),
            ") is required but given as \"\""));
    }
    return absl::OkStatus();
  };
  MT_RETURN_IF_ERROR(required(s.inputs(), n.inputs(), "input"));
  // An omitted output ("") only means the value is not wanted; kernels handle that for every
  // output, so only the inputs are checked.
  return absl::OkStatus();
}

absl::Status CheckAttributes(const Node& n, const onnx::OpSchema& s) {
  const auto& known = s.attributes();
  for (const Attribute& a : n.attributes()) {
    auto it = known.find(a.name);
    if (it == known.end()) {
      // Our own ops carry their forward node's attributes; ONNX reserves "__" names.
      if (s.domain() == kMixtrainDomain || a.name.rfind("__", 0) == 0) continue;
      return absl::InvalidArgumentError(absl::StrCat(NodeRef(n), " has attribute '", a.name,
                                                     "', which ", SchemaName(s), " does not define"));
    }
    const onnx::AttributeProto::AttributeType t = AttrType(a);
    if (t != onnx::AttributeProto::UNDEFINED && t != it->second.type)
      return absl::InvalidArgumentError(absl::StrCat(
          NodeRef(n), " attribute '", a.name, "' is ", AttrTypeName(t), "; ", SchemaName(s),
          " wants ", AttrTypeName(it->second.type)));
  }
  for (const auto& [name, attr] : known)
    if (attr.required && !n.has_attr(name))
      return absl::InvalidArgumentError(absl::StrCat(NodeRef(n), " lacks attribute '", name,
                                                     "', which ", SchemaName(s), " requires"));
  return absl::OkStatus();
}

// The product of dims into *count; false when a dim is negative or the product overflows int64.
bool CountElements(std::span<const int64_t> dims, int64_t* count) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return false;
    n *= d;
  }
  *count = n;
  return true;
}

}  // namespace

absl::Status VerifySchemas(const Graph& g) {
  for (const auto& up : g.nodes()) {
    const Node& n = *up;
    if (const onnx::OpSchema* s = SchemaFor(g, n)) {
      MT_RETURN_IF_ERROR(CheckArity(n, *s));
      MT_RETURN_IF_ERROR(CheckAttributes(n, *s));
      MT_RETURN_IF_ERROR(CheckTypes(n, *s));
    } else if (n.domain().empty() || n.domain() == "ai.onnx") {
      // Newer than the library: the types of the attributes its latest schema or
      // kNewAttributes knows.
      MT_RETURN_IF_ERROR(CheckNewerOpAttributes(
          n, onnx::OpSchemaRegistry::Schema(n.op_type(), std::numeric_limits<int>::max(), onnx::ONNX_DOMAIN)));
    }
    MT_RETURN_IF_ERROR(CheckAttributeValues(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MaxTensorBytes() {
  if (const char* env = std::getenv("MIXTRAIN_MAX_TENSOR_BYTES"); env != nullptr && *env != '\0') {
    int64_t v;
    if (!absl::SimpleAtoi(env, &v) || v <= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "MIXTRAIN_MAX_TENSOR_BYTES='", env, "' is not a positive byte count"));
    return v;
  }
  int64_t limit = int64_t{1} << 40;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && pages < limit / page) limit = static_cast<int64_t>(pages) * page;
  return limit;
}

absl::Status CheckTensorSize(std::span<const int64_t> dims, DType dtype, const std::string& what) {
  int64_t count;
  if (!CountElements(dims, &count))
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": shape [", absl::StrJoin(dims, ","), "] has more elements than int64 can count"));
  MT_ASSIGN_OR_RETURN(const int64_t limit, MaxTensorBytes());
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  if (elem > 0 && count > limit / elem)
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": shape [", absl::StrJoin(dims, ","), "] of ", DTypeName(dtype), " needs ",
        count, " elements of ", elem, " bytes, above the limit of ", limit,
        " bytes per tensor (set MIXTRAIN_MAX_TENSOR_BYTES to raise it)"));
  return absl::OkStatus();
}

absl::Status VerifyTypesAndSizes(const Graph& g) {
  for (const auto& up : g.nodes()) {
    const Node& n = *up;
    if (const onnx::OpSchema* s = SchemaFor(g, n)) MT_RETURN_IF_ERROR(CheckTypes(n, *s));
    MT_RETURN_IF_ERROR(CheckAxisAttributes(n));
  }
  for (const Value* v : g.values()) {
    if (!v->shape.fully_known() || v->is_initializer()) continue;  // initializers: at decoding
    const std::string what = v->producer != nullptr
                                 ? absl::StrCat(NodeRef(*v->producer), " output '", v->name, "'")
                                 : absl::StrCat("value '", v->name, "'");
    const std::vector<int64_t> dims = v->shape.sizes();
    MT_RETURN_IF_ERROR(CheckTensorSize(dims, v->dtype == DType::kUndefined ? DType::kU8 : v->dtype, what));
  }
  return absl::OkStatus();
}

}  // namespace mixtrain
