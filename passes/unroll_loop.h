// unroll_loop (passes/unroll_loop.cc): ONNX Loop and Scan nodes whose number of iterations is
// known once the model is canonicalized, written out iteration by iteration in the body's own ops,
// so autodiff differentiates them and every backend runs them (Loop and Scan have no kernel).
#pragma once

#include <memory>
#include <string>

#include "graph/graph.h"
#include "passes/parameters.h"
#include "passes/pass.h"
#include "passes/target.h"

namespace mixtrain {

// `params` says which initializers train: those are never folded into the unrolled graph (a
// loop's bookkeeping that depends only on constants is, with `evaluator`: without one, only loops
// whose bookkeeping needs no kernel unroll).
std::unique_ptr<Pass> MakeUnrollLoopPass(TrainableSelection params, HostEvaluator evaluator);

// An ONNX Loop or Scan node.
bool IsLoopOp(const Node& n);

// Why unroll_loop leaves Loop/Scan node `n` of `g` as it is (a trip count computed at run time, a
// condition that depends on data, ...), or "" when it unrolls it. Autodiff names it when such a
// node needs a gradient.
std::string WhyLoopNotUnrolled(const Graph& g, const Node& n, HostEvaluator evaluator);

}  // namespace mixtrain
