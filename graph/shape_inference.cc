#include "graph/shape_inference.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>

#include "absl/strings/match.h"
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

bool HasOpTraits(const Node& n, uint32_t traits) {
  const OpSchema* s = FindOpSchema(n.domain(), n.op_type());
  return s != nullptr && (s->traits & traits) == traits;
}

bool IsViewNode(const Node& n) {
  return HasOpTraits(n, kOpView) && n.num_inputs() > 0 && n.input(0) != nullptr && n.num_outputs() > 0 &&
         n.output(0) != nullptr;
}

bool KeepsInputFp32(const Node& n, size_t i) {
  const OpSchema* s = FindOpSchema(n.domain(), n.op_type());
  return s != nullptr && i < 32 && (s->fp32_inputs >> i & 1u) != 0;
}

bool MayDiffer(const Node& n) {
  const OpSchema* s = FindOpSchema(n.domain(), n.op_type());
  return s == nullptr || (s->traits & kOpRandom) != 0;
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

namespace {

// --- partial data propagation through shape arithmetic -----------------------------------------

constexpr int64_t kMaxDataElements = 64;

bool IsIntType(DType t) {
  return t == DType::kI64 || t == DType::kI32 || t == DType::kBool || t == DType::kI8 ||
         t == DType::kU8;
}

// The known-so-far contents of a small int input, or nullopt.
std::optional<SymInts> DataOf(const TypeInfo& t) {
  if (!t.present || !IsIntType(t.dtype)) return std::nullopt;
  if (t.value != nullptr) {
    if (t.value->rank() > 1 || t.value->numel() > kMaxDataElements) return std::nullopt;
    SymInts out;
    for (int64_t v : t.value->ToInt64Vector()) out.push_back(SymInt{v, ""});
    return out;
  }
  if (t.data != nullptr) return *t.data;
  return std::nullopt;
}

std::optional<std::vector<int64_t>> KnownInts(const TypeInfo& t) {
  std::optional<SymInts> d = DataOf(t);
  if (!d) return std::nullopt;
  std::vector<int64_t> out;
  for (const SymInt& s : *d) {
    if (!s.known()) return std::nullopt;
    out.push_back(*s.value);
  }
  return out;
}

SymInt Unknown() { return SymInt{}; }

// Integer elementwise arithmetic where the operands are numbers or symbols. A symbol survives
// only the identities (N+0, N-0, N*1, N/1); N-N is 0 and N/N is 1.
SymInt Arith(const std::string& op, const SymInt& a, const SymInt& b) {
  if (a.known() && b.known()) {
    // Values a model computes at run time in int64 wrap there; what overflows here is left
    // unknown rather than guessed (and signed overflow is undefined in C++).
    int64_t x = *a.value, y = *b.value, r;
    if (op == "Add") return __builtin_add_overflow(x, y, &r) ? Unknown() : SymInt{r, ""};
    if (op == "Sub") return __builtin_sub_overflow(x, y, &r) ? Unknown() : SymInt{r, ""};
    if (op == "Mul") return __builtin_mul_overflow(x, y, &r) ? Unknown() : SymInt{r, ""};
    if (op == "Div") return y == 0 || (y == -1 && x == INT64_MIN) ? Unknown() : SymInt{x / y, ""};
    if (op == "Max") return SymInt{std::max(x, y), ""};
    if (op == "Min") return SymInt{std::min(x, y), ""};
    if (op == "Equal") return SymInt{x == y ? 1 : 0, ""};
    if (op == "Mod" && y != 0) {  // fmod=0: the result takes the divisor's sign
      r = y == -1 ? 0 : x % y;
      if (r != 0 && (r < 0) != (y < 0)) r += y;
      return SymInt{r, ""};
    }
    return Unknown();
  }
  const bool same_symbol = !a.known() && !b.known() && !a.symbol.empty() && a.symbol == b.symbol;
  if (op == "Equal") {
    if (same_symbol) return SymInt{1, ""};
    // A dim is never negative: N == -1 is false (the exporters' "was this -1?" tests).
    if ((a.known() && *a.value < 0 && !b.symbol.empty()) ||
        (b.known() && *b.value < 0 && !a.symbol.empty()))
      return SymInt{0, ""};
    return Unknown();
  }
  if (same_symbol && op == "Sub") return SymInt{0, ""};
  if (same_symbol && op == "Div") return SymInt{1, ""};
  if (same_symbol && (op == "Max" || op == "Min")) return a;
  const SymInt& sym = a.known() ? b : a;
  const SymInt& num = a.known() ? a : b;
  if (!num.known()) return Unknown();
  int64_t k = *num.value;
  if ((op == "Add" && k == 0) || (op == "Sub" && b.known() && k == 0) ||
      (op == "Mul" && k == 1) || (op == "Div" && b.known() && k == 1))
    return sym;
  if (op == "Mul" && k == 0) return SymInt{0, ""};
  return Unknown();
}

// Numpy broadcast of two 0-D/1-D element lists (sizes equal or one of them 1).
std::optional<SymInts> Broadcast2(const SymInts& a, const SymInts& b,
                                  const std::function<SymInt(const SymInt&, const SymInt&)>& f) {
  if (a.size() != b.size() && a.size() != 1 && b.size() != 1) return std::nullopt;
  size_t n = std::max(a.size(), b.size());
  SymInts out;
  for (size_t i = 0; i < n; ++i) out.push_back(f(a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]));
  return out;
}

int64_t ClampIndex(int64_t i, int64_t n) {
  if (i < 0) i += n;
  return std::clamp<int64_t>(i, 0, n);
}

// The output's elements for the shape-arithmetic ops, from the inputs' (see SymInt).
std::optional<SymInts> PropagateData(const Node& n, int64_t opset, const std::vector<TypeInfo>& in,
                                     const TypeInfo& out) {
  if (!n.domain().empty() || !IsIntType(out.dtype)) return std::nullopt;
  if (out.shape.rank_known && out.shape.rank() > 1) return std::nullopt;
  const std::string& op = n.op_type();
  auto input = [&](size_t i) -> const TypeInfo& {
    static const TypeInfo absent = [] { TypeInfo t; t.present = false; return t; }();
    return i < in.size() ? in[i] : absent;
  };
  if (op == "Shape") {
    const Shape& s = input(0).shape;
    if (!s.rank_known) return std::nullopt;
    int64_t r = s.rank();
    int64_t start = opset >= 15 ? ClampIndex(n.attr_int("start", 0), r) : 0;
    int64_t end = opset >= 15 && n.has_attr("end") ? ClampIndex(n.attr_int("end", r), r) : r;
    SymInts d;
    for (int64_t i = start; i < end; ++i) d.push_back(SymInt::Of(s.dims[i]));
    return d;
  }
  if (op == "Size") {
    const Shape& s = input(0).shape;
    if (!s.fully_known()) return std::nullopt;
    int64_t p = 1;
    for (const Dim& d : s.dims) p *= d.value;
    return SymInts{SymInt{p, ""}};
  }
  if (op == "Identity" || op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" ||
      op == "Flatten" || (op == "Cast" && IsIntType(input(0).dtype)))
    return DataOf(input(0));
  if (op == "Concat") {
    SymInts d;
    for (const TypeInfo& t : in) {
      std::optional<SymInts> p = DataOf(t);
      if (!p) return std::nullopt;
      d.insert(d.end(), p->begin(), p->end());
    }
    return d;
  }
  if (op == "Gather") {
    std::optional<SymInts> data = DataOf(input(0));
    std::optional<std::vector<int64_t>> idx = KnownInts(input(1));
    if (!data || !idx || n.attr_int("axis", 0) != 0) return std::nullopt;
    SymInts d;
    const int64_t size = static_cast<int64_t>(data->size());
    for (int64_t i : *idx) {
      if (i < 0) i += size;
      if (i < 0 || i >= size) return std::nullopt;
      d.push_back((*data)[i]);
    }
    return d;
  }
  if (op == "Slice" && opset >= 10) {
    std::optional<SymInts> data = DataOf(input(0));
    std::optional<std::vector<int64_t>> starts = KnownInts(input(1)), ends = KnownInts(input(2));
    if (!data || !starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if (input(3).present) {
      std::optional<std::vector<int64_t>> axes = KnownInts(input(3));
      if (!axes || axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1)) return std::nullopt;
    }
    int64_t step = 1;
    if (input(4).present) {
      std::optional<std::vector<int64_t>> steps = KnownInts(input(4));
      if (!steps || steps->size() != 1 || (*steps)[0] == 0) return std::nullopt;
      step = (*steps)[0];
    }
    const int64_t size = static_cast<int64_t>(data->size());
    int64_t s = (*starts)[0], e = (*ends)[0];
    if (s < 0) s += size;
    if (e < 0) e += size;
    SymInts d;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, size);
      e = std::clamp<int64_t>(e, 0, size);
      for (int64_t i = s; i < e; i += step) d.push_back((*data)[i]);
    } else {
      s = std::clamp<int64_t>(s, 0, size - 1);
      e = std::clamp<int64_t>(e, -1, size - 1);
      for (int64_t i = s; i > e; i += step) d.push_back((*data)[i]);
    }
    return d;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal" ||
      (op == "Mod" && n.attr_int("fmod", 0) == 0) ||
      ((op == "Max" || op == "Min") && in.size() == 2)) {
    std::optional<SymInts> a = DataOf(input(0)), b = DataOf(input(1));
    if (!a || !b) return std::nullopt;
    return Broadcast2(*a, *b, [&](const SymInt& x, const SymInt& y) { return Arith(op, x, y); });
  }
  if (op == "Expand") {  // of a 0-D/1-D tensor to a known 1-D shape
    std::optional<SymInts> x = DataOf(input(0));
    std::optional<std::vector<int64_t>> shape = KnownInts(input(1));
    if (!x || !shape || shape->size() > 1) return std::nullopt;
    SymInts target(shape->empty() ? 1 : (*shape)[0], SymInt{0, ""});
    return Broadcast2(*x, target, [](const SymInt& a, const SymInt&) { return a; });
  }
  if (op == "Not") {
    std::optional<std::vector<int64_t>> a = KnownInts(input(0));
    if (!a) return std::nullopt;
    SymInts d;
    for (int64_t v : *a) d.push_back(SymInt{v == 0 ? 1 : 0, ""});
    return d;
  }
  if (op == "Where") {
    std::optional<std::vector<int64_t>> c = KnownInts(input(0));
    std::optional<SymInts> x = DataOf(input(1)), y = DataOf(input(2));
    if (!c || !x || !y) return std::nullopt;
    SymInts cs;
    for (int64_t v : *c) cs.push_back(SymInt{v, ""});
    std::optional<SymInts> xy = Broadcast2(*x, *y, [](const SymInt& a, const SymInt&) { return a; });
    if (!xy) return std::nullopt;
    size_t size = std::max({cs.size(), x->size(), y->size()});
    auto at = [&](const SymInts& v, size_t i) { return v[v.size() == 1 ? 0 : i]; };
    if ((cs.size() != 1 && cs.size() != size) || (x->size() != 1 && x->size() != size) ||
        (y->size() != 1 && y->size() != size))
      return std::nullopt;
    SymInts d;
    for (size_t i = 0; i < size; ++i) d.push_back(*at(cs, i).value ? at(*x, i) : at(*y, i));
    return d;
  }
  if (op == "ConstantOfShape") {
    std::optional<std::vector<int64_t>> dims = KnownInts(input(0));
    if (!dims) return std::nullopt;
    int64_t count = 1;
    for (int64_t d : *dims) count *= d;
    if (count < 0 || count > kMaxDataElements) return std::nullopt;
    int64_t fill = 0;
    if (const Attribute* a = n.attr("value"); a && a->kind == Attribute::Kind::kTensor && a->t.numel() == 1)
      fill = a->t.ToInt64Vector()[0];
    return SymInts(count, SymInt{fill, ""});
  }
  return std::nullopt;
}

}  // namespace

absl::Status InferShapes(Graph& g, ShapeData* data_out) {
  // Values of Constant nodes are known; everything else only by shape.
  std::map<const Value*, const Tensor*> known;
  std::deque<Tensor> owned;  // values of Constant nodes given by value_int(s)/value_float(s)
  ShapeData data;
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
        if (auto dt = data.find(v); dt != data.end() && t.value == nullptr) t.data = &dt->second;
      }
      ins.push_back(std::move(t));
    }
    std::vector<TypeInfo> outs;
    if (absl::Status s = InferNode(n, g.opset(n.domain()), ins, &outs); !s.ok()) {
      // Rules that return a helper's error (BroadcastShapes, MatMulShape) do not name the node.
      if (absl::StartsWith(s.message(), "node '")) return s;
      return absl::Status(s.code(), absl::StrCat("node '", n.name(), "' (", n.op_type(), "): ",
                                                 s.message()));
    }
    for (size_t i = 0; i < n.num_outputs() && i < outs.size(); ++i)
      if (Value* v = n.output(i)) Merge(outs[i], v);
    if (n.num_outputs() == 1 && n.output(0) != nullptr) {
      TypeInfo o = outs.empty() ? TypeInfo() : outs[0];
      o.dtype = n.output(0)->dtype;
      o.shape = n.output(0)->shape;
      if (std::optional<SymInts> d = PropagateData(n, g.opset(n.domain()), ins, o)) {
        // Only a plausible element count is kept (a 1-D tensor's known length must match).
        const Shape& s = n.output(0)->shape;
        bool fits = !s.rank_known || (s.rank() == 0 && d->size() == 1) ||
                    (s.rank() == 1 && (!s.dims[0].known() || s.dims[0].value == static_cast<int64_t>(d->size())));
        if (fits) data[n.output(0)] = std::move(*d);
      }
    }
    if (n.op_type() == "Constant" && n.domain().empty() && n.output(0)) {
      if (const Attribute* a = n.attr("value"); a && a->kind == Attribute::Kind::kTensor) {
        known[n.output(0)] = &a->t;
      } else if (std::optional<Tensor> t = ConstantNodeValue(n)) {
        owned.push_back(std::move(*t));
        known[n.output(0)] = &owned.back();
      }
    }
  }
  if (data_out != nullptr) *data_out = std::move(data);
  return absl::OkStatus();
}

std::optional<Tensor> ConstantNodeValue(const Node& n) {
  if (n.op_type() != "Constant" || !n.domain().empty()) return std::nullopt;
  if (const Attribute* a = n.attr("value"); a && a->kind == Attribute::Kind::kTensor) return a->t;
  if (const Attribute* a = n.attr("value_float")) return Tensor::Scalar(a->f);
  if (const Attribute* a = n.attr("value_int")) return Tensor::ScalarI64(a->i);
  if (const Attribute* a = n.attr("value_floats"))
    return Tensor::FromVector<float>(DType::kF32, {static_cast<int64_t>(a->floats.size())}, a->floats);
  if (const Attribute* a = n.attr("value_ints"))
    return Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(a->ints.size())}, a->ints);
  return std::nullopt;
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
