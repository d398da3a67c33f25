// LoRA (low-rank adaptation, Hu et al. 2021; HF PEFT's `LoraConfig`): for each targeted 2-D
// weight W read by a MatMul or Gemm as y = x·W (W seen as [in, out], read directly or through a
// Transpose / Gemm's transB), the lora pass adds a low-rank branch
//     y = x·W + (alpha / rank) · (dropout(x)·A)·B,   A [in, rank], B [rank, out]
// with A drawn as PEFT draws it (Kaiming-uniform, U(-1/sqrt(in), 1/sqrt(in))) and B zero, so the
// model computes what it did before the first update. A Conv's kernel W [out, in, k...], when
// --lora-targets names it, gets PEFT's Conv branch: y = Conv(x, W) + s · Conv(Conv(x, A), B), A
// [rank, in, k...] with the Conv's strides, pads and dilations, B [out, rank, 1...] (1x1). A and B are new initializers named
// "<W>.lora_A" and "<W>.lora_B"; they are the only parameters that train (ClassifyInitializers
// tells them apart by metadata, and under LoRA the model's own parameters train only where
// --trainable names them), so W gets no gradient and no optimizer state.
//
// Which weights: --lora-targets=REGEX over initializer names or the names of the products
// reading them; by default the weights of the products inside the model's repeated blocks,
// found from the graph's structure: a 2-D weight read only by products (a tied embedding, also
// read by a Gather, is not one) whose [in, out] shape recurs in at least two weights (one per
// block: a transformer's attention and MLP projections), never from exporter names. The head (a
// product whose result reaches a graph output through no other product: an LM head, a
// classifier) stays as it is even where its shape equals a block's. A one-block model has
// nothing repeated and needs --lora-targets.
//
// The pass runs first on the training step and on the evaluation graph (passes/pipeline.cc);
// the prepared model the export starts from has no adapters, and the Trainer folds them into W
// when it exports (MergeLoraDelta): the merged file has the original's initializers and shapes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "passes/parameters.h"
#include "passes/pass.h"

namespace mixtrain {

// Value metadata on every adapter initializer: kLoraRole (passes/parameters.h) is "A" or "B";
// these say which weight it adapts, the branch's scale alpha/rank (%.9g) and whether W is
// stored [out, in].
inline constexpr char kLoraTarget[] = "mixtrain.lora.target";
inline constexpr char kLoraScale[] = "mixtrain.lora.scale";
inline constexpr char kLoraTransposed[] = "mixtrain.lora.transposed";

struct LoraOptions {
  int64_t rank = 0;  // 0: no adapters
  float alpha = 0;   // the branch is scaled by alpha / rank
  std::string targets;  // ECMAScript regex over whole initializer or product-node names; "" = default
  float dropout = 0;    // PEFT's lora_dropout, on the branch's input
  uint64_t seed = 0;    // A's draw mixes it with W's name (the step and evaluation draw the same A)
  // Initial A and B by adapter name (an adapter file, --lora-init), replacing the draw. Every
  // target must have both and nothing else may be there.
  std::shared_ptr<const std::map<std::string, Tensor>> init;
  std::string init_path;  // named in errors about `init`
};

struct LoraTarget {
  std::string weight;                 // the initializer W
  std::vector<std::string> products;  // the MatMul/Gemm/Conv nodes reading it
  int64_t in = 0, out = 0;            // a Conv's: W's input and output channels
  bool transposed = false;            // W is stored [out, in]
  std::vector<int64_t> kernel;        // a Conv kernel W [out, in, k...]: k...; empty for a 2-D W
};

std::string LoraAName(const std::string& weight);
std::string LoraBName(const std::string& weight);
// A's fan-in: in, times the kernel's size for a Conv (what bounds the rank and A's draw).
int64_t LoraFanIn(const LoraTarget& t);
// The adapters' shapes: A [in, rank] and B [rank, out] for a 2-D W; for a Conv kernel PEFT's
// lora_A.weight [rank, in, k...] and lora_B.weight [out, rank, 1...].
std::vector<int64_t> LoraADims(const LoraTarget& t, int64_t rank);
std::vector<int64_t> LoraBDims(const LoraTarget& t, int64_t rank);

// The weights `options` adapts in `g` (a canonicalized model), in graph order. Fails, naming
// the culprit, when the targets match nothing, a matched weight is not 2-D (nor an ungrouped
// Conv's kernel) or is read by something other than a product, or the rank exceeds min(in, out)
// (min(in x kernel, out) for a Conv). Conv kernels are targets only when --lora-targets names them.
absl::StatusOr<std::vector<LoraTarget>> FindLoraTargets(const Graph& g, const LoraOptions& options);

std::unique_ptr<Pass> MakeLoraPass(LoraOptions options);

// Under AMP the frozen targets are stored once, in the low type (fp32 masters are for what
// trains): each W of the prepared model becomes a `low` initializer read through Cast(W, f32),
// which cleanup cancels against the precision pass's Cast to `low` before the product, so the
// step and the evaluation read the one low copy. No-op for rank 0 or an fp32 run (which still
// has its targets checked: FindLoraTargets' errors come from here, before any step is built).
absl::Status StoreLoraTargetsLow(Graph& g, const LoraOptions& options, DType low);
// Export: W (stored low or not) becomes the fp32 initializer `merged` again, read directly.
absl::Status RestoreLoraTarget(Graph& g, Value* w, Tensor merged);

// The adapters the lora pass added to `g`, read back from their metadata.
struct LoraAdapter {
  std::string weight, a, b;
  float scale = 1;
  bool transposed = false;
};
std::vector<LoraAdapter> LoraAdapters(const Graph& g);

// W + scale·A·B in W's layout (transposed: W is [out, in]), in W's dtype (f32, or a low float
// type widened for the sum and rounded back). A Conv kernel W [out, in, k...] (rank >= 3) gets
// scale·B·A with A [rank, in, k...] and B [out, rank, 1...].
absl::StatusOr<Tensor> MergeLoraDelta(const Tensor& w, const Tensor& a, const Tensor& b, float scale,
                                      bool transposed);

}  // namespace mixtrain
