// The inference pipeline: passes that rewrite a forward graph so it runs faster without changing
// what it computes beyond rounding (fusions into ai.mixtrain ops, layout changes, weights
// re-arranged once). Each pass registers itself with a position; `OptimizeForInference` runs them
// all in position order, then `cleanup`. `mixtrain run/bench` and InferenceSession run it by
// default; `mixtrain dump --passes=inference` shows its result.
//   MT_REGISTER_INFERENCE_PASS(fuse_conv, 20, [] { return std::make_unique<FuseConvPass>(); });
// A registered inference pass is also an ordinary pass of that name (dump --passes=fuse_conv).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "passes/pass_registry.h"

namespace mixtrain {

// What the machine the graph will run on does well, as the inference passes need it. The runtime
// registers the query (from the CPU features and oneDNN's ISA) so passes/ does not include
// kernels/; without one, every rewrite is allowed.
struct TargetTraits {
  bool channel_blocked = true;  // 16-channel-blocked conv/pool kernels (AVX-512)
  // The channel block of the training step's conv region (conv_layout_train): 16 where
  // channel_blocked, 8 where oneDNN has AVX2 kernels for nC<sp>8c (fp32 only), 0 for none.
  int64_t training_channel_block = 16;
};
using TargetTraitsQuery = TargetTraits (*)();
// Installs `query`; returns the one it replaces (tests restore it).
TargetTraitsQuery RegisterTargetTraits(TargetTraitsQuery query);
TargetTraits CurrentTargetTraits();

void RegisterInferencePass(const std::string& name, int position, PassFactory factory);
// Registered inference passes, in position order.
std::vector<std::string> InferencePassNames();
// The import every forward graph a session runs starts from, optimized or not: canonicalization
// (sequence ops, exporters' dropout masks into what has kernels), then unroll_loop (no kernel runs
// a Loop or Scan; one it cannot write out stays and fails the plan naming it).
absl::Status ImportForInference(Graph& g);
// ImportForInference, then every inference pass in order (verifying after each), then cleanup.
absl::Status OptimizeForInference(Graph& g);

#define MT_REGISTER_INFERENCE_PASS(name, position, factory)                         \
  static const bool mt_inference_pass_registered_##name =                          \
      (::mixtrain::RegisterPass(#name, factory),                                   \
       ::mixtrain::RegisterInferencePass(#name, position, factory), true)

}  // namespace mixtrain
