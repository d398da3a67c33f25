#include "graph/shape_inference.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace mixtrain {
namespace {

struct SchemaTable {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, OpSchema> rows;
};

SchemaTable& Table() {
  static SchemaTable* t = new SchemaTable();
  return *t;
}

std::string NormalizeDomain(std::string_view d) {
  return d == "ai.onnx" ? std::string() : std::string(d);
}

const TypeInfo kAbsent = [] {
  TypeInfo t;
  t.present = false;
  return t;
}();

}  // namespace

const TypeInfo& InferContext::input(size_t i) const {
  return i < inputs_.size() ? inputs_[i] : kAbsent;
}

absl::Status InferContext::Error(absl::string_view msg) const {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node_.name(), "' (", node_.op_type(), "): ", msg));
}

void RegisterOpSchemas(std::initializer_list<OpSchema> rows) {
  SchemaTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (const OpSchema& r : rows) {
    auto key = std::make_pair(NormalizeDomain(r.domain), std::string(r.op_type));
    MT_CHECK(!t.rows.contains(key)) << "op schema registered twice: " << r.op_type;
    t.rows.emplace(key, r);
  }
}

const OpSchema* FindOpSchema(std::string_view domain, std::string_view op_type) {
  SchemaTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.rows.find(std::make_pair(NormalizeDomain(domain), std::string(op_type)));
  return it == t.rows.end() ? nullptr : &it->second;
}

std::vector<const OpSchema*> AllOpSchemas() {
  SchemaTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<const OpSchema*> v;
  for (const auto& [k, s] : t.rows) v.push_back(&s);
  return v;
}

absl::Status InferNode(const Node& node, int64_t opset, std::vector<TypeInfo> inputs,
                       std::vector<TypeInfo>* outputs) {
  const OpSchema* schema = FindOpSchema(node.domain(), node.op_type());
  InferContext ctx(node, opset, std::move(inputs));
  if (schema != nullptr && schema->infer != nullptr) MT_RETURN_IF_ERROR(schema->infer(ctx));
  *outputs = ctx.outputs();
  return absl::OkStatus();
}

namespace {

// Keeps what the model declared where inference learned less (unknown dtype, unknown rank, or
// a symbol where inference has "?").
void Merge(const TypeInfo& inferred, Value* v) {
  if (inferred.dtype != DType::kUndefined) v->dtype = inferred.dtype;
  if (!inferred.shape.rank_known) return;
  if (!v->shape.rank_known || v->shape.rank() != inferred.shape.rank()) {
    v->shape = inferred.shape;
    return;
  }
  for (size_t i = 0; i < inferred.shape.dims.size(); ++i) {
    const Dim& d = inferred.shape.dims[i];
    if (d.known() || !d.symbol.empty()) v->shape.dims[i] = d;
  }
}

}  // namespace

absl::Status InferShapes(Graph& g) {
  // Values of Constant nodes are known; everything else only by shape.
  std::map<const Value*, const Tensor*> known;
  for (const auto& up : g.nodes()) {
    Node& n = *up;
    std::vector<TypeInfo> ins;
    for (Value* v : n.inputs()) {
      TypeInfo t;
      if (v == nullptr) {
        t.present = false;
      } else {
        t.dtype = v->dtype;
        t.shape = v->shape;
        if (v->is_initializer()) t.value = &*v->initializer;
        auto it = known.find(v);
        if (it != known.end()) t.value = it->second;
      }
      ins.push_back(std::move(t));
    }
    std::vector<TypeInfo> outs;
    MT_RETURN_IF_ERROR(InferNode(n, g.opset(n.domain()), std::move(ins), &outs));
    for (size_t i = 0; i < n.num_outputs() && i < outs.size(); ++i)
      if (Value* v = n.output(i)) Merge(outs[i], v);
    if (n.op_type() == "Constant" && n.domain().empty()) {
      if (const Attribute* a = n.attr("value"); a && a->kind == Attribute::Kind::kTensor)
        if (n.output(0)) known[n.output(0)] = &a->t;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  if (!a.rank_known || !b.rank_known) return Shape();
  int64_t r = std::max(a.rank(), b.rank());
  std::vector<Dim> out(r);
  for (int64_t i = 0; i < r; ++i) {
    int64_t ia = i - (r - a.rank()), ib = i - (r - b.rank());
    Dim da = ia >= 0 ? a.dims[ia] : Dim(1);
    Dim db = ib >= 0 ? b.dims[ib] : Dim(1);
    if (da.known() && db.known()) {
      if (da.value != db.value && da.value != 1 && db.value != 1)
        return absl::InvalidArgumentError(absl::StrCat("shapes ", a.ToString(), " and ",
                                                       b.ToString(), " do not broadcast"));
      out[i] = da.value == 1 ? db : da;
    } else if (da.known() && da.value == 1) {
      out[i] = db;
    } else if (db.known() && db.value == 1) {
      out[i] = da;
    } else if (!da.known() && !db.known() && da.symbol == db.symbol) {
      out[i] = da;
    } else if (da.known()) {
      out[i] = da;  // the symbol must be da or 1; assume da
    } else if (db.known()) {
      out[i] = db;
    } else {
      out[i] = Dim();  // two different symbols: unknown
    }
  }
  return Shape(std::move(out));
}

}  // namespace mixtrain
