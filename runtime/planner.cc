#include "runtime/planner.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/shape_inference.h"
#include "kernels/host_evaluator.h"
#include "runtime/arena.h"

namespace mixtrain {
namespace {

bool IsDefaultDomain(const Node& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

// Views (zero-copy, never executed), in-place candidates and random ops: the op table's traits.
// Output element i depends only on element i of input 0 (other inputs broadcast into it), so the
// output may overwrite input 0 when it dies there.
// The input whose dying buffer the node's output may take over, or -1.
int OverwritableInput(const Node& n) {
  if (HasOpTraits(n, kOpOverwritesInput0)) return 0;
  if (HasOpTraits(n, kOpOverwritesInput1)) return 1;
  return -1;
}
bool IsRandom(const Node& n) { return HasOpTraits(n, kOpRandom); }

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

// Ops whose outputs depend on their inputs' dims only: always computed at plan time.
bool ReadsOnlyDims(const Node& n) { return IsDefaultDomain(n) && HasOpTraits(n, kOpReadsOnlyDims); }

TensorView ViewOf(const Tensor& t) { return {t.dtype(), t.dims(), const_cast<void*>(t.data())}; }

std::vector<DType> DTypesOf(const std::vector<TypeInfo>& t) {
  std::vector<DType> d;
  for (const TypeInfo& x : t) d.push_back(x.present ? x.dtype : DType::kUndefined);
  return d;
}

class Planner {
 public:
  Planner(const Graph& g, const PlanRequest& r) : g_(g), req_(r), plan_(new ExecutionPlan) {}

  absl::StatusOr<std::unique_ptr<ExecutionPlan>> Build(std::vector<int>* wants_values) {
    MT_RETURN_IF_ERROR(MarkNeeded());
    MT_RETURN_IF_ERROR(AddSources());
    for (const auto& up : g_.nodes()) {
      if (!needed_nodes_.contains(up.get())) continue;
      MT_RETURN_IF_ERROR(PlanNode(*up, wants_values));
    }
    if (!missing_.empty()) return MissingKernelsError();
    MT_RETURN_IF_ERROR(ResolveFetchesAndState());
    AssignMemory();
    return std::move(plan_);
  }

 private:
  // Only nodes that feed a fetch or a state update run.
  absl::Status MarkNeeded() {
    std::vector<const Value*> work;
    for (const std::string& f : req_.fetches) {
      const Value* v = g_.FindValue(f);
      if (v == nullptr) return absl::NotFoundError(absl::StrCat("fetch '", f, "' is not a value of the graph"));
      work.push_back(v);
    }
    for (const auto& [from, to] : req_.state_updates) {
      const Value* v = g_.FindValue(from);
      if (v == nullptr)
        return absl::NotFoundError(absl::StrCat("state update source '", from, "' is not a value of the graph"));
      const Value* init = g_.FindValue(to);
      if (init == nullptr || !init->is_initializer())
        return absl::NotFoundError(absl::StrCat("state update target '", to, "' is not an initializer"));
      if (req_.run_state_updates) work.push_back(v);
      mutable_inits_.insert(init);
    }
    for (const std::string& name : req_.shared_state)
      if (const Value* init = g_.FindValue(name); init != nullptr && init->is_initializer()) mutable_inits_.insert(init);
    absl::flat_hash_set<const Value*> seen;
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      if (v == nullptr || !seen.insert(v).second || v->producer == nullptr) continue;
      if (needed_nodes_.insert(v->producer).second)
        for (const Value* in : v->producer->inputs()) work.push_back(in);
    }
    return absl::OkStatus();
  }

  int NewSlot(const Value* v, DType dtype, std::vector<int64_t> dims, SlotKind kind, int index) {
    Slot s;
    s.value = v;
    s.dtype = dtype;
    s.dims = std::move(dims);
    s.kind = kind;
    s.index = index;
    plan_->slots.push_back(std::move(s));
    int id = static_cast<int>(plan_->slots.size()) - 1;
    root_.push_back(id);
    members_.push_back({id});
    known_.emplace_back();
    producer_step_.push_back(-1);
    if (v != nullptr) slot_of_[v] = id;
    return id;
  }

  // Graph inputs (fed, or defaulting to their initializer) and initializers.
  absl::Status AddSources() {
    MT_CHECK(req_.feeds.size() == g_.inputs().size()) << "one FeedType per graph input";
    for (size_t i = 0; i < g_.inputs().size(); ++i) {
      const Value* v = g_.inputs()[i];
      const FeedType& f = req_.feeds[i];
      if (!f.fed) {
        if (!v->is_initializer()) return absl::InvalidArgumentError(absl::StrCat("graph input '", v->name, "' is not fed"));
        continue;  // added below as an initializer
      }
      int s = NewSlot(v, f.dtype, f.dims, SlotKind::kFeed, static_cast<int>(i));
      if (f.value != nullptr) known_[s] = f.value->Clone();  // the plan outlives the caller's tensor
    }
    for (size_t i = 0; i < g_.initializers().size(); ++i) {
      const Value* v = g_.initializers()[i];
      if (slot_of_.contains(v)) continue;  // fed instead
      const Tensor& t = req_.initializers.empty() ? *v->initializer : *req_.initializers[i];
      int s = NewSlot(v, t.dtype(), t.dims(), SlotKind::kInitializer, static_cast<int>(i));
      if (!mutable_inits_.contains(v)) known_[s] = t;
    }
    return absl::OkStatus();
  }

  // Whether `v` is a Resize/Upsample input after the data (roi, scales, sizes).
  static bool IsResizeParameter(const Value* v) {
    for (const Node* c : v->consumers) {
      if (c->op_type() != "Resize" && c->op_type() != "Upsample") continue;
      for (size_t i = 1; i < c->num_inputs(); ++i)
        if (c->input(i) == v) return true;
    }
    return false;
  }

  // Which small feeds without known contents does `n` depend on? (A shape computed
  // from an input, e.g. Reshape's target shape fed by the caller.)
  std::vector<int> ValueDependentFeeds(const Node& n) {
    absl::flat_hash_set<const Value*> seen;
    std::vector<const Value*> work(n.inputs().begin(), n.inputs().end());
    std::vector<int> feeds;
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      if (v == nullptr || !seen.insert(v).second) continue;
      if (v->producer != nullptr) {
        for (const Value* in : v->producer->inputs()) work.push_back(in);
        continue;
      }
      auto it = slot_of_.find(v);
      if (it == slot_of_.end()) continue;
      const Slot& s = plan_->slots[it->second];
      // Shapes come from small integer tensors, from scalars (Range's float bounds) or from the
      // short float vectors Resize/Upsample take as scales (only those: keying a plan on any
      // small float input would re-plan on every new batch of data).
      bool is_int = s.dtype == DType::kI64 || s.dtype == DType::kI32;
      bool small = is_int ? NumElements(s.dims) <= 4096
                          : s.dtype != DType::kString &&
                                (s.dims.empty() || (IsFloat(s.dtype) && s.dims.size() == 1 &&
                                                    s.dims[0] <= 8 && IsResizeParameter(v)));
      if (s.kind == SlotKind::kFeed && small && !known_[it->second].defined()) feeds.push_back(s.index);
    }
    std::sort(feeds.begin(), feeds.end());
    return feeds;
  }

  absl::Status PlanNode(const Node& n, std::vector<int>* wants_values) {
    std::vector<TypeInfo> ins(n.num_inputs());
    std::vector<int> in_slots(n.num_inputs(), -1);
    bool all_known = true;
    for (size_t i = 0; i < n.num_inputs(); ++i) {
      const Value* v = n.input(i);
      if (v == nullptr) {
        ins[i].present = false;
        continue;
      }
      auto it = slot_of_.find(v);
      if (it == slot_of_.end())
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", n.name(), "' (", n.op_type(), "): input '", v->name,
            "' is not a graph input, an initializer or the output of an earlier node"));
      int s = it->second;
      in_slots[i] = s;
      ins[i].dtype = plan_->slots[s].dtype;
      ins[i].shape = Shape::Of(plan_->slots[s].dims);
      if (known_[s].defined())
        ins[i].value = &known_[s];
      else
        all_known = false;
    }
    const KernelRegistry& registry = KernelRegistry::Global();
    if (FindOpSchema(n.domain(), n.op_type()) == nullptr) {
      // The registry's error names the op as unsupported when it has no kernel either.
      MT_RETURN_IF_ERROR(registry.Find(n, req_.device, DTypesOf(ins), {}).status());
      return absl::UnimplementedError(absl::StrCat("node '", n.name(), "' (", n.op_type(),
                                                   "): no shape inference rule for this op"));
    }
    std::vector<TypeInfo> outs;
    MT_RETURN_IF_ERROR(InferNode(n, g_.opset(n.domain()), ins, &outs));
    int64_t out_elems = 0;
    for (size_t i = 0; i < n.num_outputs(); ++i) {
      if (n.output(i) == nullptr) continue;
      if (i < outs.size() && outs[i].dtype != DType::kUndefined && outs[i].shape.fully_known()) {
        const std::vector<int64_t> sizes = outs[i].shape.sizes();
        const std::optional<int64_t> elems = CheckedNumElements(sizes, static_cast<int64_t>(DTypeSize(outs[i].dtype)));
        if (!elems || __builtin_add_overflow(out_elems, *elems, &out_elems))
          return absl::InvalidArgumentError(absl::StrCat("node '", n.name(), "' (", n.op_type(), "): output '",
                                                         n.output(i)->name, "' of shape [", absl::StrJoin(sizes, ", "),
                                                         "] has more bytes than a 64-bit size holds"));
        continue;
      }
      *wants_values = ValueDependentFeeds(n);
      std::string what = absl::StrCat("node '", n.name(), "' (", n.op_type(), "): cannot determine the ",
                                      "dtype and shape of output '", n.output(i)->name, "'");
      if (!wants_values->empty()) return absl::FailedPreconditionError(absl::StrCat(what, " without input values"));
      return absl::InvalidArgumentError(what);
    }

    if ((all_known || ReadsOnlyDims(n)) && !IsRandom(n) && out_elems <= req_.fold_limit_elements) {
      MT_ASSIGN_OR_RETURN(bool folded, Fold(n, in_slots, ins, outs));
      if (folded) return absl::OkStatus();
    }
    if (IsViewNode(n) && in_slots[0] >= 0 && n.output(0) != nullptr) {
      const Slot& in = plan_->slots[in_slots[0]];
      std::vector<int64_t> dims = outs[0].shape.sizes();
      if (outs[0].dtype != in.dtype || NumElements(dims) != NumElements(in.dims))
        return absl::InvalidArgumentError(absl::StrCat("node '", n.name(), "' (", n.op_type(), "): output ",
                                                       DimsString(dims), " does not view input ", DimsString(in.dims)));
      int s = NewSlot(n.output(0), in.dtype, dims, SlotKind::kArena, -1);
      Attach(s, root_[in_slots[0]]);
      if (known_[in_slots[0]].defined()) known_[s] = known_[in_slots[0]].Reshaped(dims);
      ++plan_->stats.view_nodes;
      return absl::OkStatus();
    }
    absl::StatusOr<const KernelDef*> def = registry.Find(n, req_.device, DTypesOf(ins), DTypesOf(outs));
    if (!def.ok()) {
      // Off the CPU, plan on to list every op the device lacks in one error (MissingKernelsError).
      if (req_.device == DeviceType::kCPU) return def.status();
      NoteMissing(n, ins);
    }
    Step step;
    step.node = &n;
    step.kernel = def.ok() ? *def : nullptr;
    step.opset = g_.opset(n.domain());
    for (int s : in_slots) {
      bool constant = false;
      if (s >= 0) {
        const Slot& r = plan_->slots[root_[s]];
        constant = r.kind == SlotKind::kConstant ||
                   (r.kind == SlotKind::kInitializer && !mutable_inits_.contains(r.value));
        if (constant && r.kind == SlotKind::kInitializer) folded_inits_.insert(r.index);
      }
      step.constant_inputs.push_back(constant);
    }
    step.inputs = std::move(in_slots);
    int step_index = static_cast<int>(plan_->steps.size());
    for (size_t i = 0; i < n.num_outputs(); ++i) {
      if (n.output(i) == nullptr) {
        step.outputs.push_back(-1);
        continue;
      }
      int s = NewSlot(n.output(i), outs[i].dtype, outs[i].shape.sizes(), SlotKind::kArena, -1);
      producer_step_[s] = step_index;
      step.outputs.push_back(s);
    }
    plan_->steps.push_back(std::move(step));
    return absl::OkStatus();
  }

  // A node that runs as a step but has no kernel on the device: counted by op and input dtypes.
  struct Missing {
    std::string op;  // domain-qualified op and input dtypes
    int64_t nodes = 0;
    std::string first;  // the first such node's name
  };
  void NoteMissing(const Node& n, const std::vector<TypeInfo>& ins) {
    std::vector<std::string> dtypes;
    for (const TypeInfo& t : ins)
      if (t.present) dtypes.emplace_back(DTypeName(t.dtype));
    const std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
    const std::string op = absl::StrCat(domain.empty() ? "" : absl::StrCat(domain, "."), n.op_type(), " (",
                                        absl::StrJoin(dtypes, ", "), ")");
    for (Missing& m : missing_)
      if (m.op == op) {
        ++m.nodes;
        return;
      }
    missing_.push_back({op, 1, n.name()});
  }
  absl::Status MissingKernelsError() const {
    std::vector<std::string> parts;
    for (const Missing& m : missing_)
      parts.push_back(absl::StrCat(m.op, ": ", m.nodes, m.nodes == 1 ? " node '" : " nodes, first '", m.first, "'"));
    return absl::UnimplementedError(absl::StrCat("no ", DeviceName(req_.device), " kernel for ", missing_.size(),
                                                 missing_.size() == 1 ? " op" : " ops", " of this graph (nothing ran): ",
                                                 absl::StrJoin(parts, "; ")));
  }

  // Computes the node now; false when no CPU kernel can (it then runs as a normal step).
  absl::StatusOr<bool> Fold(const Node& n, const std::vector<int>& in_slots,
                            const std::vector<TypeInfo>& ins, const std::vector<TypeInfo>& outs) {
    std::vector<Tensor> results;
    if (IsViewNode(n)) {
      results.push_back(known_[in_slots[0]].Reshaped(outs[0].shape.sizes()));
    } else {
      auto def = KernelRegistry::Global().Find(n, DeviceType::kCPU, DTypesOf(ins), DTypesOf(outs));
      if (!def.ok()) return false;
      // Dims-only ops see their inputs' dims with no data behind them.
      std::vector<TensorView> views(in_slots.size());
      std::vector<const TensorView*> args(in_slots.size(), nullptr);
      for (size_t i = 0; i < in_slots.size(); ++i) {
        if (in_slots[i] < 0) continue;
        const Slot& slot = plan_->slots[in_slots[i]];
        views[i] = known_[in_slots[i]].defined() ? ViewOf(known_[in_slots[i]])
                                                 : TensorView{slot.dtype, slot.dims, nullptr};
        args[i] = &views[i];
      }
      MT_ASSIGN_OR_RETURN(results, ComputeOnHost(n, g_.opset(n.domain()), **def, args, outs));
    }
    for (size_t i = 0; i < results.size(); ++i) {
      if (n.output(i) == nullptr) continue;
      int s = NewSlot(n.output(i), results[i].dtype(), results[i].dims(), SlotKind::kConstant,
                      static_cast<int>(plan_->constants.size()));
      plan_->constants.push_back(results[i]);
      known_[s] = results[i];
    }
    for (int s : in_slots)
      if (s >= 0 && !ReadsOnlyDims(n) && plan_->slots[root_[s]].kind == SlotKind::kInitializer)
        folded_inits_.insert(plan_->slots[root_[s]].index);
    ++plan_->stats.folded_nodes;
    return true;
  }

  // Makes slot `s` (and everything sharing its bytes) share the bytes of root `r`.
  void Attach(int s, int r) {
    int old = root_[s];
    if (old == r) return;
    for (int m : members_[old]) {
      root_[m] = r;
      members_[r].push_back(m);
    }
    members_[old].clear();
  }

  absl::Status ResolveFetchesAndState() {
    for (const std::string& f : req_.fetches) {
      auto it = slot_of_.find(g_.FindValue(f));
      if (it == slot_of_.end()) return absl::InvalidArgumentError(absl::StrCat("fetch '", f, "' is not computed"));
      plan_->fetch_slots.push_back(it->second);
    }
    for (const auto& [from, to] : req_.state_updates) {
      if (!req_.run_state_updates) break;
      int src = slot_of_.at(g_.FindValue(from));
      auto it = slot_of_.find(g_.FindValue(to));
      if (it == slot_of_.end() || plan_->slots[it->second].kind != SlotKind::kInitializer)
        return absl::InvalidArgumentError(absl::StrCat("state update target '", to, "' is fed, not an initializer"));
      const Slot& a = plan_->slots[src];
      const Slot& b = plan_->slots[it->second];
      if (a.dtype != b.dtype || a.dims != b.dims)
        return absl::InvalidArgumentError(absl::StrCat(
            "state update '", from, "' (", DTypeName(a.dtype), DimsString(a.dims), ") does not match initializer '",
            to, "' (", DTypeName(b.dtype), DimsString(b.dims), ")"));
      state_.push_back({src, it->second});
    }
    plan_->folded_initializers.assign(folded_inits_.begin(), folded_inits_.end());
    std::sort(plan_->folded_initializers.begin(), plan_->folded_initializers.end());
    return absl::OkStatus();
  }

  void AssignMemory() {
    std::vector<Slot>& slots = plan_->slots;
    const int end = static_cast<int>(plan_->steps.size());  // "after the last step"
    std::vector<int> last(slots.size(), -1);
    for (int i = 0; i < end; ++i)
      for (int s : plan_->steps[i].inputs)
        if (s >= 0) last[s] = i;
    for (int s : plan_->fetch_slots) last[s] = end;
    for (const PendingState& c : state_) last[c.from] = end;
    std::vector<int> root_last(slots.size(), -1);
    for (size_t s = 0; s < slots.size(); ++s) root_last[root_[s]] = std::max(root_last[root_[s]], last[s]);

    // In place: an elementwise output takes over input 0's buffer (the loss gradient its logits')
    // when nothing reads it later.
    for (int i = 0; i < end; ++i) {
      const Step& st = plan_->steps[i];
      const int k = OverwritableInput(*st.node);
      if (k < 0 || static_cast<int>(st.inputs.size()) <= k || st.inputs[k] < 0 || st.outputs.size() != 1) continue;
      int r = root_[st.inputs[k]], o = st.outputs[0];
      if (slots[r].kind != SlotKind::kArena || root_last[r] != i || slots[r].nbytes() != slots[o].nbytes()) continue;
      root_last[r] = std::max(root_last[r], root_last[o]);
      Attach(o, r);
      ++plan_->stats.inplace_outputs;
    }

    // State updates: the producer writes straight into the initializer when the initializer's
    // old value is dead by the time the new one's buffer is first written, or when the producer
    // itself is its last reader and computes each element from the same elements of its inputs
    // (the optimizers: the parameter and its moments updated in place, no copies).
    absl::flat_hash_set<int> redirected;
    for (const PendingState& c : state_) {
      int r = root_[c.from], init = plan_->slots[c.to].index;
      const int p = producer_step_[r];
      const bool dead = p > root_last[c.to] ||
                        (p >= 0 && p == root_last[c.to] &&
                         HasOpTraits(*plan_->steps[p].node, kOpIndexAligned) &&
                         slots[r].nbytes() == slots[c.to].nbytes());
      bool direct = slots[r].kind == SlotKind::kArena && dead && !redirected.contains(r);
      if (!direct) {
        plan_->state_copies.push_back({c.from, init});
        continue;
      }
      redirected.insert(r);
      slots[r].kind = SlotKind::kInitializer;
      slots[r].index = init;
      ++plan_->stats.inplace_state_updates;
    }

    std::vector<int> roots;
    std::vector<BufferLifetime> lifetimes;
    for (size_t s = 0; s < slots.size(); ++s) {
      if (producer_step_[s] >= 0) plan_->stats.naive_bytes += (slots[s].nbytes() + 63) / 64 * 64;
      if (root_[s] != static_cast<int>(s) || slots[s].kind != SlotKind::kArena) continue;
      roots.push_back(static_cast<int>(s));
      int first = producer_step_[s];
      lifetimes.push_back({slots[s].nbytes(), first, std::max(first, root_last[s])});
    }
    for (const Step& st : plan_->steps) plan_->stats.step_nodes.push_back(st.node);
    for (size_t s = 0; s < slots.size(); ++s)  // the initializers' own slots (not updates redirected there)
      if (slots[s].kind == SlotKind::kInitializer && slots[s].value != nullptr && slots[s].value->is_initializer())
        plan_->stats.initializer_bytes += slots[s].nbytes();
    plan_->stats.buffers = lifetimes;
    ArenaLayout layout = PackBuffers(lifetimes);
    for (size_t i = 0; i < roots.size(); ++i) slots[roots[i]].offset = layout.offsets[i];
    for (size_t s = 0; s < slots.size(); ++s) {
      const Slot& r = slots[root_[s]];
      slots[s].kind = r.kind;
      slots[s].index = r.index;
      slots[s].offset = r.offset;
    }
    plan_->stats.peak_planned_bytes = layout.total_bytes;
    plan_->stats.steps = end;
  }

  std::vector<Missing> missing_;  // off the CPU: ops without a kernel, in graph order
  const Graph& g_;
  const PlanRequest& req_;
  std::unique_ptr<ExecutionPlan> plan_;
  absl::flat_hash_set<const Node*> needed_nodes_;
  absl::flat_hash_set<const Value*> mutable_inits_;
  absl::flat_hash_map<const Value*, int> slot_of_;
  // Per slot: the slot whose bytes it shares (itself if none), the slots sharing its bytes
  // (for roots), contents known at plan time, and the step writing it (-1: not a step output).
  std::vector<int> root_;
  std::vector<std::vector<int>> members_;
  std::vector<Tensor> known_;
  std::vector<int> producer_step_;
  absl::flat_hash_set<int> folded_inits_;
  struct PendingState {
    int from, to;  // slots
  };
  std::vector<PendingState> state_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExecutionPlan>> BuildPlan(const Graph& graph, const PlanRequest& request,
                                                         std::vector<int>* wants_values) {
  wants_values->clear();
  absl::flat_hash_set<const Node*> done;
  for (const auto& up : graph.nodes()) {
    for (const Value* v : up->inputs())
      if (v != nullptr && v->producer != nullptr && !done.contains(v->producer))
        return absl::InvalidArgumentError(absl::StrCat("node '", up->name(), "' (", up->op_type(),
                                                       "): runs before the producer of its input '", v->name,
                                                       "' (the graph is not topologically sorted)"));
    done.insert(up.get());
  }
  return Planner(graph, request).Build(wants_values);
}

std::vector<std::string> OpsWithoutKernels(const Graph& graph, DeviceType device) {
  // Values planning knows on the host: initializers, and what nodes reading only such values or
  // only dims compute (folded at plan time; lenient where a fold would exceed the size limit).
  absl::flat_hash_set<const Value*> host;
  for (const Value* v : graph.initializers()) host.insert(v);
  std::vector<std::string> missing;
  const KernelRegistry& registry = KernelRegistry::Global();
  for (const auto& up : graph.nodes()) {
    const Node& n = *up;
    bool on_host = ReadsOnlyDims(n) && !IsRandom(n);
    if (!on_host && !IsRandom(n)) {
      on_host = true;
      for (const Value* v : n.inputs())
        if (v != nullptr && !host.contains(v)) on_host = false;
    }
    if (on_host) {
      for (const Value* v : n.outputs())
        if (v != nullptr) host.insert(v);
      continue;
    }
    if (IsViewNode(n)) continue;
    const std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
    if (registry.Has(domain, n.op_type(), device)) continue;
    std::string op = domain.empty() ? n.op_type() : absl::StrCat(domain, ".", n.op_type());
    if (std::find(missing.begin(), missing.end(), op) == missing.end()) missing.push_back(std::move(op));
  }
  std::sort(missing.begin(), missing.end());
  return missing;
}

absl::Status DryPlan(const Graph& graph, DeviceType device,
                     const std::vector<std::pair<std::string, std::string>>& state_updates, int64_t symbolic_dim,
                     PlanStats* stats, const std::vector<std::string>* fetches) {
  PlanRequest req;
  req.device = device;
  req.state_updates = state_updates;
  for (const Value* v : graph.inputs()) {
    FeedType f;
    if (!v->is_initializer()) {
      if (!v->shape.rank_known) return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "' has no rank"));
      f.fed = true;
      f.dtype = v->dtype;
      for (const Dim& d : v->shape.dims) f.dims.push_back(d.known() ? d.value : symbolic_dim);
      if (!CheckedNumElements(f.dims, static_cast<int64_t>(DTypeSize(f.dtype))))
        return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "' of shape [", absl::StrJoin(f.dims, ", "),
                                                       "] has more bytes than a 64-bit size holds"));
    }
    req.feeds.push_back(std::move(f));
  }
  if (fetches != nullptr) {
    req.fetches = *fetches;
  } else {
    for (const Value* v : graph.outputs()) req.fetches.push_back(v->name);
  }
  std::vector<int> wants;
  MT_ASSIGN_OR_RETURN(std::unique_ptr<ExecutionPlan> plan, BuildPlan(graph, req, &wants));
  if (stats != nullptr) *stats = std::move(plan->stats);
  return absl::OkStatus();
}


}  // namespace mixtrain
