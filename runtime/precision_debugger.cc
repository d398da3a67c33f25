#include "runtime/precision_debugger.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace mixtrain {

StatsAccumulator MeasureOnHost(const Tensor& t, DType range) {
  const StatsRange r = StatsRangeOf(range);
  StatsAccumulator a;
  a.elements = t.numel();
  for (int64_t i = 0; i < t.numel(); ++i) a.Add(static_cast<float>(t.GetDouble(i)), r);
  return a;
}

absl::StatusOr<std::unique_ptr<PrecisionDebugger>> PrecisionDebugger::Create(const Graph& step) {
  const Value* out = step.FindValue(kPrecisionStatsName);
  if (out == nullptr || out->producer == nullptr)
    return absl::FailedPreconditionError("the training step has no precision statistics (debug_precision is 0)");
  absl::flat_hash_map<std::string, const Node*> nodes;
  for (const auto& n : step.nodes()) nodes[n->name()] = n.get();
  std::unique_ptr<PrecisionDebugger> d(new PrecisionDebugger());
  for (const Value* row : out->producer->inputs()) {
    MT_CHECK(row != nullptr && row->producer != nullptr && row->producer->op_type() == "PrecisionStats")
        << "precision_stats is a Concat of PrecisionStats rows";
    const Node& s = *row->producer;
    PrecisionValue v;
    v.value = s.attr_string("value", "");
    v.node = s.attr_string("node", "");
    v.cast_input = s.attr_int("cast_input", 0) != 0;
    absl::StatusOr<DType> dt = FromOnnxType(static_cast<int32_t>(s.attr_int("to", 1)));
    MT_CHECK(dt.ok()) << "PrecisionStats 'to' is a dtype";
    v.dtype = *dt;
    if (auto it = nodes.find(v.node); it != nodes.end()) {
      const Node& p = *it->second;
      v.op_type = p.op_type();
      v.phase = PhaseOf(p);
      for (const Value* in : p.inputs()) v.inputs.push_back(in == nullptr ? "" : in->name);
    }
    if (const Value* watched = step.FindValue(v.value); watched != nullptr)
      for (const Node* c : watched->consumers)
        if (PhaseOf(*c) != StepPhase::kDebug &&
            std::find(v.consumers.begin(), v.consumers.end(), c->name()) == v.consumers.end())
          v.consumers.push_back(c->name());
    d->row_of_value_[v.value] = d->watched_.size();
    d->watched_.push_back(std::move(v));
  }
  for (const Value* v : step.initializers()) d->initializers_[v->name] = v;
  d->summary_.values = d->watched_;
  return d;
}

absl::StatusOr<std::optional<PrecisionDiagnosis>> PrecisionDebugger::Record(const Tensor& rows, int64_t step,
                                                                            bool skipped,
                                                                            const InitializerFn& initializer) {
  const size_t k = watched_.size();
  if (rows.dtype() != DType::kF32 || rows.numel() != static_cast<int64_t>(k * kNumStatFields))
    return absl::InternalError(absl::StrCat("precision_stats holds ", rows.numel(), " numbers, expected ",
                                            k * kNumStatFields));
  PrecisionReport now;
  now.steps = 1;
  now.values = watched_;
  const float* data = rows.data_as<float>();
  for (size_t i = 0; i < k; ++i) {
    now.values[i].stats = StatsAccumulator::FromRow(data + i * kNumStatFields);
    summary_.values[i].stats.Merge(now.values[i].stats);
  }
  ++summary_.steps;

  std::optional<PrecisionDiagnosis> diagnosis;
  if (skipped) {
    ++summary_.skipped_steps;
    for (size_t i = 0; i < k && !diagnosis; ++i) {
      if (now.values[i].stats.finite()) continue;
      PrecisionDiagnosis d;
      d.step = step;
      d.value = now.values[i];
      // A Cast row measured the Cast's input: that input's own producer is what to look at.
      for (const std::string& in : d.value.inputs) {
        if (in.empty()) continue;
        if (auto r = row_of_value_.find(in); r != row_of_value_.end()) {
          d.inputs.push_back(now.values[r->second]);
        } else if (auto w = initializers_.find(in); w != initializers_.end() && IsFloat(w->second->dtype)) {
          MT_ASSIGN_OR_RETURN(Tensor t, initializer(in));
          PrecisionValue pv;
          pv.value = in;
          pv.op_type = "initializer";
          pv.dtype = t.dtype();
          pv.stats = MeasureOnHost(t, t.dtype());
          d.inputs.push_back(std::move(pv));
        }
      }
      diagnosis = std::move(d);
    }
    if (diagnosis && summary_.skipped.size() < kMaxDiagnoses) summary_.skipped.push_back(*diagnosis);
    if (diagnosis) now.skipped.push_back(*diagnosis);
    now.skipped_steps = 1;
  }
  last_ = std::move(now);
  return diagnosis;
}

}  // namespace mixtrain
