// The planner: turns a Graph plus the concrete types of what is fed into an ExecutionPlan.
// It computes every value's dtype and dims with the op table's inference rules, folds small
// computations whose inputs are all known (Shape -> Gather -> Concat -> Reshape chains), turns
// Reshape-like nodes into zero-copy views, picks a kernel per node (failing at plan time, naming
// node, op and dtypes, when there is none), lets elementwise outputs overwrite dying inputs,
// writes state updates straight into their initializer where liveness allows, and packs all
// remaining buffers into one arena by lifetime.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "runtime/plan.h"

namespace mixtrain {

// What is fed for one graph input.
struct FeedType {
  bool fed = false;  // false only for graph inputs that are also initializers (their default)
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  // The fed contents when the plan may depend on them (a shape computed from an input); the
  // session then keys its plan cache on these contents too.
  const Tensor* value = nullptr;
};

struct PlanRequest {
  DeviceType device = DeviceType::kCPU;
  std::vector<FeedType> feeds;       // one per Graph::inputs(), in order
  std::vector<std::string> fetches;  // value names copied out after the run
  // The initializers' current contents (Graph::initializers() order), for folding; empty = the
  // graph's own tensors.
  std::vector<const Tensor*> initializers;
  // (value produced each run, initializer that takes its contents after the run).
  std::vector<std::pair<std::string, std::string>> state_updates;
  // Initializers another session writes between runs (shared state): like update targets,
  // never folded and never a constant input, but nothing here writes them.
  std::vector<std::string> shared_state;
  // false: a dry run. The state stays as it is: the update targets still count as changing (never
  // folded), but nothing writes them and nodes that only feed updates do not run.
  bool run_state_updates = true;
  // Nodes whose inputs are all known and whose outputs have at most this many elements in all
  // are computed at plan time.
  int64_t fold_limit_elements = 65536;
};

// Builds the plan. The graph must be topologically sorted. When a shape depends on the contents
// of fed inputs whose values the request did not give, fails and lists those inputs' indices in
// `*wants_values` (non-empty only then) so the caller can plan again with the contents.
absl::StatusOr<std::unique_ptr<ExecutionPlan>> BuildPlan(const Graph& graph,
                                                         const PlanRequest& request,
                                                         std::vector<int>* wants_values);

// The ops of `graph` with no kernel at all on `device` (domain-qualified, sorted), leaving out
// view ops and what planning computes on the host (nodes reading only initializers, dims, or
// other such nodes). A quick check before any plan, lenient where it cannot know: BuildPlan is
// exact (it knows the dtypes and what folds) and names every missing kernel in one error.
std::vector<std::string> OpsWithoutKernels(const Graph& graph, DeviceType device);

// What a session would plan on its first run, without a device: every non-initializer input
// fed at the dims its shape gives (symbolic dims as `symbolic_dim`), the graph's outputs fetched,
// `state_updates` as the session's. OK when the plan builds; the planner's Unimplemented error
// (every op the device lacks a kernel for, with its dtypes) when kernels are missing; other
// errors (a shape the guessed dims do not fit) are the planner's own. `stats`, when set, gets the
// plan's statistics (a memory report before anything runs); `fetches`, when set, replaces the
// graph's outputs as what the run reads back (what is fetched lives to the end).
absl::Status DryPlan(const Graph& graph, DeviceType device,
                     const std::vector<std::pair<std::string, std::string>>& state_updates,
                     int64_t symbolic_dim = 2, PlanStats* stats = nullptr,
                     const std::vector<std::string>* fetches = nullptr);

}  // namespace mixtrain
