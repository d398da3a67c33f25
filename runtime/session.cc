#include "runtime/session.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "kernels/backend.h"
#include "runtime/memory_limit.h"
#include "runtime/planner.h"

namespace mixtrain {

// What one run of a plan writes: the executor (arena, kernels with their cached primitives and
// prepacked weights) and the per-run buffers. One run uses a context at a time.
struct Session::Context {
  std::unique_ptr<Executor> executor;
  std::vector<const void*> feed_data;  // per graph input, filled per run
  // The tensors the context's last run returned. Once the caller has dropped one, the next run
  // writes into it again instead of allocating: fresh large allocations page-fault on every run
  // (glibc hands freed blocks back to the kernel), which cost ~1 ms per gpt_mini bf16 batch.
  std::vector<Tensor> outputs;
};

// One input signature's plan. The signature fields let Run recognize it again without building
// a key (no allocation on the hot path).
struct Session::CachedPlan {
  std::vector<std::string> fetches;
  bool write_state = true;
  std::vector<bool> fed;
  std::vector<DType> dtypes;
  std::vector<std::vector<int64_t>> dims;
  std::vector<Tensor> keyed_values;  // per input; defined for inputs whose contents key the plan
  std::shared_ptr<const ExecutionPlan> plan;
  // The plan's execution contexts: as many as runs of it have overlapped, kept for reuse.
  std::mutex pool_mu;
  std::vector<std::unique_ptr<Context>> contexts;  // all of them
  std::vector<Context*> idle;                      // those no run holds
};

// A context taken from a plan's pool for one run; given back when the lease ends.
class Session::ContextLease {
 public:
  ContextLease(CachedPlan* plan, Context* context) : plan_(plan), context_(context) {}
  ContextLease(ContextLease&& o) noexcept : plan_(o.plan_), context_(std::exchange(o.context_, nullptr)) {}
  ContextLease& operator=(ContextLease&&) = delete;
  ~ContextLease() {
    if (context_ == nullptr) return;
    std::lock_guard<std::mutex> lock(plan_->pool_mu);
    plan_->idle.push_back(context_);
  }
  Context& operator*() const { return *context_; }
  Context* operator->() const { return context_; }

 private:
  CachedPlan* plan_;
  Context* context_;
};

namespace {

// What a plan's kernels may take beyond its arena (workspace, primitives, JIT code): room the
// memory check keeps free.
constexpr size_t kKernelReserveBytes = size_t{32} << 20;

bool IsSorted(const Graph& g) {
  absl::flat_hash_set<const Node*> done;
  for (const auto& up : g.nodes()) {
    for (const Value* v : up->inputs())
      if (v != nullptr && v->producer != nullptr && !done.contains(v->producer)) return false;
    done.insert(up.get());
  }
  return true;
}

}  // namespace

Session::~Session() = default;

absl::StatusOr<std::unique_ptr<Session>> Session::Create(std::shared_ptr<const Graph> graph,
                                                         SessionOptions options) {
  if (!IsSorted(*graph)) {
    std::unique_ptr<Graph> sorted = graph->Clone();
    MT_RETURN_IF_ERROR(sorted->TopoSort());
    graph = std::move(sorted);
  }
  std::unique_ptr<Session> s(new Session());
  s->graph_ = std::move(graph);
  s->options_ = std::move(options);
  MT_RETURN_IF_ERROR(s->Init());
  return s;
}

absl::StatusOr<std::unique_ptr<Session>> Session::Create(const Graph& graph, SessionOptions options) {
  return Create(std::shared_ptr<const Graph>(graph.Clone()), std::move(options));
}

absl::Status Session::Init() {
  if (options_.run_on != nullptr) {
    device_ = options_.run_on;
  } else {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Device> d, BackendFor(options_.device).MakeDevice());
    device_ = std::move(d);
  }
  options_.device = device_->type();
  // A device with memory of its own runs everything on one stream (and its buffers, allocator
  // and library handles are not made for several host threads): its runs take turns.
  concurrent_runs_ = device_->type() == DeviceType::kCPU && device_->shares_host_memory();
  absl::flat_hash_set<std::string> targets;
  for (const auto& [from, to] : options_.state_updates) {
    const Value* v = graph_->FindValue(to);
    if (v == nullptr || !v->is_initializer())
      return absl::InvalidArgumentError(absl::StrCat("state update target '", to, "' is not an initializer"));
    if (graph_->FindValue(from) == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("state update source '", from, "' is not a value of the graph"));
    targets.insert(to);
  }
  for (const std::string& name : options_.shared_state) {
    const Value* v = graph_->FindValue(name);
    if (v == nullptr || !v->is_initializer())
      return absl::InvalidArgumentError(absl::StrCat("shared state '", name, "' is not an initializer"));
  }
  const auto& inits = graph_->initializers();
  inits_.resize(inits.size());
  for (size_t i = 0; i < inits.size(); ++i) {
    const Tensor& t = *inits[i]->initializer;
    init_index_[inits[i]->name] = static_cast<int>(i);
    // Read-only initializers are used where they are; state gets its own buffer because graph
    // tensors are immutable (and shared with clones), unless the caller gave them up to be the
    // state (state_in_graph).
    inits_[i].owned = targets.contains(inits[i]->name);
    const bool copy = inits_[i].owned && device_->shares_host_memory() && !options_.state_in_graph;
    inits_[i].tensor = copy ? t.Clone() : t;
    if (!device_->shares_host_memory()) {
      MT_ASSIGN_OR_RETURN(inits_[i].on_device, DeviceBuffer::Allocate(device_.get(), t.nbytes()));
      device_->CopyToDevice(inits_[i].on_device.data(), t.data(), t.nbytes());
    }
  }
  device_->Synchronize();
  for (const Value* v : graph_->outputs()) default_fetches_.push_back(v->name);
  value_keyed_.assign(graph_->inputs().size(), false);
  profiling_ = options_.profile;
  return absl::OkStatus();
}

void* Session::InitializerAddress(int i) const {
  const InitializerBuffer& b = inits_[i];
  return device_->shares_host_memory() ? const_cast<void*>(b.tensor.data()) : b.on_device.data();
}

std::vector<const void*> Session::HostInitializerAddresses() const {
  std::vector<const void*> host(inits_.size(), nullptr);
  if (device_->shares_host_memory()) return host;  // kernels read the initializers themselves
  absl::flat_hash_set<std::string> written;
  for (const auto& [from, to] : options_.state_updates) written.insert(to);
  const auto& inits = graph_->initializers();
  for (size_t i = 0; i < inits_.size(); ++i)
    if (!written.contains(inits[i]->name)) host[i] = inits_[i].tensor.data();
  return host;
}

std::vector<void*> Session::InitializerAddresses() const {
  std::vector<void*> a;
  for (size_t i = 0; i < inits_.size(); ++i) a.push_back(InitializerAddress(static_cast<int>(i)));
  return a;
}

absl::StatusOr<std::string> Session::SignatureKey(const std::map<std::string, Tensor>& feeds,
                                                  const std::vector<std::string>& fetches,
                                                  bool write_state) const {
  const auto& inputs = graph_->inputs();
  absl::flat_hash_set<std::string> input_names;
  for (const Value* v : inputs) input_names.insert(v->name);
  for (const auto& [name, t] : feeds)
    if (!input_names.contains(name)) return absl::InvalidArgumentError(absl::StrCat("feed '", name, "' is not an input of the graph"));
  // symbol -> (size, input that bound it)
  std::map<std::string, std::pair<int64_t, std::string>> bound;
  std::string key = absl::StrCat(write_state ? "" : "dry|", absl::StrJoin(fetches, ","), "|");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* v = inputs[i];
    auto it = feeds.find(v->name);
    if (it == feeds.end()) {
      if (!v->is_initializer()) return absl::InvalidArgumentError(absl::StrCat("graph input '", v->name, "' is not fed"));
      absl::StrAppend(&key, "-;");
      continue;
    }
    const Tensor& t = it->second;
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "': fed an empty tensor"));
    if (v->dtype != DType::kUndefined && t.dtype() != v->dtype)
      return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "': fed ", DTypeName(t.dtype()),
                                                     ", the graph expects ", DTypeName(v->dtype)));
    if (v->shape.rank_known) {
      if (t.rank() != v->shape.rank())
        return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "': fed rank ", t.rank(), " [",
                                                       absl::StrJoin(t.dims(), ","), "], the graph expects ",
                                                       v->shape.ToString()));
      for (int64_t d = 0; d < t.rank(); ++d) {
        const Dim& want = v->shape.dims[d];
        int64_t got = t.dims()[d];
        if (want.known() && want.value != got)
          return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "': dim ", d, " is ", got,
                                                         ", the graph expects ", want.value));
        if (want.known() || want.symbol.empty()) continue;
        auto [b, inserted] = bound.emplace(want.symbol, std::make_pair(got, v->name));
        if (!inserted && b->second.first != got)
          return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "': dim ", d, " ('", want.symbol,
                                                         "') is ", got, ", but input '", b->second.second,
                                                         "' binds '", want.symbol, "' to ", b->second.first));
      }
    }
    absl::StrAppend(&key, DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","), "]");
    if (value_keyed_[i]) absl::StrAppend(&key, "=", absl::StrJoin(t.ToInt64Vector(), ","));
    absl::StrAppend(&key, ";");
  }
  return key;
}

bool Session::Matches(const CachedPlan& p, const std::map<std::string, Tensor>& feeds,
                      const std::vector<std::string>& fetches, bool write_state) const {
  if (p.fetches != fetches || p.write_state != write_state) return false;
  const auto& inputs = graph_->inputs();
  size_t fed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto it = feeds.find(inputs[i]->name);
    if ((it != feeds.end()) != p.fed[i]) return false;
    if (it == feeds.end()) continue;
    ++fed;
    const Tensor& t = it->second;
    if (t.dtype() != p.dtypes[i] || t.dims() != p.dims[i]) return false;
    if (p.keyed_values[i].defined() && !p.keyed_values[i].Identical(t)) return false;
  }
  return fed == feeds.size();  // otherwise a feed names no input: the slow path reports it
}

absl::StatusOr<std::unique_ptr<Session::CachedPlan>> Session::MakePlan(
    const std::map<std::string, Tensor>& feeds, const std::vector<std::string>& fetches, bool write_state) {
  const auto& inputs = graph_->inputs();
  PlanRequest req;
  req.run_state_updates = write_state;
  req.device = options_.device;
  req.fetches = fetches;
  req.state_updates.assign(options_.state_updates.begin(), options_.state_updates.end());
  req.shared_state = options_.shared_state;
  req.fold_limit_elements = options_.fold_limit_elements;
  for (const InitializerBuffer& b : inits_) req.initializers.push_back(&b.tensor);
  req.feeds.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto it = feeds.find(inputs[i]->name);
    if (it == feeds.end()) continue;
    req.feeds[i] = {true, it->second.dtype(), it->second.dims(), value_keyed_[i] ? &it->second : nullptr};
  }
  std::vector<int> wants;
  absl::StatusOr<std::unique_ptr<ExecutionPlan>> plan = BuildPlan(*graph_, req, &wants);
  // A shape depends on fed contents: plan again knowing them (and key later plans on them).
  while (!plan.ok() && !wants.empty()) {
    for (int i : wants) {
      value_keyed_[i] = true;
      req.feeds[i].value = &feeds.at(inputs[i]->name);
    }
    plan = BuildPlan(*graph_, req, &wants);
  }
  if (!plan.ok()) return plan.status();

  auto cp = std::make_unique<CachedPlan>();
  cp->fetches = fetches;
  cp->write_state = write_state;
  for (size_t i = 0; i < inputs.size(); ++i) {
    cp->fed.push_back(req.feeds[i].fed);
    cp->dtypes.push_back(req.feeds[i].dtype);
    cp->dims.push_back(req.feeds[i].dims);
    cp->keyed_values.push_back(req.feeds[i].value != nullptr ? req.feeds[i].value->Clone() : Tensor());
  }
  cp->plan = std::move(*plan);
  if (device_->shares_host_memory()) {
    MT_RETURN_IF_ERROR(CheckFitsInMemory(cp->plan->stats.peak_planned_bytes, kKernelReserveBytes,
                                         "this plan's arena (its intermediate tensors)", options_.memory_advice));
  }
  // The first context now, so that a plan whose kernels cannot be made is never cached.
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Context> first, MakeContext(cp->plan));
  cp->idle.push_back(first.get());
  cp->contexts.push_back(std::move(first));
  return cp;
}

absl::StatusOr<std::unique_ptr<Session::Context>> Session::MakeContext(
    std::shared_ptr<const ExecutionPlan> plan) const {
  auto c = std::make_unique<Context>();
  MT_ASSIGN_OR_RETURN(c->executor, Executor::Create(std::move(plan), device_.get(), InitializerAddresses(),
                                                     options_.communicator.get(), HostInitializerAddresses()));
  if (!options_.cache_constant_inputs) c->executor->ForgetConstantInputs();
  c->executor->set_profiling(profiling_);
  c->executor->set_record(options_.record_steps);
  c->feed_data.assign(graph_->inputs().size(), nullptr);
  return c;
}

absl::StatusOr<Session::ContextLease> Session::Acquire(CachedPlan& p) {
  {
    std::lock_guard<std::mutex> lock(p.pool_mu);
    if (!p.idle.empty()) {
      Context* c = p.idle.back();
      p.idle.pop_back();
      return ContextLease(&p, c);
    }
  }
  // Every context is running: a new one (made outside the lock; the others keep running).
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Context> c, MakeContext(p.plan));
  std::lock_guard<std::mutex> lock(p.pool_mu);
  p.contexts.push_back(std::move(c));
  return ContextLease(&p, p.contexts.back().get());
}

absl::StatusOr<Session::CachedPlan*> Session::GetPlan(const std::map<std::string, Tensor>& feeds,
                                                      const std::vector<std::string>& fetches,
                                                      bool write_state) {
  std::lock_guard<std::mutex> lock(plans_mu_);
  if (last_ != nullptr && Matches(*last_, feeds, fetches, write_state)) return last_;
  MT_ASSIGN_OR_RETURN(std::string key, SignatureKey(feeds, fetches, write_state));
  auto it = plans_.find(key);
  if (it != plans_.end()) return last_ = it->second.get();
  MT_ASSIGN_OR_RETURN(std::unique_ptr<CachedPlan> cp, MakePlan(feeds, fetches, write_state));
  // Planning may have learned that some contents matter: key the plan on them.
  MT_ASSIGN_OR_RETURN(key, SignatureKey(feeds, fetches, write_state));
  last_ = cp.get();
  plans_[key] = std::move(cp);
  return last_;
}

absl::StatusOr<std::vector<Tensor>> Session::Run(const std::map<std::string, Tensor>& feeds,
                                                 const std::vector<std::string>& fetch_names,
                                                 bool write_state) {
  const std::vector<std::string>& fetches = fetch_names.empty() ? default_fetches_ : fetch_names;
  return RunPlan(feeds, fetches, write_state, /*wait=*/true);
}

absl::Status Session::Launch(const std::map<std::string, Tensor>& feeds) {
  static const std::vector<std::string> kNothing;
  return RunPlan(feeds, kNothing, /*write_state=*/true, /*wait=*/false).status();
}

absl::StatusOr<std::vector<Tensor>> Session::RunPlan(const std::map<std::string, Tensor>& feeds,
                                                     const std::vector<std::string>& fetches, bool write_state,
                                                     bool wait) {
  const bool alone = !concurrent_runs_ || (write_state && !options_.state_updates.empty());
  std::unique_lock<std::shared_mutex> exclusive(state_mu_, std::defer_lock);
  std::shared_lock<std::shared_mutex> shared(state_mu_, std::defer_lock);
  if (alone) {
    exclusive.lock();
  } else {
    shared.lock();
  }
  MT_ASSIGN_OR_RETURN(CachedPlan* p, GetPlan(feeds, fetches, write_state));
  MT_ASSIGN_OR_RETURN(ContextLease context, Acquire(*p));
  const auto& inputs = graph_->inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto it = feeds.find(inputs[i]->name);
    context->feed_data[i] = it == feeds.end() ? nullptr : it->second.data();
  }
  Executor& exec = *context->executor;
  MT_RETURN_IF_ERROR(exec.Run(context->feed_data, runs_.fetch_add(1)));
  const ExecutionPlan& plan = *p->plan;
  std::vector<Tensor> results;
  results.reserve(plan.fetch_slots.size());
  context->outputs.resize(plan.fetch_slots.size());
  for (size_t i = 0; i < plan.fetch_slots.size(); ++i) {
    const Slot& slot = plan.slots[plan.fetch_slots[i]];
    Tensor& kept = context->outputs[i];
    if (!kept.defined() || !kept.sole_owner()) kept = Tensor(slot.dtype, slot.dims);
    results.push_back(kept);
    device_->CopyToHost(kept.data(), exec.SlotData(plan.fetch_slots[i]), slot.nbytes());
  }
  for (const StateCopy& c : plan.state_copies)
    device_->CopyOnDevice(InitializerAddress(c.to), exec.SlotData(c.from), plan.slots[c.from].nbytes());
  if (wait) device_->Synchronize();
  return results;
}

absl::StatusOr<Tensor> Session::GetInitializer(const std::string& name) const {
  std::shared_lock<std::shared_mutex> lock(state_mu_);
  auto it = init_index_.find(name);
  if (it == init_index_.end()) return absl::NotFoundError(absl::StrCat("no initializer '", name, "'"));
  const InitializerBuffer& b = inits_[it->second];
  if (device_->shares_host_memory() || !b.owned) return b.tensor.Clone();
  Tensor t(b.tensor.dtype(), b.tensor.dims());
  device_->CopyToHost(t.data(), b.on_device.data(), t.nbytes());
  device_->Synchronize();
  return t;
}

absl::StatusOr<Tensor> Session::InitializerContents(const std::string& name) const {
  if (!device_->shares_host_memory()) return GetInitializer(name);
  std::shared_lock<std::shared_mutex> lock(state_mu_);
  auto it = init_index_.find(name);
  if (it == init_index_.end()) return absl::NotFoundError(absl::StrCat("no initializer '", name, "'"));
  return inits_[it->second].tensor;
}

absl::Status Session::SetInitializer(const std::string& name, const Tensor& value) {
  std::unique_lock<std::shared_mutex> lock(state_mu_);
  std::lock_guard<std::mutex> plans_lock(plans_mu_);
  auto it = init_index_.find(name);
  if (it == init_index_.end()) return absl::NotFoundError(absl::StrCat("no initializer '", name, "'"));
  int i = it->second;
  const Tensor& graph_t = *graph_->initializers()[i]->initializer;
  if (value.dtype() != graph_t.dtype() || value.dims() != graph_t.dims())
    return absl::InvalidArgumentError(absl::StrCat(
        "initializer '", name, "' is ", DTypeName(graph_t.dtype()), "[", absl::StrJoin(graph_t.dims(), ","),
        "], got ", DTypeName(value.dtype()), "[", absl::StrJoin(value.dims(), ","), "]"));
  InitializerBuffer& b = inits_[i];
  if (!device_->shares_host_memory()) {
    b.tensor = value.Clone();
    b.owned = true;
    device_->CopyToDevice(b.on_device.data(), value.data(), value.nbytes());
    const std::vector<const void*> host = HostInitializerAddresses();
    for (auto& [key, p] : plans_)
      for (auto& c : p->contexts) c->executor->BindHostInitializers(host);
  } else if (!b.owned) {
    b.tensor = value.Clone();
    b.owned = true;
    std::vector<void*> addresses = InitializerAddresses();
    for (auto& [key, p] : plans_)
      for (auto& c : p->contexts) c->executor->BindInitializers(addresses);
  } else {
    std::memcpy(b.tensor.data(), value.data(), value.nbytes());
  }
  // Plans that computed something from the old contents at plan time are stale.
  for (auto pit = plans_.begin(); pit != plans_.end();) {
    const std::vector<int>& folded = pit->second->plan->folded_initializers;
    if (!std::binary_search(folded.begin(), folded.end(), i)) {
      ++pit;
      continue;
    }
    if (last_ == pit->second.get()) last_ = nullptr;
    plans_.erase(pit++);
  }
  return absl::OkStatus();
}

std::optional<PlanStats> Session::last_plan_stats() const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  if (last_ == nullptr) return std::nullopt;
  return last_->plan->stats;
}

size_t Session::num_cached_plans() const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  return plans_.size();
}

size_t Session::num_execution_contexts() const {
  std::unique_lock<std::shared_mutex> lock(state_mu_);  // no run is adding one
  std::lock_guard<std::mutex> plans_lock(plans_mu_);
  size_t n = 0;
  for (const auto& [key, p] : plans_) n += p->contexts.size();
  return n;
}

void Session::set_profiling(bool on) {
  std::unique_lock<std::shared_mutex> lock(state_mu_);
  std::lock_guard<std::mutex> plans_lock(plans_mu_);
  profiling_ = on;
  for (auto& [key, p] : plans_)
    for (auto& c : p->contexts) c->executor->set_profiling(on);
}

std::vector<OpProfile> Session::Profile() const {
  std::map<std::string, OpProfile> by_op;
  for (const NodeProfile& n : ProfileByNode()) {
    OpProfile& o = by_op[n.node->op_type()];
    o.op_type = n.node->op_type();
    o.calls += n.calls;
    o.seconds += n.seconds;
  }
  std::vector<OpProfile> v;
  for (auto& [op, o] : by_op) v.push_back(o);
  std::sort(v.begin(), v.end(), [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
  return v;
}

std::vector<NodeProfile> Session::ProfileByNode() const {
  std::unique_lock<std::shared_mutex> lock(state_mu_);  // no run is adding to the times
  std::lock_guard<std::mutex> plans_lock(plans_mu_);
  std::map<const Node*, NodeProfile> by_node;
  for (const auto& [key, p] : plans_) {
    const auto& steps = p->plan->steps;
    for (const auto& c : p->contexts) {
      const Executor& e = *c->executor;
      for (size_t i = 0; i < steps.size(); ++i) {
        if (e.step_runs()[i] == 0) continue;
        NodeProfile& n = by_node[steps[i].node];
        n.node = steps[i].node;
        n.calls += e.step_runs()[i];
        n.seconds += e.step_seconds()[i];
        n.allocations += e.step_allocations()[i];
        const double runs = static_cast<double>(e.step_runs()[i]);
        n.flops += runs * e.step_costs()[i].flops;
        n.bytes += runs * e.step_costs()[i].bytes;
      }
    }
  }
  std::vector<NodeProfile> v;
  for (const auto& up : graph_->nodes())
    if (auto it = by_node.find(up.get()); it != by_node.end()) v.push_back(it->second);
  return v;
}

void Session::ResetProfile() {
  std::unique_lock<std::shared_mutex> lock(state_mu_);
  std::lock_guard<std::mutex> plans_lock(plans_mu_);
  for (auto& [key, p] : plans_)
    for (auto& c : p->contexts) c->executor->ResetProfile();
}

}  // namespace mixtrain
