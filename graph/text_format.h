// Human-readable renderings of a Graph for `mixtrain dump`: a text listing with a summary, and a
// Graphviz DOT picture coloured by the dtype each node computes in.
#pragma once

#include <string>

#include "graph/graph.h"

namespace mixtrain {

// One line per node: "name: Op(in: f32[N,3], ...) -> (out: f32[N,8])", then a summary with the
// node count per op and the parameter count and bytes per dtype.
std::string GraphToText(const Graph& g);

// Graphviz DOT. Nodes are filled by compute dtype (the "precision" annotation if set, else the
// first float output's dtype): fp32, fp16, bf16, other; Cast nodes are drawn as bold diamonds.
// Edges carry dtype and shape. A legend explains the colours.
std::string GraphToDot(const Graph& g);

// The dtype a node computes in, as used for the colours (kUndefined when it has no float output
// and no annotation).
DType ComputeDType(const Node& n);

}  // namespace mixtrain
