// ExecutionPlan: what the planner decides for one input-shape signature and the executor runs.
// Every value the plan touches is a slot with concrete dtype and dims and a place to live: the
// arena, a fed tensor, a persistent initializer buffer, or a constant computed at plan time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "kernels/registry.h"
#include "runtime/arena.h"

namespace mixtrain {

enum class SlotKind : uint8_t {
  kArena,        // bytes at `offset` in the plan's arena
  kFeed,         // the tensor fed for graph input `index` (zero-copy on the host)
  kInitializer,  // the session's persistent buffer of initializer `index` (Graph::initializers())
  kConstant,     // ExecutionPlan::constants[index], computed at plan time
};

struct Slot {
  const Value* value = nullptr;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  SlotKind kind = SlotKind::kArena;
  int index = -1;     // feed / initializer / constant index, per kind
  size_t offset = 0;  // kArena: byte offset in the arena
  size_t nbytes() const { return static_cast<size_t>(NumElements(dims)) * DTypeSize(dtype); }
};

// One kernel launch. Inputs/outputs index `slots`; -1 is an omitted optional input/output.
struct Step {
  const Node* node = nullptr;
  const KernelDef* kernel = nullptr;
  int64_t opset = 0;  // of the node's domain
  std::vector<int> inputs;
  std::vector<int> outputs;
  // Per input: its contents are fixed for the plan's life (a folded constant, or an initializer
  // no state update writes), so a kernel may cache work derived from them (prepacked weights).
  std::vector<bool> constant_inputs;
};

// After a run, copy slot `from` into initializer `to` (state updates that could not be
// written in place).
struct StateCopy {
  int from = -1;
  int to = -1;
};

struct PlanStats {
  size_t peak_planned_bytes = 0;  // the arena size
  size_t naive_bytes = 0;         // every kernel output in its own buffer
  int steps = 0;                  // kernels run per Run
  int folded_nodes = 0;           // computed at plan time
  int view_nodes = 0;             // Reshape-like nodes turned into zero-copy views
  int inplace_outputs = 0;        // outputs written over a dying input
  int inplace_state_updates = 0;  // state updates written straight into the initializer
  // For memory reports: the node of each step, and the arena's buffers by lifetime (in steps).
  std::vector<const Node*> step_nodes;
  std::vector<BufferLifetime> buffers;
  // Bytes of the persistent buffers the plan reads (initializers; state included).
  size_t initializer_bytes = 0;
};

struct ExecutionPlan {
  std::vector<Slot> slots;
  std::vector<Step> steps;
  std::vector<Tensor> constants;
  std::vector<int> fetch_slots;       // in fetch order
  std::vector<StateCopy> state_copies;
  // Initializers whose contents were folded into `constants` or that steps read as constant
  // inputs: replacing one invalidates the plan.
  std::vector<int> folded_initializers;
  PlanStats stats;
};

}  // namespace mixtrain
