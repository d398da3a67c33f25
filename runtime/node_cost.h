// What one kernel call of a plan step costs in arithmetic and memory traffic, for the profiler's
// GFLOP/s and GB/s columns. Static: computed from the step's planned shapes, not measured.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "kernels/registry.h"

namespace mixtrain {

struct NodeCost {
  // Multiply-adds count 2. Counted for matrix products and convolutions (and their gradients),
  // the ops whose speed is measured in FLOP/s; 0 for everything else.
  double flops = 0;
  // Bytes of every input and output the call reads or writes once (a lower bound on traffic).
  double bytes = 0;
};

NodeCost EstimateCost(const Node& node, const std::vector<const TensorView*>& inputs,
                      const std::vector<const TensorView*>& outputs);

}  // namespace mixtrain
