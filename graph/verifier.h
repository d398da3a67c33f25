// Checks of the IR. Verify (structure: SSA, links, topological order) runs after every pass; the
// importer additionally runs the checks a model read from a file must pass before any shape rule,
// pass or kernel sees it (onnx_import.cc: VerifyAcyclic, TopoSort, Verify, VerifySchemas,
// InferShapes, VerifyTypesAndSizes). Every error names the node (name and op) or the value.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"

namespace onnx {
class OpSchema;
}

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
// VerifySchemas), its axis attributes within its input's rank (CheckAxisAttributes), and every
// value whose shape is fully known has an element count that fits int64 and a byte size within
// MaxTensorBytes().
absl::Status VerifyTypesAndSizes(const Graph& g);

// --- per-node rules (verifier_attributes.cc), for the default ONNX domain ---

// Attribute values a type cannot rule out: float attributes finite (except the data a Constant,
// Pad or Clip holds), epsilon >= 0, counts >= 1 (num_outputs, group, num_groups, blocksize,
// strides, dilations, kernel_shape, offset_group), pads (but Pad's own) and Split's sizes >= 0,
// flags (transA, keepdims, ceil_mode, allowzero, ...) 0 or 1, and string choices (auto_pad,
// Resize's modes, Gelu's approximate, Pad's mode, ...) one of theirs.
absl::Status CheckAttributeValues(const Node& n);
// Once the first input's rank r is known: `axis` and each of `axes` within [-r, r-1] (Flatten
// [-r, r], OneHot [-r-1, r], Unsqueeze the output's rank).
absl::Status CheckAxisAttributes(const Node& n);
// The attribute types of an op of an opset newer than the ONNX library: the attributes the op
// gained since (a table), else those of `library_schema` (its latest version there; may be null).
absl::Status CheckNewerOpAttributes(const Node& n, const onnx::OpSchema* library_schema);

// Before any pass runs on a model: every node's op is one mixtrain can run, an op ONNX defines
// (OnnxOpTypes; the error names the nearest) for the default domain, one `runs` accepts (one a
// kernel runs) for any other. The importer does not require it, so a viewer (`mixtrain dump`
// without passes) shows any op. The error lists the first 5 such nodes and counts the rest.
absl::Status VerifyRunnableOps(const Graph& g, const std::function<bool(const Node&)>& runs);

// Every op type of the default ONNX domain, sorted: the library's schemas of any version and the
// ops of opsets 18..21 added after it.
const std::vector<std::string>& OnnxOpTypes();
bool IsOnnxOpType(std::string_view op);
// The candidate nearest to `name` by edit distance (a swap of two adjacent letters is one edit),
// ignoring case ("" when there are none): the "did you mean" of an unknown name.
std::string NearestName(std::string_view name, std::span<const std::string> candidates);

// The largest tensor a model may hold, in bytes: MIXTRAIN_MAX_TENSOR_BYTES when set, else the
// smaller of the machine's physical memory and 2^40.
absl::StatusOr<int64_t> MaxTensorBytes();

// Fails, naming `what`, when the element count of `dims` overflows int64 or a tensor of that many
// `dtype` elements exceeds MaxTensorBytes(). For checks before an allocation.
absl::Status CheckTensorSize(std::span<const int64_t> dims, DType dtype, const std::string& what);

}  // namespace mixtrain
