// Subgraph attributes (the bodies of Loop and Scan, the branches of If). The IR keeps them as
// their serialized onnx::AttributeProto (Attribute::Kind::kOpaque), so export reproduces them;
// this file reads and rewrites them.
//
// A body may read values of the enclosing graph by name ("outer-scope reads"): tf2onnx's Keras
// RNN loops read the time-major input that way. Such a read is no input of the node, so nothing
// in the IR would see the dependency: dead-code removal would delete the producer, a pass that
// renames the value would leave the body reading a name that no longer exists, and a topological
// sort could put the producer after the loop. Import therefore makes each outer-scope read of a
// Loop or Scan (opset >= 9) an explicit input (MakeOuterReadsExplicit): one more loop-carried
// (Loop) or state (Scan) value that the body passes through unchanged, which is the same
// computation in plain ONNX. If has no such mechanism; an If's outer reads stay implicit.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "onnx/onnx_pb.h"

namespace mixtrain {

// The graph held by attribute `name` of `n` (a GRAPH attribute), or nullopt.
std::optional<onnx::GraphProto> SubgraphAttr(const Node& n, const std::string& name);
// Replaces (or adds) GRAPH attribute `name` of `n`.
void SetSubgraphAttr(Node& n, const std::string& name, const onnx::GraphProto& g);

// The names `g` (or any graph nested in it) reads that none of them defines, in first-read order:
// what it reads from enclosing scopes.
std::vector<std::string> OuterScopeReads(const onnx::GraphProto& g);

// Renames every read (node inputs, graph outputs) of the keys of `names` in `g` and its nested
// graphs.
void RenameReads(onnx::GraphProto* g, const absl::flat_hash_map<std::string, std::string>& names);

// Loop and Scan (opset >= 9) nodes whose body reads values of `g` by name get those values as
// explicit loop-carried (Loop) or state (Scan) inputs that the body passes through; the node is
// replaced by one with the extra inputs and outputs (the extra outputs are unused). Returns whether
// any node changed; the graph is sorted topologically again when one did.
absl::StatusOr<bool> MakeOuterReadsExplicit(Graph& g);

// Imports the body `body` of a node of `outer` as a graph of its own: the body's formal inputs are
// the graph's inputs, its outputs the graph's outputs, with the outer model's opsets. Fails when
// the body reads a name it does not define (an outer-scope read MakeOuterReadsExplicit did not
// turn into an input).
absl::StatusOr<std::unique_ptr<Graph>> ImportSubgraph(const onnx::GraphProto& body, const Graph& outer);

}  // namespace mixtrain
