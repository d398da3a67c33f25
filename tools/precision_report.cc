#include "tools/precision_report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mixtrain/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/cli.h"

namespace mixtrain::cli {
namespace {

using nlohmann::json;

double MaxFinite(const std::string& dtype) {
  if (dtype == "fp16") return 65504.0;
  if (dtype == "bf16") return 3.38953139e38;
  return 3.40282347e38;
}

bool IsLow(const ValueStats& v) { return v.dtype == "fp16" || v.dtype == "bf16"; }

double Pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

std::string Head(const ValueStats& v) {
  std::string where = v.node.empty() ? "batch input" : absl::StrCat("node '", v.node, "' (", v.op_type, ", ", v.dtype,
                                                                    v.cast_input ? " cast" : "", ", ", v.phase, ")");
  return absl::StrCat("'", v.value, "' from ", where);
}

// The forward node a value's producer belongs to: autodiff names gradient nodes "<node>/grad/...".
std::string ForwardNode(const std::string& node) {
  size_t at = node.find("/grad");
  return at == std::string::npos ? node : node.substr(0, at);
}

std::string RegexQuote(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

json ValueToJson(const ValueStats& v) {
  return json{{"value", v.value},         {"node", v.node},       {"op_type", v.op_type},
              {"phase", v.phase},         {"dtype", v.dtype},     {"cast_input", v.cast_input},
              {"inputs", v.inputs},       {"consumers", v.consumers}, {"elements", v.elements},
              {"max_abs", v.max_abs},     {"nan", v.nan},         {"inf", v.inf},
              {"overflow", v.overflow},   {"underflow", v.underflow}, {"subnormal", v.subnormal},
              {"zero", v.zero},           {"risk", RiskName(RiskOf(v))}};
}

absl::StatusOr<ValueStats> ValueFromJson(const json& j, const std::string& where) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not an object"));
  ValueStats v;
  try {
    v.value = j.at("value").get<std::string>();
    v.node = j.at("node").get<std::string>();
    v.op_type = j.at("op_type").get<std::string>();
    v.phase = j.at("phase").get<std::string>();
    v.dtype = j.at("dtype").get<std::string>();
    v.cast_input = j.at("cast_input").get<bool>();
    v.inputs = j.at("inputs").get<std::vector<std::string>>();
    v.consumers = j.at("consumers").get<std::vector<std::string>>();
    v.elements = j.at("elements").get<int64_t>();
    v.max_abs = j.at("max_abs").is_null() ? NAN : j.at("max_abs").get<float>();
    v.nan = j.at("nan").get<int64_t>();
    v.inf = j.at("inf").get<int64_t>();
    v.overflow = j.at("overflow").get<int64_t>();
    v.underflow = j.at("underflow").get<int64_t>();
    v.subnormal = j.at("subnormal").get<int64_t>();
    v.zero = j.at("zero").get<int64_t>();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.what()));
  }
  if (v.elements < 0 || v.nan < 0 || v.inf < 0 || v.overflow < 0 || v.underflow < 0 || v.subnormal < 0 || v.zero < 0)
    return absl::InvalidArgumentError(absl::StrCat(where, ": negative count"));
  return v;
}

}  // namespace

const char* RiskName(Risk r) {
  switch (r) {
    case Risk::kNonFinite: return "non-finite";
    case Risk::kOverflow: return "overflow";
    case Risk::kNearOverflow: return "near-overflow";
    case Risk::kUnderflow: return "underflow";
    case Risk::kOk: return "ok";
  }
  return "?";
}

Risk RiskOf(const ValueStats& v) {
  if (v.nan + v.inf > 0) return Risk::kNonFinite;
  if (!IsLow(v)) return Risk::kOk;
  if (v.overflow > 0) return Risk::kOverflow;
  if (v.max_abs >= MaxFinite(v.dtype) / 16) return Risk::kNearOverflow;
  const int64_t nonzero = v.elements - v.zero;
  if (nonzero > 0 && v.underflow + v.subnormal >= 0.01 * nonzero) return Risk::kUnderflow;
  return Risk::kOk;
}

std::string DescribeNonFinite(const NonFiniteReport& r) {
  const ValueStats& v = r.value;
  std::string what;
  if (v.nan + v.inf > 0) what = absl::StrCat(v.inf, " inf and ", v.nan, " NaN of ", v.elements);
  if (v.overflow > 0)
    absl::StrAppend(&what, what.empty() ? "" : ", ", v.overflow, " of ", v.elements, " beyond ", v.dtype,
                    "'s range (they become inf)");
  std::vector<std::string> ins;
  for (const ValueStats& in : r.inputs)
    ins.push_back(absl::StrFormat("'%s' %s max|x| %.3g%s", in.value, in.dtype, in.max_abs,
                                  in.nan + in.inf > 0 ? absl::StrCat(" (", in.nan + in.inf, " non-finite)") : ""));
  return absl::StrCat("step ", r.step, " skipped: the first non-finite value is ", Head(v), ": ", what,
                      absl::StrFormat(", largest finite |x| %.3g", v.max_abs),
                      ins.empty() ? "" : absl::StrCat("; inputs: ", absl::StrJoin(ins, ", ")));
}

void PrintPrecisionSummary(const PrecisionStatistics& s, std::FILE* out, size_t max_rows) {
  std::vector<const ValueStats*> rows;
  for (const ValueStats& v : s.values)
    if (IsLow(v) || RiskOf(v) != Risk::kOk) rows.push_back(&v);
  std::stable_sort(rows.begin(), rows.end(), [](const ValueStats* a, const ValueStats* b) {
    Risk ra = RiskOf(*a), rb = RiskOf(*b);
    if (ra != rb) return ra < rb;
    return a->max_abs / MaxFinite(a->dtype) > b->max_abs / MaxFinite(b->dtype);
  });
  std::fprintf(out, "precision: %lld steps measured, %lld skipped steps diagnosed, %zu values watched (%zu in low precision)\n",
               static_cast<long long>(s.steps), static_cast<long long>(s.skipped_steps), s.values.size(),
               static_cast<size_t>(std::count_if(s.values.begin(), s.values.end(),
                                                 [](const ValueStats& v) { return IsLow(v); })));
  if (rows.empty()) return;
  std::fprintf(out, "%-13s %-36s %-18s %-8s %-5s %10s %7s %7s %7s %7s %7s\n", "risk", "value", "op", "phase",
               "dtype", "max|x|", "inf/nan", "ovfl%", "flush%", "subn%", "zero%");
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const ValueStats& v = *rows[i];
    std::string name = v.value.size() > 36 ? "..." + v.value.substr(v.value.size() - 33) : v.value;
    std::string op = v.cast_input ? "Cast (its input)" : v.op_type;
    std::fprintf(out, "%-13s %-36s %-18s %-8s %-5s %10.3g %7lld %7.2f %7.2f %7.2f %7.2f\n", RiskName(RiskOf(v)),
                 name.c_str(), op.substr(0, 18).c_str(), v.phase.c_str(), v.dtype.c_str(), v.max_abs,
                 static_cast<long long>(v.nan + v.inf), Pct(v.overflow, v.elements), Pct(v.underflow, v.elements),
                 Pct(v.subnormal, v.elements), Pct(v.zero, v.elements));
  }
  if (rows.size() > max_rows) std::fprintf(out, "... %zu more in the statistics file\n", rows.size() - max_rows);
}

std::string PrecisionStatsToJson(const PrecisionStatistics& s, const std::string& model, const std::string& low_dtype) {
  json j{{"format", "mixtrain-precision-stats"}, {"version", 1}, {"model", model}, {"low_dtype", low_dtype},
         {"steps", s.steps}, {"skipped_steps", s.skipped_steps}};
  json values = json::array();
  for (const ValueStats& v : s.values) values.push_back(ValueToJson(v));
  j["values"] = std::move(values);
  json skipped = json::array();
  for (const NonFiniteReport& r : s.skipped) {
    json ins = json::array();
    for (const ValueStats& v : r.inputs) ins.push_back(ValueToJson(v));
    skipped.push_back(json{{"step", r.step}, {"value", ValueToJson(r.value)}, {"inputs", std::move(ins)}});
  }
  j["skipped"] = std::move(skipped);
  return j.dump(1) + "\n";
}

absl::StatusOr<PrecisionStatsFile> ReadPrecisionStats(const std::string& path) {
  MIXTRAIN_ASSIGN_OR_RETURN(std::string text, ReadInputFile("--stats", path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  if (!j.is_object() || j.value("format", "") != "mixtrain-precision-stats")
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a precision statistics file (written by mixtrain train --debug-precision-out)"));
  if (j.value("version", 0) != 1)
    return absl::InvalidArgumentError(absl::StrCat(path, ": statistics format version ", j.value("version", 0),
                                                   ", this mixtrain reads version 1"));
  PrecisionStatsFile f;
  try {
    f.model = j.at("model").get<std::string>();
    f.low_dtype = j.at("low_dtype").get<std::string>();
    f.stats.steps = j.at("steps").get<int64_t>();
    f.stats.skipped_steps = j.at("skipped_steps").get<int64_t>();
    const json& values = j.at("values");
    if (!values.is_array()) return absl::InvalidArgumentError(absl::StrCat(path, ": 'values' is not an array"));
    for (size_t i = 0; i < values.size(); ++i) {
      MIXTRAIN_ASSIGN_OR_RETURN(ValueStats v, ValueFromJson(values[i], absl::StrCat(path, ": values[", i, "]")));
      f.stats.values.push_back(std::move(v));
    }
    const json& skipped = j.at("skipped");
    if (!skipped.is_array()) return absl::InvalidArgumentError(absl::StrCat(path, ": 'skipped' is not an array"));
    for (size_t i = 0; i < skipped.size(); ++i) {
      const std::string where = absl::StrCat(path, ": skipped[", i, "]");
      NonFiniteReport r;
      r.step = skipped[i].at("step").get<int64_t>();
      MIXTRAIN_ASSIGN_OR_RETURN(r.value, ValueFromJson(skipped[i].at("value"), where + ".value"));
      for (const json& in : skipped[i].at("inputs")) {
        MIXTRAIN_ASSIGN_OR_RETURN(ValueStats v, ValueFromJson(in, where + ".inputs"));
        r.inputs.push_back(std::move(v));
      }
      f.stats.skipped.push_back(std::move(r));
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return f;
}

std::map<std::string, std::string> NodeRisks(const PrecisionStatsFile& f) {
  std::map<std::string, std::pair<Risk, std::string>> worst;
  auto mark = [&](const std::string& node, Risk r, std::string why) {
    if (node.empty() || r == Risk::kOk) return;
    auto it = worst.find(node);
    if (it == worst.end() || r < it->second.first) worst[node] = {r, std::move(why)};
  };
  std::map<std::string, int64_t> origin_steps;  // node -> skipped steps it started
  for (const NonFiniteReport& r : f.stats.skipped) ++origin_steps[r.value.node];
  for (const ValueStats& v : f.stats.values) {
    const Risk r = RiskOf(v);
    std::string why;
    switch (r) {
      case Risk::kNonFinite:
        why = origin_steps.contains(v.node)
                  ? absl::StrCat("first non-finite value of ", origin_steps[v.node], " skipped steps")
                  : absl::StrCat(v.nan + v.inf, " inf/NaN values (downstream of the first)");
        break;
      case Risk::kOverflow:
        why = absl::StrFormat("%.2f%% of '%s' overflow %s", Pct(v.overflow, v.elements), v.value, v.dtype);
        break;
      case Risk::kNearOverflow:
        why = absl::StrFormat("max |x| %.3g in %s", v.max_abs, v.dtype);
        break;
      case Risk::kUnderflow:
        why = absl::StrFormat("%.2f%% flushed, %.2f%% subnormal in %s", Pct(v.underflow, v.elements),
                              Pct(v.subnormal, v.elements), v.dtype);
        break;
      case Risk::kOk: break;
    }
    mark(v.node, r, why);
  }
  for (const auto& [node, o] : origin_steps)  // a Cast's overflow counts as non-finite there
    mark(node, Risk::kNonFinite, absl::StrCat("first non-finite value of ", o, " skipped steps"));
  std::map<std::string, std::string> out;
  for (const auto& [node, w] : worst) out[node] = absl::StrCat(RiskName(w.first), ": ", w.second);
  return out;
}

std::string SuggestPolicy(const PrecisionStatsFile& f, bool* all_fp32) {
  // node -> (op type, reasons). Nodes that cause trouble: the origins of skipped steps (the first
  // non-finite value, not everything downstream of it), values a Cast overflowed, values near
  // their dtype's largest finite number. A Cast's value is fixed by running its readers in fp32.
  std::map<std::string, std::pair<std::string, std::set<std::string>>> pin;
  std::vector<std::string> notes;
  std::map<std::string, std::string> op_of;
  for (const ValueStats& v : f.stats.values)
    if (!v.node.empty()) op_of.try_emplace(ForwardNode(v.node), v.op_type);  // the forward node's own op comes first
  auto add = [&](const ValueStats& v, const std::string& reason) {
    std::vector<std::string> nodes;
    if (v.cast_input) {
      for (const std::string& c : v.consumers) nodes.push_back(ForwardNode(c));
    } else if (!v.node.empty()) {
      nodes.push_back(ForwardNode(v.node));
    }
    for (const std::string& n : nodes) {
      if (n.rfind("loss/", 0) == 0 || n.rfind("loss_scale/", 0) == 0) continue;  // the loss is fp32 already
      auto& e = pin[n];
      e.first = op_of.contains(n) ? op_of[n] : v.op_type;
      e.second.insert(reason);
    }
  };
  std::map<std::string, std::pair<const ValueStats*, int64_t>> origins;  // value -> (stats, steps)
  for (const NonFiniteReport& r : f.stats.skipped) {
    auto& o = origins[r.value.value];
    o.first = &r.value;
    ++o.second;
  }
  for (const auto& [name, o] : origins) {
    const ValueStats& v = *o.first;
    if (!IsLow(v) && !v.cast_input) {
      notes.push_back(absl::StrCat("'", name, "' (", v.op_type, ", fp32) went non-finite in fp32 in ", o.second,
                                   " skipped steps: not a precision problem; check the data, --lr, --loss-scale"));
      continue;
    }
    add(v, absl::StrCat("first non-finite value of ", o.second, " skipped step", o.second == 1 ? "" : "s", " ('",
                        name, "', ", v.dtype, v.phase == "backward" ? ", its gradient" : "", ")"));
  }
  bool underflow = false;
  for (const ValueStats& v : f.stats.values) {
    Risk r = RiskOf(v);
    if (r == Risk::kOverflow)
      add(v, absl::StrFormat("%.2f%% of '%s' overflow %s", Pct(v.overflow, v.elements), v.value, v.dtype));
    else if (r == Risk::kNearOverflow)
      add(v, absl::StrFormat("'%s' reaches |x| = %.3g, within 16x of %s's largest (%.5g)", v.value, v.max_abs,
                             v.dtype, MaxFinite(v.dtype)));
    underflow |= r == Risk::kUnderflow;
  }
  std::string out = absl::StrCat("# Suggested by mixtrain suggest-policy from ", f.stats.steps, " measured steps of ",
                                 f.model, " (", f.stats.skipped_steps, " skipped).\n");
  absl::StrAppend(&out, "# Use: mixtrain train ", f.model, " --policy=THIS_FILE\n");
  absl::StrAppend(&out, "low_dtype: ", f.low_dtype == "fp16" ? "FP16" : f.low_dtype == "bf16" ? "BF16" : "AUTO", "\n");
  for (const std::string& n : notes) absl::StrAppend(&out, "# ", n, "\n");
  std::map<std::string, std::vector<std::string>> by_op;
  for (const auto& [node, e] : pin) by_op[e.first].push_back(node);
  for (const auto& [op, nodes] : by_op) {
    if (nodes.size() >= 3) {
      absl::StrAppend(&out, "# ", nodes.size(), " ", op, " nodes are at risk (", absl::StrJoin(nodes, ", "), ")\n");
      absl::StrAppend(&out, "deny: \"", op, "\"\n");
      continue;
    }
    for (const std::string& n : nodes) {
      absl::StrAppend(&out, "# ", n, " (", op, "): ", absl::StrJoin(pin[n].second, "; "), "\n");
      absl::StrAppend(&out, "fp32_nodes: \"^", RegexQuote(n), "$\"\n");
    }
  }
  if (pin.empty()) absl::StrAppend(&out, "# Nothing overflowed or came near it: no op needs to move to fp32.\n");
  if (underflow)
    absl::StrAppend(&out, "# Some low-precision values flush to zero or are subnormal: keep dynamic loss scaling on "
                          "(--loss-scale=dynamic, the default for fp16).\n");
  // Every matrix product and convolution that computed in the low type (where AMP's speed comes
  // from; the elementwise ops around them follow their inputs), pinned or of a denied op: the
  // policy turns AMP off. Said plainly, since `train --policy` would still report "precision amp".
  static const std::set<std::string> kHeavy = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"};
  std::set<std::string> low_nodes;
  for (const ValueStats& v : f.stats.values)
    if (IsLow(v) && !v.cast_input && kHeavy.contains(v.op_type) && v.phase == "forward")
      low_nodes.insert(ForwardNode(v.node));
  const bool none_left = !low_nodes.empty() && std::all_of(low_nodes.begin(), low_nodes.end(), [&](const std::string& n) {
    return pin.contains(n) || (op_of.contains(n) && by_op.contains(op_of[n]) && by_op[op_of[n]].size() >= 3);
  });
  if (none_left)
    absl::StrAppend(&out, "# NOTE: this moves all ", low_nodes.size(), " matrix products and convolutions that computed in ", f.low_dtype,
                    " to fp32, so AMP is then off (the step runs in fp32). For fp16, try bf16 (--dtype=bf16) or "
                    "dynamic loss scaling (--loss-scale=dynamic) first.\n");
  if (all_fp32) *all_fp32 = none_left;
  return out;
}

}  // namespace mixtrain::cli
