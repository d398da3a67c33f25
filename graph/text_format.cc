// See text_format.h.
#include "graph/text_format.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mixtrain {
namespace {

std::string TypeString(const Value& v) {
  return absl::StrCat(DTypeName(v.dtype), v.shape.ToString());
}

std::string ValueList(const std::vector<Value*>& vs) {
  std::vector<std::string> parts;
  for (const Value* v : vs)
    parts.push_back(v ? absl::StrCat(v->name, ": ", TypeString(*v)) : std::string("<none>"));
  return absl::StrJoin(parts, ", ");
}

std::string OpName(const Node& n) {
  return n.domain().empty() ? n.op_type() : absl::StrCat(n.domain(), ".", n.op_type());
}

// DOT double-quoted string contents.
std::string Quote(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

struct Style {
  const char* label;
  const char* color;
};
// Colour-blind-friendly fills: blue fp32, orange fp16, green bf16, grey everything else.
constexpr Style kF32{"fp32", "#9ecae1"}, kF16{"fp16", "#fdae6b"}, kBF16{"bf16", "#a1d99b"},
    kOther{"other", "#d9d9d9"};

const Style& StyleFor(DType t) {
  switch (t) {
    case DType::kF32: return kF32;
    case DType::kF16: return kF16;
    case DType::kBF16: return kBF16;
    default: return kOther;
  }
}

bool IsCast(const Node& n) {
  return n.domain().empty() && (n.op_type() == "Cast" || n.op_type() == "CastLike");
}

// Fill colours of the precision debugger's risks (ColorBrewer-like, distinct from the dtypes').
const char* RiskColor(const std::string& risk) {
  if (risk == "non-finite") return "#d62728";
  if (risk == "overflow") return "#ff7f0e";
  if (risk == "near-overflow") return "#ffd92f";
  if (risk == "underflow") return "#6baed6";
  return "#cccccc";
}

}  // namespace

DType ComputeDType(const Node& n) {
  auto it = n.annotations().find("precision");
  if (it != n.annotations().end()) {
    absl::StatusOr<DType> t = ParseDType(it->second);
    if (t.ok()) return *t;
  }
  for (const Value* v : n.outputs())
    if (v && IsFloat(v->dtype)) return v->dtype;
  return DType::kUndefined;
}

std::string GraphToText(const Graph& g) {
  std::string out = absl::StrCat("graph '", g.name, "'  opset ", g.opset(""), "\n");
  absl::StrAppend(&out, "inputs:  ", ValueList(g.inputs()), "\n");
  absl::StrAppend(&out, "outputs: ", ValueList(g.outputs()), "\n\n");
  std::map<std::string, int> by_op;
  for (const auto& n : g.nodes()) {
    std::vector<Value*> ins;
    // Initializer inputs are listed too: a weight's dtype matters as much as an activation's.
    for (Value* v : n->inputs()) ins.push_back(v);
    absl::StrAppend(&out, n->name(), ": ", OpName(*n), "(", ValueList(ins), ") -> (",
                    ValueList(n->outputs()), ")");
    for (const auto& [k, v] : n->annotations()) absl::StrAppend(&out, " [", k, "=", v, "]");
    out += "\n";
    ++by_op[OpName(*n)];
  }
  absl::StrAppend(&out, "\nsummary: ", g.num_nodes(), " nodes\n");
  for (const auto& [op, count] : by_op) absl::StrAppend(&out, "  ", op, ": ", count, "\n");
  std::map<std::string, std::pair<int64_t, int64_t>> params;  // dtype -> (elements, bytes)
  int64_t total_elems = 0, total_bytes = 0;
  for (const Value* v : g.initializers()) {
    auto& p = params[DTypeName(v->dtype)];
    p.first += v->initializer->numel();
    p.second += static_cast<int64_t>(v->initializer->nbytes());
    total_elems += v->initializer->numel();
    total_bytes += static_cast<int64_t>(v->initializer->nbytes());
  }
  absl::StrAppend(&out, "parameters: ", total_elems, " (", total_bytes, " bytes) in ",
                  g.initializers().size(), " initializers\n");
  for (const auto& [dt, p] : params)
    absl::StrAppend(&out, "  ", dt, ": ", p.first, " (", p.second, " bytes)\n");
  return out;
}

std::string GraphToDot(const Graph& g) {
  std::string out = "digraph mixtrain {\n  rankdir=TB;\n  node [style=filled, fontsize=10];\n"
                    "  edge [fontsize=8];\n";
  // Graph inputs and outputs are drawn as plain ellipses; initializers are not drawn (a big
  // model has hundreds) but appear in the consuming node's input count.
  std::map<const Value*, std::string> source;  // value -> DOT id of what produces it
  int k = 0;
  for (const Value* v : g.inputs()) {
    if (v->is_initializer()) continue;
    std::string id = absl::StrCat("in", k++);
    source[v] = id;
    absl::StrAppend(&out, "  ", id, " [shape=ellipse, fillcolor=white, label=\"", Quote(v->name),
                    "\\n", Quote(TypeString(*v)), "\"];\n");
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = *g.nodes()[i];
    std::string id = absl::StrCat("n", i);
    const Style& s = StyleFor(ComputeDType(n));
    if (auto risk = n.annotations().find("risk"); risk != n.annotations().end()) {
      // Measured by the precision debugger (`dump --stats`): filled by risk, the reason below.
      const std::string word = risk->second.substr(0, risk->second.find(':'));
      absl::StrAppend(&out, "  ", id, " [shape=", IsCast(n) ? "diamond" : "box", ", penwidth=3, fillcolor=\"",
                      RiskColor(word), "\", label=\"", Quote(n.name()), "\\n", Quote(OpName(n)), " (", s.label,
                      ")\\n", Quote(risk->second.substr(0, 120)), "\"];\n");
    } else if (IsCast(n)) {
      absl::StrAppend(&out, "  ", id, " [shape=diamond, penwidth=3, color=\"#d62728\", fillcolor=\"",
                      s.color, "\", label=\"", Quote(n.name()), "\\n", Quote(OpName(n)), " to ",
                      s.label, "\"];\n");
    } else {
      absl::StrAppend(&out, "  ", id, " [shape=box, fillcolor=\"", s.color, "\", label=\"",
                      Quote(n.name()), "\\n", Quote(OpName(n)), "\"];\n");
    }
    for (const Value* v : n.outputs())
      if (v) source[v] = id;
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    for (const Value* v : g.nodes()[i]->inputs()) {
      if (!v) continue;
      auto it = source.find(v);
      if (it == source.end()) continue;  // initializer
      absl::StrAppend(&out, "  ", it->second, " -> n", i, " [label=\"", Quote(TypeString(*v)),
                      "\"];\n");
    }
  }
  k = 0;
  for (const Value* v : g.outputs()) {
    std::string id = absl::StrCat("out", k++);
    absl::StrAppend(&out, "  ", id, " [shape=ellipse, fillcolor=white, label=\"", Quote(v->name),
                    "\\n", Quote(TypeString(*v)), "\"];\n");
    auto it = source.find(v);
    if (it != source.end()) absl::StrAppend(&out, "  ", it->second, " -> ", id, ";\n");
  }
  out += "  subgraph cluster_legend {\n    label=\"compute dtype\";\n    fontsize=10;\n";
  for (const Style* s : {&kF32, &kF16, &kBF16, &kOther})
    absl::StrAppend(&out, "    legend_", s->label, " [shape=box, fillcolor=\"", s->color,
                    "\", label=\"", s->label, "\"];\n");
  out += "    legend_cast [shape=diamond, penwidth=3, color=\"#d62728\", fillcolor=white, "
         "label=\"Cast\"];\n  }\n";
  bool marked = false;
  for (const auto& n : g.nodes()) marked |= n->annotations().contains("risk");
  if (marked) {
    out += "  subgraph cluster_risk {\n    label=\"measured risk (dump --stats)\";\n    fontsize=10;\n";
    for (const char* r : {"non-finite", "overflow", "near-overflow", "underflow"})
      absl::StrAppend(&out, "    \"risk_", r, "\" [shape=box, penwidth=3, fillcolor=\"", RiskColor(r), "\", label=\"", r,
                      "\"];\n");
    out += "  }\n";
  }
  out += "}\n";
  return out;
}

}  // namespace mixtrain
