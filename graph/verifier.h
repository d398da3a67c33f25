// Checks of the IR. Verify (structure: SSA, links, topological order) runs after every pass; the
// importer additionally runs the checks a model read from a file must pass before any shape rule,
// pass or kernel sees it (onnx_import.cc: VerifyAcyclic, TopoSort, Verify, VerifySchemas,
// InferShapes, VerifyTypesAndSizes). Every error names the node (name and op) or the value.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "graph/graph.h"

namespace mixtrain {

// OK when: every node input is a graph input, an initializer or an earlier node's output; every
// value has at most one producer and its links agree; graph outputs are produced or are inputs /
// initializers; no two values share a name; the node order is topological. Errors name the node
// or value.
absl::Status Verify(const Graph& g);

// In any node order: fails when the nodes' data dependencies form a cycle, naming the nodes on
// it ("node 'a' (Add) -> node 'b' (Relu) -> node 'a'").
absl::Status VerifyAcyclic(const Graph& g);

// Per op schema, for the nodes of the default ONNX domain (ONNX's own schemas of the model's
// opset) and of ai.mixtrain (the schemas in graph/mixtrain_schemas.h): the input and output
// counts, required inputs given as "", attribute types, required attributes, unknown attributes,
// and element types already known (declared inputs, initializers, value_info) against the
// schema's type constraints. Ops without a schema (other domains, ops newer than the ONNX library)
// are not checked; at opsets newer than the library knows (18..21 with ONNX 1.12), ops whose
// inputs or attributes changed since are not checked either.
absl::Status VerifySchemas(const Graph& g);

// After shape inference: every node's element types against its schema's type constraints (as in
// VerifySchemas), and every value whose shape is fully known has an element count that fits
// int64 and a byte size within MaxTensorBytes().
absl::Status VerifyTypesAndSizes(const Graph& g);

// The largest tensor a model may hold, in bytes: MIXTRAIN_MAX_TENSOR_BYTES when set, else the
// smaller of the machine's physical memory and 2^40.
absl::StatusOr<int64_t> MaxTensorBytes();

// Fails, naming `what`, when the element count of `dims` overflows int64 or a tensor of that many
// `dtype` elements exceeds MaxTensorBytes(). For checks before an allocation.
absl::Status CheckTensorSize(std::span<const int64_t> dims, DType dtype, const std::string& what);

}  // namespace mixtrain
