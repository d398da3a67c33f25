// Structural checks of the IR: SSA, links, topological order, known dtypes on initializers.
#pragma once

#include "absl/status/status.h"
#include "graph/graph.h"

namespace mixtrain {

// OK when: every node input is a graph input, an initializer or an earlier node's output; every
// value has at most one producer and its links agree; graph outputs are produced or are inputs /
// initializers; no two values share a name; the node order is topological. Errors name the node
// or value.
absl::Status Verify(const Graph& g);

}  // namespace mixtrain
