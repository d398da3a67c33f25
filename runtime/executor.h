// The executor: runs one ExecutionPlan's kernels in order over memory bound once — an arena for
// intermediates, the session's persistent initializer buffers, the plan's folded constants and,
// per run, the fed tensors. One OpKernel per step, created once and kept (kernels cache
// per-shape state such as oneDNN primitives). Nodes run one at a time; kernels use the cores.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/registry.h"
#include "kernels/device.h"
#include "runtime/node_cost.h"
#include "runtime/plan.h"

namespace mixtrain {

// The process's heap-allocation count so far (a malloc wrapper the program installs, e.g. the
// CLI's); profiled runs charge each kernel the allocations made while it ran. Null: not counted.
using AllocationCountFn = uint64_t (*)();
void SetProfilerAllocationCounter(AllocationCountFn counter);
AllocationCountFn ProfilerAllocationCounter();

class Executor {
 public:
  // `initializers` are the device addresses of the graph's initializers (Graph::initializers()
  // order); they must stay valid until rebound or the executor dies.
  // `host_initializers` (same order; may be empty): where the host holds an initializer's current
  // contents when they stay fixed (not state), else null; kernels see them as host_input.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(std::shared_ptr<const ExecutionPlan> plan,
                                                          Device* device,
                                                          const std::vector<void*>& initializers,
                                                          Communicator* communicator = nullptr,
                                                          const std::vector<const void*>& host_initializers = {});

  // Kernels see no input as constant (SessionOptions::cache_constant_inputs = false): they derive
  // and keep nothing from one. Before the first run.
  void ForgetConstantInputs() {
    for (KernelContext& c : contexts_) c.set_constant_inputs({});
  }
  // Points initializer slots at new addresses (after the session replaced a buffer).
  void BindInitializers(const std::vector<void*>& initializers);
  // Points the host views of initializer slots at new host copies (Create's host_initializers).
  void BindHostInitializers(const std::vector<const void*>& host_initializers);

  // Runs every step. `feeds` holds the host address of each graph input's data (null for inputs
  // not fed): used in place on a device that shares host memory, else copied into device buffers
  // the executor keeps (the plan's folded constants are uploaded once, at Create). `run_index` is handed to every kernel (KernelContext::run_index).
  absl::Status Run(const std::vector<const void*>& feeds, uint64_t run_index = 0);

  const ExecutionPlan& plan() const { return *plan_; }
  void* SlotData(int slot) const { return views_[slot].data; }

  // Per-step wall time and heap allocations (when a counter is set), summed over the runs made
  // while profiling was on; the static cost of one call of each step.
  void set_profiling(bool on) { profiling_ = on; }
  // Record the steps once and replay them (Device::CanRecord: CUDA graphs): the first run goes
  // step by step (kernels pick algorithms and allocate their scratch), the second is recorded,
  // and every run after replays the recording, one launch for the whole plan. Never for a plan
  // with random ops (their kernels key the draw on the run index, which a recording would fix)
  // nor while profiling. Off by default.
  void set_record(bool on) { record_ = on; }
  bool replaying() const { return recording_ != nullptr; }
  const std::vector<double>& step_seconds() const { return step_seconds_; }
  const std::vector<int64_t>& step_runs() const { return step_runs_; }
  const std::vector<int64_t>& step_allocations() const { return step_allocations_; }
  const std::vector<NodeCost>& step_costs() const { return step_costs_; }
  void ResetProfile();

 private:
  Executor() = default;

  std::shared_ptr<const ExecutionPlan> plan_;
  Device* device_ = nullptr;
  DeviceBuffer arena_;
  std::vector<TensorView> views_;  // one per slot; never resized after Create (contexts point in)
  std::vector<TensorView> host_views_;  // per slot: host copies of constants and fixed initializers
  std::vector<std::unique_ptr<OpKernel>> kernels_;
  std::vector<KernelContext> contexts_;
  std::vector<int> feed_slots_;  // slots whose address is the fed tensor's, patched per run
  // Off host memory: one device buffer per feed slot (feed_slots_ order) and per plan constant.
  std::vector<DeviceBuffer> feed_buffers_;
  std::vector<DeviceBuffer> constant_buffers_;
  bool profiling_ = false;
  bool record_ = false;
  bool has_random_ = false;  // a step is a random op (training-mode Dropout)
  int64_t runs_ = 0;
  std::unique_ptr<Device::Recording> recording_;
  std::vector<double> step_seconds_;
  std::vector<int64_t> step_runs_;
  std::vector<int64_t> step_allocations_;
  std::vector<NodeCost> step_costs_;
};

}  // namespace mixtrain
