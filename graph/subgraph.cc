// See subgraph.h.
#include "graph/subgraph.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/onnx_import.h"

namespace mixtrain {
namespace {

// Every graph nested in node `n`'s attributes.
std::vector<const onnx::GraphProto*> Nested(const onnx::NodeProto& n) {
  std::vector<const onnx::GraphProto*> out;
  for (const auto& a : n.attribute()) {
    if (a.has_g()) out.push_back(&a.g());
    for (const auto& g : a.graphs()) out.push_back(&g);
  }
  return out;
}

// Every name `g` and its nested graphs define (inputs, initializers, node outputs).
void Defined(const onnx::GraphProto& g, absl::flat_hash_set<std::string>* out) {
  for (const auto& v : g.input()) out->insert(v.name());
  for (const auto& t : g.initializer()) out->insert(t.name());
  for (const auto& t : g.sparse_initializer()) out->insert(t.values().name());
  for (const auto& n : g.node()) {
    for (const std::string& o : n.output()) out->insert(o);
    for (const onnx::GraphProto* s : Nested(n)) Defined(*s, out);
  }
}

void Reads(const onnx::GraphProto& g, std::vector<std::string>* out) {
  for (const auto& n : g.node()) {
    for (const std::string& i : n.input()) out->push_back(i);
    for (const onnx::GraphProto* s : Nested(n)) Reads(*s, out);
  }
  for (const auto& v : g.output()) out->push_back(v.name());
}

bool IsLoopLike(const Graph& g, const Node& n) {
  return n.domain().empty() && (n.op_type() == "Loop" || (n.op_type() == "Scan" && g.opset("") >= 9));
}

// A name for a new body input: `base` made unique among `taken` (and recorded there).
std::string FreshName(const std::string& base, absl::flat_hash_set<std::string>* taken) {
  std::string name = base;
  for (int k = 1; taken->contains(name); ++k) name = absl::StrCat(base, "_", k);
  taken->insert(name);
  return name;
}

template <typename T>
void InsertAt(google::protobuf::RepeatedPtrField<T>* field, int at, const T& item) {
  field->Add()->CopyFrom(item);
  for (int i = field->size() - 1; i > at; --i) field->SwapElements(i, i - 1);
}

// Replaces `n` by a node of the same kind with `inputs` and with a new output (named `extra`,
// typed as `like`) inserted at each of `at` (positions in the new output list).
Node* Rebuild(Graph& g, Node* n, const std::vector<Value*>& inputs, const std::vector<int>& at,
              const std::vector<const Value*>& like) {
  const std::string op = n->op_type(), name = n->name(), domain = n->domain(), doc = n->doc_string;
  const std::vector<Attribute> attrs = n->attributes();
  const std::map<std::string, std::string> annotations = n->annotations();
  std::vector<Value> outs;  // name, dtype and shape of each output
  for (const Value* o : n->outputs()) outs.push_back(o == nullptr ? Value() : Value{o->name, o->dtype, o->shape});
  g.RemoveNode(n);  // outputs still used stay (without producer); unused ones go
  std::vector<Value*> values;
  for (const Value& o : outs) {
    if (o.name.empty()) {
      values.push_back(nullptr);
      continue;
    }
    Value* v = g.FindValue(o.name);
    values.push_back(v != nullptr ? v : g.AddValue(o.name, o.dtype, o.shape));
  }
  for (size_t k = 0; k < at.size(); ++k) {
    Value* v = g.AddValue(g.UniqueName(absl::StrCat(name, "/outer_read")), like[k]->dtype, like[k]->shape);
    values.insert(values.begin() + at[k], v);
  }
  Node* m = g.AddNode(op, inputs, values, name, domain);
  for (const Attribute& a : attrs) m->SetAttr(a);
  m->doc_string = doc;
  m->annotations() = annotations;
  return m;
}

}  // namespace

std::optional<onnx::GraphProto> SubgraphAttr(const Node& n, const std::string& name) {
  const Attribute* a = n.attr(name);
  if (a == nullptr || a->kind != Attribute::Kind::kOpaque) return std::nullopt;
  onnx::AttributeProto p;
  if (!p.ParseFromString(a->opaque) || p.type() != onnx::AttributeProto::GRAPH || !p.has_g()) return std::nullopt;
  return p.g();
}

void SetSubgraphAttr(Node& n, const std::string& name, const onnx::GraphProto& g) {
  onnx::AttributeProto p;
  p.set_name(name);
  p.set_type(onnx::AttributeProto::GRAPH);
  *p.mutable_g() = g;
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kOpaque;
  p.SerializeToString(&a.opaque);
  n.SetAttr(std::move(a));
}

std::vector<std::string> OuterScopeReads(const onnx::GraphProto& g) {
  absl::flat_hash_set<std::string> defined;
  Defined(g, &defined);
  std::vector<std::string> reads;
  Reads(g, &reads);
  std::vector<std::string> out;
  absl::flat_hash_set<std::string> seen;
  for (const std::string& r : reads)
    if (!r.empty() && !defined.contains(r) && seen.insert(r).second) out.push_back(r);
  return out;
}

void RenameReads(onnx::GraphProto* g, const absl::flat_hash_map<std::string, std::string>& names) {
  auto rename = [&](std::string* s) {
    if (auto it = names.find(*s); it != names.end()) *s = it->second;
  };
  for (auto& n : *g->mutable_node()) {
    for (std::string& i : *n.mutable_input()) rename(&i);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) RenameReads(a.mutable_g(), names);
      for (auto& s : *a.mutable_graphs()) RenameReads(&s, names);
    }
  }
  for (auto& v : *g->mutable_output()) rename(v.mutable_name());
}

absl::StatusOr<bool> MakeOuterReadsExplicit(Graph& g) {
  std::vector<Node*> todo;
  for (const auto& n : g.nodes())
    if (IsLoopLike(g, *n)) todo.push_back(n.get());
  bool changed = false;
  for (Node* n : todo) {
    std::optional<onnx::GraphProto> body = SubgraphAttr(*n, "body");
    if (!body) continue;
    std::vector<Value*> reads;
    absl::flat_hash_map<std::string, std::string> renamed;
    // Names may not repeat across scopes (ONNX's checker): each body input gets a name of its own.
    absl::flat_hash_set<std::string> taken;
    Defined(*body, &taken);
    for (const Value* v : g.values()) taken.insert(v->name);
    for (const std::string& name : OuterScopeReads(*body)) {
      Value* v = g.FindValue(name);
      if (v == nullptr) continue;  // defined nowhere: importing the body names it
      renamed[name] = FreshName(absl::StrCat(name, "_in"), &taken);
      reads.push_back(v);
    }
    if (reads.empty()) continue;
    RenameReads(&*body, renamed);
    // Loop: inputs (M, cond, carried...), body inputs (i, cond, carried...), body outputs (cond,
    // carried..., scan...), outputs (carried..., scan...). Scan: inputs (states..., scans...),
    // body inputs (states..., elements...), body outputs and outputs (states..., scans...).
    const bool loop = n->op_type() == "Loop";
    const int states = loop ? std::max(0, body->input_size() - 2)
                            : static_cast<int>(n->num_inputs()) - static_cast<int>(n->attr_int("num_scan_inputs", 0));
    std::vector<Value*> inputs(n->inputs().begin(), n->inputs().end());
    if (loop && inputs.size() < 2) inputs.resize(2, nullptr);  // M and cond keep their places
    const bool matches = loop ? static_cast<int>(inputs.size()) == 2 + states && body->output_size() >= 1 + states
                              : states >= 0 && body->input_size() == static_cast<int>(inputs.size()) &&
                                    body->output_size() >= states;
    if (!matches) continue;  // malformed: unroll_loop names it
    const int body_in_at = loop ? body->input_size() : states;
    const int body_out_at = loop ? 1 + states : states;
    std::vector<int> out_at;
    std::vector<const Value*> like;
    int k = 0;
    for (Value* v : reads) {
      onnx::ValueInfoProto vi;
      vi.set_name(renamed.at(v->name));
      // The element type only: the body passes the value through, whatever its shape.
      if (v->dtype != DType::kUndefined) vi.mutable_type()->mutable_tensor_type()->set_elem_type(ToOnnxType(v->dtype));
      InsertAt(body->mutable_input(), body_in_at + k, vi);
      InsertAt(body->mutable_output(), body_out_at + k, vi);
      inputs.insert(inputs.begin() + (loop ? static_cast<int>(inputs.size()) : states + k), v);
      out_at.push_back(states + k);
      like.push_back(v);
      ++k;
    }
    Node* m = Rebuild(g, n, inputs, out_at, like);
    SetSubgraphAttr(*m, "body", *body);
    changed = true;
  }
  if (changed) MT_RETURN_IF_ERROR(g.TopoSort());
  return changed;
}

absl::StatusOr<std::unique_ptr<Graph>> ImportSubgraph(const onnx::GraphProto& body, const Graph& outer) {
  onnx::ModelProto m;
  m.set_ir_version(outer.ir_version);
  for (const auto& [domain, version] : outer.opset_imports) {
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  *m.mutable_graph() = body;
  if (m.graph().name().empty()) m.mutable_graph()->set_name("body");
  // External data of a body's initializers is refused (no folder to resolve it against).
  return ImportOnnxModel(m, "");
}

}  // namespace mixtrain
