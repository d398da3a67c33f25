// The inference pipeline: passes that rewrite a forward graph so it runs faster without changing
// what it computes beyond rounding (fusions into ai.mixtrain ops, layout changes, weights
// re-arranged once). Each pass that pays on every backend registers itself with a position; a
// backend adds its own at their positions through its Target (passes/target.h: the CPU's conv
// layouts); `OptimizeForInference` runs them all in position order, then `cleanup`. `mixtrain run/bench` and InferenceSession run it by
// default; `mixtrain dump --passes=inference` shows its result.
//   MT_REGISTER_INFERENCE_PASS(fuse_conv, 20, [] { return std::make_unique<FuseConvPass>(); });
// A registered inference pass is also an ordinary pass of that name (dump --passes=fuse_conv).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "passes/pass_registry.h"
#include "passes/target.h"

namespace mixtrain {

void RegisterInferencePass(const std::string& name, int position, PassFactory factory);
// The inference pipeline for `target`, in order: unroll_loop, then the registered passes and the
// target's own (passes/target.h) by position.
std::vector<std::string> InferencePassNames(const Target& target);
// That pipeline, then cleanup, as one pass named "inference" (dump --passes=inference).
std::unique_ptr<Pass> MakeInferencePass(const Target& target);
// The import every forward graph a session runs starts from, optimized or not: canonicalization
// (sequence ops, exporters' dropout masks into what has kernels), then unroll_loop (no kernel runs
// a Loop or Scan; one it cannot write out stays and fails the plan naming it), both folding with
// the target's evaluator.
absl::Status ImportForInference(Graph& g, const Target& target);
// Canonicalization, then the inference pipeline for `target` (verifying after each pass), then
// cleanup.
absl::Status OptimizeForInference(Graph& g, const Target& target);

#define MT_REGISTER_INFERENCE_PASS(name, position, factory)                         \
  static const bool mt_inference_pass_registered_##name =                          \
      (::mixtrain::RegisterPass(#name, factory),                                   \
       ::mixtrain::RegisterInferencePass(#name, position, factory), true)

}  // namespace mixtrain
