// The import canonicalization stage (passes/canonicalize.cc): shape-data propagation and
// folding, constant folding with the kernels it is handed, simplification, dead-code removal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "passes/parameters.h"
#include "passes/pass.h"
#include "passes/target.h"

namespace mixtrain {

// What the stage did, for `mixtrain check` and `dump`.
struct CanonicalizeReport {
  int shape_values = 0;          // int values computed from shapes, now initializers
  int folded_nodes = 0;          // nodes run once and replaced by their results, Constant nodes included
  int simplified = 0;            // Identity/Dropout(0) bypassed, CastLike -> Cast, sequences and constant Gathers -> Split
  int removed_nodes = 0;         // dead nodes removed
  int removed_initializers = 0;  // initializers nothing used any more
  std::vector<std::string> not_folded;  // constant nodes the evaluator refused, with why
};

struct CanonicalizeOptions {
  // What trains (never folded into anything); the default rule of passes/parameters.h.
  TrainableSelection params;
  // Nodes whose outputs have more elements than this stay nodes.
  int64_t fold_limit_elements = int64_t{1} << 20;
  CanonicalizeReport* report = nullptr;  // filled when set
  // Folds constant nodes with the kernels that run graphs (the target's, passes/target.h); null:
  // only shape data folds.
  HostEvaluator evaluator = nullptr;
};

std::unique_ptr<Pass> MakeCanonicalizePass(CanonicalizeOptions options = {});

}  // namespace mixtrain
