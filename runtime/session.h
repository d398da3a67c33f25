// Session: the embeddable API that runs a Graph. Feeds bind the graph inputs' symbolic dims; each
// new input signature (dtypes, dims, and for inputs that shapes depend on, contents) gets its own
// ExecutionPlan and Executor, cached. Initializers live in persistent device buffers across runs;
// `state_updates` make values computed by a run the initializers' new contents (training state).
//
// Threads: every method may be called from any thread. On the CPU, runs that write no state (no
// state_updates, or write_state = false) run concurrently: each takes an execution context of its
// plan's (an Executor: arena, kernels and their oneDNN primitives) from a pool that grows to the
// number of runs made at once, so nothing a kernel writes is shared. Runs that write state, runs
// on a device with memory of its own (one stream), and the methods that change the session
// (SetInitializer, profiling) hold the session alone; planning a new signature holds the plan
// cache. Kernels use the cores inside each node.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "kernels/device.h"
#include "runtime/executor.h"
#include "runtime/plan.h"

namespace mixtrain {

struct SessionOptions {
  DeviceType device = DeviceType::kCPU;
  // When set, the device to run on (its type wins over `device`): sessions that must share one GPU
  // stream and allocator (a Trainer's step and evaluation) are given the same one.
  std::shared_ptr<Device> run_on;
  // Value produced each run -> initializer that holds it after the run.
  std::map<std::string, std::string> state_updates;
  // On host memory, the state lives in the graph's own initializer tensors, written in place,
  // instead of in a private copy of each: the caller gives up their being immutable, and every
  // holder of those buffers (clones of the graph, a session reading them as `shared_state`) sees
  // the current state. The Trainer's step: its weights and moments are held once.
  bool state_in_graph = false;
  // Initializers whose contents another session writes between this one's runs (its state,
  // shared through the graph's tensors): never folded at plan time or cached by a kernel.
  std::vector<std::string> shared_state;
  // Plan-time folding limit: nodes with known inputs and at most this many output elements.
  int64_t fold_limit_elements = 65536;
  bool profile = false;  // time every kernel (see Session::Profile)
  // Record each plan's steps on its second run and replay them after (Executor::set_record: CUDA
  // graphs on a GPU; devices that cannot record ignore it).
  bool record_steps = false;
  // A plan whose arena does not fit the memory the process may still take (runtime/memory_limit.h)
  // is refused before anything is allocated, with this advice appended to the error (host memory
  // only: a device's own memory is the device's to refuse).
  std::string memory_advice = "A smaller batch needs less.";
  // For collective ops (data-parallel training's ai.mixtrain.AllReduce); null: none may run.
  std::shared_ptr<Communicator> communicator;
  // Kernels may keep work derived from a constant input (KernelContext::input_constant): oneDNN's
  // products keep a constant weight reordered into their layout, a copy as large as the weight
  // per product reading it. false: they read constant inputs where they are (the Trainer's LoRA
  // steps, whose frozen weights are most of the model: 1.1B parameters, 2.2 GB per copy).
  bool cache_constant_inputs = true;
};

// Time spent in one node (summed over every plan that ran it).
struct NodeProfile {
  const Node* node = nullptr;
  int64_t calls = 0;
  double seconds = 0;
  int64_t allocations = 0;  // heap allocations while it ran (0 without a counter)
  double flops = 0;         // over all calls (node_cost.h: matrix products and convolutions)
  double bytes = 0;         // inputs and outputs over all calls
};

// Time spent in one op type.
struct OpProfile {
  std::string op_type;
  int64_t calls = 0;
  double seconds = 0;
};

class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Create(std::shared_ptr<const Graph> graph,
                                                         SessionOptions options = {});
  // Copies the graph.
  static absl::StatusOr<std::unique_ptr<Session>> Create(const Graph& graph, SessionOptions options = {});
  ~Session();

  // Runs the graph on `feeds` (graph input name -> tensor) and returns the fetched values (the
  // graph outputs when `fetch_names` is empty), in order. `write_state` = false is a dry run: the
  // state updates (SessionOptions::state_updates) neither run nor write, so the session's state
  // stays as it was (the precision debugger replays a skipped step this way).
  absl::StatusOr<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& feeds,
                                          const std::vector<std::string>& fetch_names = {},
                                          bool write_state = true);
  // Runs the graph for its state updates alone: nothing is fetched, and on a device with its own
  // memory the call returns once the work is queued (the feeds are copied by then), without
  // waiting for the device. A kernel's failure on the device surfaces at the next call that waits.
  absl::Status Launch(const std::map<std::string, Tensor>& feeds);

  // A host copy of an initializer's current contents.
  absl::StatusOr<Tensor> GetInitializer(const std::string& name) const;
  // The initializer's current contents without a copy where they live in host memory (the
  // session's own buffer, which the next run writing state changes); a copy from a device with
  // memory of its own.
  absl::StatusOr<Tensor> InitializerContents(const std::string& name) const;
  // Replaces an initializer's contents (same dtype and dims).
  absl::Status SetInitializer(const std::string& name, const Tensor& value);

  const Graph& graph() const { return *graph_; }
  // Runs made so far; random ops draw from (seed, run count). Checkpoints save and restore it.
  uint64_t run_count() const { return runs_.load(); }
  void set_run_count(uint64_t n) { runs_.store(n); }
  // Statistics of the plan the last Run used; empty before the first Run.
  std::optional<PlanStats> last_plan_stats() const;
  size_t num_cached_plans() const;
  // Execution contexts made for every plan so far (at least one per plan; more after
  // concurrent runs).
  size_t num_execution_contexts() const;

  // Kernel time by op type over the runs made with profiling on, slowest first.
  void set_profiling(bool on);
  std::vector<OpProfile> Profile() const;
  // By node, in graph order; nodes that never ran (folded, views) are left out.
  std::vector<NodeProfile> ProfileByNode() const;
  void ResetProfile();

 private:
  // Run and Launch: the plan for these feeds and fetches, run; `wait` for the device at the end.
  absl::StatusOr<std::vector<Tensor>> RunPlan(const std::map<std::string, Tensor>& feeds,
                                              const std::vector<std::string>& fetches, bool write_state, bool wait);
  struct CachedPlan;
  struct Context;
  class ContextLease;
  // On the CPU an initializer's persistent buffer is a host tensor: the graph's own (read-only,
  // shared with the graph) until the session writes it, then a private copy; with
  // state_in_graph, state stays the graph's own tensor, written in place. On a device with
  // memory of its own every initializer also has a device buffer, uploaded at Init: kernels read
  // that one, and for state (owned) it is the current contents (the host tensor is what was
  // last set, for plan-time folding of the read-only ones).
  struct InitializerBuffer {
    Tensor tensor;
    bool owned = false;
    DeviceBuffer on_device;
  };

  Session() = default;
  absl::Status Init();
  // Checks the feeds against the graph inputs (dtypes, ranks, fixed dims, one size per symbol)
  // and returns the plan-cache key.
  absl::StatusOr<std::string> SignatureKey(const std::map<std::string, Tensor>& feeds,
                                           const std::vector<std::string>& fetches, bool write_state) const;
  bool Matches(const CachedPlan& p, const std::map<std::string, Tensor>& feeds,
               const std::vector<std::string>& fetches, bool write_state) const;
  absl::StatusOr<CachedPlan*> GetPlan(const std::map<std::string, Tensor>& feeds,
                                      const std::vector<std::string>& fetches, bool write_state);
  absl::StatusOr<std::unique_ptr<CachedPlan>> MakePlan(const std::map<std::string, Tensor>& feeds,
                                                       const std::vector<std::string>& fetches,
                                                       bool write_state);
  absl::StatusOr<std::unique_ptr<Context>> MakeContext(std::shared_ptr<const ExecutionPlan> plan) const;
  // An idle context of `p`'s, or a new one when every one is running.
  absl::StatusOr<ContextLease> Acquire(CachedPlan& p);
  std::vector<void*> InitializerAddresses() const;
  // Off host memory: the host copy of each initializer no state update writes (else null).
  std::vector<const void*> HostInitializerAddresses() const;
  void* InitializerAddress(int i) const;

  // Fixed after Create.
  std::shared_ptr<const Graph> graph_;
  SessionOptions options_;
  std::shared_ptr<Device> device_;
  absl::flat_hash_map<std::string, int> init_index_;
  std::vector<std::string> default_fetches_;
  bool concurrent_runs_ = false;  // the device is the host CPU: stateless runs may overlap

  // Lock order: state_mu_, then plans_mu_, then a plan's pool mutex.
  // Shared by runs that may overlap; held alone by runs that write state (or are not
  // concurrent_runs_) and by the methods that change initializers or profiling.
  mutable std::shared_mutex state_mu_;
  std::vector<InitializerBuffer> inits_;  // Graph::initializers() order
  bool profiling_ = false;

  mutable std::mutex plans_mu_;  // the plan cache
  // Graph inputs whose contents key the plan (shapes depend on them); grows as planning learns.
  std::vector<bool> value_keyed_;
  absl::flat_hash_map<std::string, std::unique_ptr<CachedPlan>> plans_;
  CachedPlan* last_ = nullptr;

  std::atomic<uint64_t> runs_{0};
};

}  // namespace mixtrain
