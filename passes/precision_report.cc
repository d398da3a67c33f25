// The precision report `mixtrain dump` prints after the precision pass: nodes and FLOPs by the
// dtype they compute in, and the casts the pass inserted.
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "passes/precision.h"

namespace mixtrain {
namespace {

// Dims as numbers, symbolic ones counted as 1 (so FLOPs are per unit of each symbol: per sample
// for a symbolic batch).
double Numel(const Value* v) {
  if (!v || !v->shape.rank_known) return 0;
  double n = 1;
  for (const Dim& d : v->shape.dims) n *= d.known() ? static_cast<double>(d.value) : 1.0;
  return n;
}

double Dim0(const Value* v, int64_t i) {
  if (!v || !v->shape.rank_known || i >= v->shape.rank()) return 1;
  int64_t k = i < 0 ? v->shape.rank() + i : i;
  const Dim& d = v->shape.dims[k];
  return d.known() ? static_cast<double>(d.value) : 1.0;
}

// Multiply-adds count as 2 FLOPs; elementwise ops as 1 per output element.
double Flops(const Node& n) {
  const std::string& op = n.op_type();
  const Value* y = n.output(0);
  if (op == "Conv" || op == "ConvTranspose") {
    const Value* w = n.input(1);
    if (!w || !w->shape.rank_known) return 0;
    double per_out = 1;  // C_in/group * kernel
    for (int64_t i = 1; i < w->shape.rank(); ++i) per_out *= Dim0(w, i);
    const Value* big = op == "Conv" ? y : n.input(0);
    return 2.0 * Numel(big) * per_out;
  }
  if (op == "MatMul" || op == "Gemm") {
    const Value* a = n.input(0);
    double k = op == "Gemm" && n.attr_int("transA", 0) ? Dim0(a, 0) : Dim0(a, -1);
    return 2.0 * Numel(y) * k;
  }
  if (op == "FusedMatMul") {  // K is A's last dim after perm_a
    const Value* a = n.input(0);
    const std::vector<int64_t> perm = n.has_attr("perm_a") ? n.attr_ints("perm_a") : std::vector<int64_t>{};
    return 2.0 * Numel(y) * Dim0(a, perm.empty() ? -1 : perm.back());
  }
  return Numel(y);
}

}  // namespace

std::string PrecisionReportText(const Graph& g) {
  std::map<std::string, int> nodes;
  std::map<std::string, double> flops;
  int casts = 0;
  double total = 0;
  for (const auto& up : g.nodes()) {
    const Node& n = *up;
    auto it = n.annotations().find("precision");
    if (n.op_type() == "Cast" && n.annotations().contains("inserted_by")) {
      ++casts;  // counted apart: casts move bytes, they are not the model's compute
      continue;
    }
    if (it == n.annotations().end()) continue;
    ++nodes[it->second];
    double f = Flops(n);
    flops[it->second] += f;
    total += f;
  }
  std::string out = "precision report:\n  nodes by compute dtype:";
  for (const auto& [t, c] : nodes) absl::StrAppend(&out, " ", t, "=", c);
  out += "\n  FLOPs by compute dtype (per unit of symbolic dims):";
  for (const auto& [t, f] : flops)
    absl::StrAppend(&out, absl::StrFormat(" %s=%.3g (%.1f%%)", t, f, total > 0 ? 100 * f / total : 0));
  absl::StrAppend(&out, "\n  casts inserted: ", casts, "\n");
  return out;
}

}  // namespace mixtrain
