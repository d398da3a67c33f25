#include "graph/graph.h"

#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/half.h"

namespace mixtrain {

// ---------------------------------------------------------------- Shape

Shape Shape::Of(const std::vector<int64_t>& sizes) {
  std::vector<Dim> d(sizes.begin(), sizes.end());
  return Shape(std::move(d));
}

bool Shape::fully_known() const {
  if (!rank_known) return false;
  for (const Dim& d : dims)
    if (!d.known()) return false;
  return true;
}

std::vector<int64_t> Shape::sizes() const {
  MT_CHECK(fully_known()) << "Shape::sizes on " << ToString();
  std::vector<int64_t> s;
  s.reserve(dims.size());
  for (const Dim& d : dims) s.push_back(d.value);
  return s;
}

std::string Shape::ToString() const {
  if (!rank_known) return "unknown";
  std::vector<std::string> parts;
  for (const Dim& d : dims)
    parts.push_back(d.known() ? absl::StrCat(d.value) : (d.symbol.empty() ? "?" : d.symbol));
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

// ---------------------------------------------------------------- Attribute

Attribute Attribute::Int(std::string name, int64_t v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = Kind::kInt;
  a.i = v;
  return a;
}
Attribute Attribute::Float(std::string name, float v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = Kind::kFloat;
  a.f = v;
  return a;
}
Attribute Attribute::String(std::string name, std::string v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = Kind::kString;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::Ints(std::string name, std::vector<int64_t> v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = Kind::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::Floats(std::string name, std::vector<float> v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = Kind::kFloats;
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::TensorAttr(std::string name, Tensor v) {
  Attribute a;
  a.name = std::move(name);
  a.kind = Kind::kTensor;
  a.t = std::move(v);
  return a;
}

bool Attribute::operator==(const Attribute& o) const {
  if (name != o.name || kind != o.kind || doc_string != o.doc_string) return false;
  switch (kind) {
    case Kind::kFloat: return FloatToBits(f) == FloatToBits(o.f);
    case Kind::kInt: return i == o.i;
    case Kind::kString: return s == o.s;
    case Kind::kTensor: return t.Identical(o.t);
    case Kind::kFloats: return floats == o.floats;
    case Kind::kInts: return ints == o.ints;
    case Kind::kStrings: return strings == o.strings;
    case Kind::kOpaque: return opaque == o.opaque;
  }
  return false;
}

// ---------------------------------------------------------------- Node

const Attribute* Node::attr(std::string_view name) const {
  for (const Attribute& a : attrs_)
    if (a.name == name) return &a;
  return nullptr;
}

int64_t Node::attr_int(std::string_view name, int64_t dflt) const {
  const Attribute* a = attr(name);
  return a && a->kind == Attribute::Kind::kInt ? a->i : dflt;
}
float Node::attr_float(std::string_view name, float dflt) const {
  const Attribute* a = attr(name);
  return a && a->kind == Attribute::Kind::kFloat ? a->f : dflt;
}
std::string Node::attr_string(std::string_view name, std::string dflt) const {
  const Attribute* a = attr(name);
  return a && a->kind == Attribute::Kind::kString ? a->s : dflt;
}
std::vector<int64_t> Node::attr_ints(std::string_view name, std::vector<int64_t> dflt) const {
  const Attribute* a = attr(name);
  return a && a->kind == Attribute::Kind::kInts ? a->ints : dflt;
}
std::vector<float> Node::attr_floats(std::string_view name, std::vector<float> dflt) const {
  const Attribute* a = attr(name);
  return a && a->kind == Attribute::Kind::kFloats ? a->floats : dflt;
}

void Node::SetAttr(Attribute a) {
  for (Attribute& old : attrs_) {
    if (old.name == a.name) {
      old = std::move(a);
      return;
    }
  }
  attrs_.push_back(std::move(a));
}

void Node::RemoveAttr(std::string_view name) {
  attrs_.erase(std::remove_if(attrs_.begin(), attrs_.end(),
                              [&](const Attribute& a) { return a.name == name; }),
               attrs_.end());
}

// ---------------------------------------------------------------- Graph

namespace {

void EraseOne(std::vector<Node*>& v, Node* n) {
  auto it = std::find(v.begin(), v.end(), n);
  MT_CHECK(it != v.end()) << "consumer link missing for node " << n->name();
  v.erase(it);
}

}  // namespace

Value* Graph::AddValue(std::string name, DType dtype, Shape shape) {
  MT_CHECK(!name.empty()) << "values need a name";
  MT_CHECK(!values_by_name_.contains(name)) << "duplicate value name '" << name << "'";
  auto v = std::make_unique<Value>();
  v->name = std::move(name);
  v->dtype = dtype;
  v->shape = std::move(shape);
  Value* raw = v.get();
  values_by_name_[raw->name] = raw;
  value_storage_.push_back(std::move(v));
  return raw;
}

Value* Graph::FindValue(std::string_view name) const {
  auto it = values_by_name_.find(absl::string_view(name.data(), name.size()));
  return it == values_by_name_.end() ? nullptr : it->second;
}

std::string Graph::UniqueName(std::string_view base) {
  std::string b = base.empty() ? std::string("v") : std::string(base);
  if (!values_by_name_.contains(b) && !name_counters_.contains(b)) {
    name_counters_[b] = 0;
    return b;
  }
  int& c = name_counters_[b];
  std::string candidate;
  do {
    candidate = absl::StrCat(b, "_", ++c);
  } while (values_by_name_.contains(candidate));
  return candidate;
}

void Graph::AddInput(Value* v) { inputs_.push_back(v); }
void Graph::AddOutput(Value* v) { outputs_.push_back(v); }

Value* Graph::AddInitializer(std::string name, Tensor t) {
  Value* v = AddValue(std::move(name), t.dtype(), Shape::Of(t.dims()));
  SetInitializer(v, std::move(t));
  return v;
}

void Graph::SetInitializer(Value* v, Tensor t) {
  MT_CHECK(v->producer == nullptr) << "initializer '" << v->name << "' has a producer";
  v->dtype = t.dtype();
  v->shape = Shape::Of(t.dims());
  if (!v->initializer) initializers_.push_back(v);
  v->initializer = std::move(t);
}

void Graph::RemoveInitializer(Value* v) {
  if (!v->initializer) return;
  v->initializer.reset();
  initializers_.erase(std::remove(initializers_.begin(), initializers_.end(), v),
                      initializers_.end());
}

void Graph::RemoveValue(Value* v) {
  MT_CHECK(v->consumers.empty() && v->producer == nullptr)
      << "RemoveValue on '" << v->name << "' which is still used or produced";
  RemoveInitializer(v);
  inputs_.erase(std::remove(inputs_.begin(), inputs_.end(), v), inputs_.end());
  outputs_.erase(std::remove(outputs_.begin(), outputs_.end(), v), outputs_.end());
  values_by_name_.erase(v->name);
  auto it = std::find_if(value_storage_.begin(), value_storage_.end(),
                         [&](const std::unique_ptr<Value>& p) { return p.get() == v; });
  MT_CHECK(it != value_storage_.end());
  value_storage_.erase(it);
}

Node* Graph::AddNode(std::string op_type, const std::vector<Value*>& inputs,
                     const std::vector<Value*>& outputs, std::string name, std::string domain) {
  auto n = std::make_unique<Node>();
  n->op_type_ = std::move(op_type);
  n->domain_ = std::move(domain);
  n->name_ = name.empty() ? absl::StrCat(n->op_type_, "_", node_counter_) : std::move(name);
  ++node_counter_;
  Node* raw = n.get();
  for (Value* in : inputs) {
    raw->inputs_.push_back(in);
    if (in) in->consumers.push_back(raw);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value* out = outputs[i];
    if (out == nullptr) {  // omitted optional output
      raw->outputs_.push_back(nullptr);
      continue;
    }
    MT_CHECK(out->producer == nullptr && !out->is_initializer())
        << "value '" << out->name << "' already has a producer";
    out->producer = raw;
    out->producer_output = static_cast<int>(i);
    raw->outputs_.push_back(out);
  }
  nodes_.push_back(std::move(n));
  return raw;
}

Node* Graph::AddNode(std::string op_type, const std::vector<Value*>& inputs, int num_outputs,
                     std::string name, std::string domain) {
  std::string base = name.empty() ? op_type : name;
  std::vector<Value*> outs;
  for (int i = 0; i < num_outputs; ++i)
    outs.push_back(AddValue(UniqueName(num_outputs == 1 ? base : absl::StrCat(base, "_out", i))));
  return AddNode(std::move(op_type), inputs, outs, std::move(name), std::move(domain));
}

void Graph::SetInput(Node* n, size_t i, Value* v) {
  if (i >= n->inputs_.size()) n->inputs_.resize(i + 1, nullptr);
  if (Value* old = n->inputs_[i]) EraseOne(old->consumers, n);
  n->inputs_[i] = v;
  if (v) v->consumers.push_back(n);
}

void Graph::AddNodeInput(Node* n, Value* v) { SetInput(n, n->inputs_.size(), v); }

void Graph::SetNodeOutput(Node* n, size_t i, Value* v) {
  MT_CHECK(v->producer == nullptr && !v->is_initializer())
      << "value '" << v->name << "' already has a producer";
  if (i >= n->outputs_.size()) n->outputs_.resize(i + 1, nullptr);
  if (Value* old = n->outputs_[i]) {
    old->producer = nullptr;
    old->producer_output = -1;
    if (old->consumers.empty() && !IsGraphOutput(old)) RemoveValue(old);
  }
  n->outputs_[i] = v;
  v->producer = n;
  v->producer_output = static_cast<int>(i);
}

void Graph::DropNodeOutput(Node* n, size_t i) {
  if (i >= n->outputs_.size()) return;
  if (Value* old = n->outputs_[i]) {
    old->producer = nullptr;
    old->producer_output = -1;
    if (old->consumers.empty() && !IsGraphOutput(old)) RemoveValue(old);
  }
  n->outputs_[i] = nullptr;
  while (!n->outputs_.empty() && n->outputs_.back() == nullptr) n->outputs_.pop_back();
}

void Graph::MoveBefore(Node* n, const Node* before) {
  auto find = [&](const Node* x) {
    return std::find_if(nodes_.begin(), nodes_.end(),
                        [&](const std::unique_ptr<Node>& p) { return p.get() == x; });
  };
  auto it = find(n);
  MT_CHECK(it != nodes_.end()) << "MoveBefore: node not in graph";
  std::unique_ptr<Node> owned = std::move(*it);
  nodes_.erase(it);
  auto pos = find(before);
  MT_CHECK(pos != nodes_.end()) << "MoveBefore: anchor not in graph";
  nodes_.insert(pos, std::move(owned));
}

Node* Graph::ReplaceNode(Node* old, std::string op_type, const std::vector<Value*>& inputs, std::string domain) {
  std::vector<Value*> outs = old->outputs_;
  for (Value* out : outs)
    if (out != nullptr) {
      out->producer = nullptr;
      out->producer_output = -1;
    }
  old->outputs_.clear();
  Node* n = AddNode(std::move(op_type), inputs, outs, old->name(), std::move(domain));
  MoveBefore(n, old);
  RemoveNode(old);
  return n;
}

void Graph::RemoveNode(Node* n) {
  for (Value* in : n->inputs_)
    if (in) EraseOne(in->consumers, n);
  n->inputs_.clear();
  for (Value* out : n->outputs_) {
    if (!out) continue;
    out->producer = nullptr;
    out->producer_output = -1;
    if (out->consumers.empty() && !IsGraphOutput(out)) RemoveValue(out);
  }
  auto it = std::find_if(nodes_.begin(), nodes_.end(),
                         [&](const std::unique_ptr<Node>& p) { return p.get() == n; });
  MT_CHECK(it != nodes_.end()) << "RemoveNode: node not in graph";
  nodes_.erase(it);
}

void Graph::ReplaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  std::vector<Node*> users = from->consumers;
  for (Node* u : users)
    for (size_t i = 0; i < u->inputs_.size(); ++i)
      if (u->inputs_[i] == from) SetInput(u, i, to);
  for (Value*& o : outputs_)
    if (o == from) o = to;
}

absl::Status Graph::TopoSort() {
  // Kahn's algorithm, choosing the earliest ready node in the current order so an already
  // topological order is kept as is.
  absl::flat_hash_map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes_.size(); ++i) index[nodes_[i].get()] = i;
  std::vector<int> pending(nodes_.size(), 0);
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (Value* in : nodes_[i]->inputs_)
      if (in && in->producer) ++pending[i];
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<size_t> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (Value* out : nodes_[i]->outputs_) {
      if (!out) continue;
      for (Node* c : out->consumers) {
        auto it = index.find(c);
        if (it != index.end() && --pending[it->second] == 0) ready.push(it->second);
      }
    }
  }
  if (order.size() != nodes_.size()) {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (pending[i] > 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "graph has a cycle through node '", nodes_[i]->name_, "' (", nodes_[i]->op_type_, ")"));
  }
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(nodes_.size());
  for (size_t i : order) sorted.push_back(std::move(nodes_[i]));
  nodes_ = std::move(sorted);
  return absl::OkStatus();
}

std::vector<Value*> Graph::values() const {
  std::vector<Value*> v;
  v.reserve(value_storage_.size());
  for (const auto& p : value_storage_) v.push_back(p.get());
  return v;
}

bool Graph::IsGraphOutput(const Value* v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

int64_t Graph::opset(std::string_view domain) const {
  std::string d(domain == "ai.onnx" ? "" : domain);
  auto it = opset_imports.find(d);
  return it == opset_imports.end() ? 0 : it->second;
}

std::unique_ptr<Graph> Graph::Clone() const {
  auto g = std::make_unique<Graph>();
  g->name = name;
  g->doc_string = doc_string;
  g->ir_version = ir_version;
  g->producer_name = producer_name;
  g->producer_version = producer_version;
  g->model_domain = model_domain;
  g->model_version = model_version;
  g->model_doc_string = model_doc_string;
  g->metadata_props = metadata_props;
  g->opset_imports = opset_imports;
  g->opaque_functions = opaque_functions;
  g->graph_metadata = graph_metadata;
  g->name_counters_ = name_counters_;
  g->node_counter_ = node_counter_;
  absl::flat_hash_map<const Value*, Value*> map;
  for (const auto& v : value_storage_) {
    Value* c = g->AddValue(v->name, v->dtype, v->shape);
    c->doc_string = v->doc_string;
    c->metadata = v->metadata;
    map[v.get()] = c;
  }
  for (const Value* v : initializers_) g->SetInitializer(map[v], *v->initializer);
  for (const Value* v : inputs_) g->inputs_.push_back(map[v]);
  for (const Value* v : outputs_) g->outputs_.push_back(map[v]);
  for (const auto& n : nodes_) {
    std::vector<Value*> ins, outs;
    for (Value* v : n->inputs_) ins.push_back(v ? map[v] : nullptr);
    for (Value* v : n->outputs_) outs.push_back(v ? map[v] : nullptr);
    Node* c = g->AddNode(n->op_type_, ins, outs, n->name_, n->domain_);
    c->attrs_ = n->attrs_;
    c->annotations_ = n->annotations_;
    c->doc_string = n->doc_string;
  }
  g->node_counter_ = node_counter_;
  return g;
}

}  // namespace mixtrain
