#include "graph/verifier.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace mixtrain {

absl::Status Verify(const Graph& g) {
  absl::flat_hash_set<const Value*> available;
  absl::flat_hash_set<std::string> names;
  for (const Value* v : g.values()) {
    if (!names.insert(v->name).second)
      return absl::InternalError(absl::StrCat("duplicate value name '", v->name, "'"));
    if (v->is_initializer() && v->producer)
      return absl::InternalError(absl::StrCat("initializer '", v->name, "' has a producer"));
  }
  for (const Value* v : g.inputs()) available.insert(v);
  for (const Value* v : g.initializers()) available.insert(v);
  absl::flat_hash_set<std::string> node_names;
  for (const auto& up : g.nodes()) {
    const Node* n = up.get();
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      const Value* in = n->input(i);
      if (in == nullptr) continue;
      if (!available.contains(in)) {
        if (in->producer == nullptr)
          return absl::InvalidArgumentError(
              absl::StrCat("node '", n->name(), "' (", n->op_type(), ") input ", i, " '",
                           in->name, "' is not produced by any node, input or initializer"));
        return absl::InvalidArgumentError(
            absl::StrCat("node '", n->name(), "' (", n->op_type(), ") uses '", in->name,
                         "' before its producer '", in->producer->name(), "' (not topological)"));
      }
      int uses = 0;
      for (const Node* c : in->consumers) uses += c == n;
      int expected = 0;
      for (const Value* x : n->inputs()) expected += x == in;
      if (uses != expected)
        return absl::InternalError(
            absl::StrCat("consumer links of '", in->name, "' disagree with node '", n->name(), "'"));
    }
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      const Value* out = n->output(i);
      if (out == nullptr) continue;
      if (out->producer != n || out->producer_output != static_cast<int>(i))
        return absl::InternalError(
            absl::StrCat("producer link of '", out->name, "' disagrees with node '", n->name(), "'"));
      if (available.contains(out))
        return absl::InvalidArgumentError(
            absl::StrCat("value '", out->name, "' is assigned twice (node '", n->name(), "')"));
      available.insert(out);
    }
  }
  for (const Value* out : g.outputs())
    if (!available.contains(out))
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", out->name, "' is not produced by any node"));
  return absl::OkStatus();
}

}  // namespace mixtrain
