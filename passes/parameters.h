// Which initializers train by default: what the framework trains, decided by each value's role
// in the graph, not by its name. A float initializer that a node reads as a layer's weight (a
// parameter position: Conv's W and B, Gemm's B and C, a constant MatMul operand, a norm's scale
// and bias, Gather's table, an RNN's W/R/B, a bias added to a product, a non-scalar scale; the
// table is in parameter_positions.cc, and views and casts in between are looked through) is a
// parameter whatever the exporter named it: tf2onnx names a Conv bias ".../Squeeze:0" and a
// depthwise kernel "const_fold_opt__153", TorchScript an nn.PReLU slope "onnx::PRelu_62".
// Exporters also store their own constants as float initializers (GELU coefficients, attention
// scales, masks, exponents); those sit in no parameter position, and training them changes the
// model (a Pow exponent gets a NaN gradient, scales drift). The rule, first match wins:
//   1. not a float tensor                               -> constant
//   2. a BatchNormalization running mean/var             -> state (updated by the step, not trained)
//   3. made by a pass: folded by canonicalization (Constant nodes, constant subgraphs) or a
//      pass's own constant                               -> constant
//   4. torch's dynamo exporter says what each of the program's inputs is (the graph signature in
//      the graph's metadata, a kind on each value): PARAMETER -> parameter; BUFFER,
//      CONSTANT_TENSOR... -> constant. An initializer its optimizer folded ("folded_from") from a
//      parameter (a transposed Linear weight; pos.weight[arange(T)]) -> parameter, from buffers
//      only (rotary tables) -> constant; any other initializer of such a model is the
//      exporter's own -> constant
//   5. read in a parameter position (or, before unroll_rnn wrote it out, an RNN's W, R or B)
//                                                        -> parameter; a one-element value also
//      read elsewhere (a slope that is also an exponent) is ambiguous: a warning names it
//   6. in no parameter position, names break the tie:
//      tf2onnx: Keras variables are read through "ReadVariableOp" -> parameter, else constant;
//      a one-element "onnx::..." (TorchScript's folded scalars) -> constant;
//      otherwise -> parameter
// --trainable=REGEX replaces the default set by the float initializers it matches (state
// excepted); --freeze=REGEX removes what it matches. LoRA adapters (kLoraRole) always train but
// where --freeze matches them; in a graph with adapters nothing else trains by default, and
// --trainable adds to the adapters.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mixtrain {

enum class InitializerRole { kParameter, kState, kConstant };

struct InitializerClass {
  InitializerRole role = InitializerRole::kParameter;
  std::string reason;  // why, in a few words ("torch.export kind BUFFER")
  // The parameter position it is read in ("Conv W (node 'c1')"; the first of several), or "".
  std::string position;
  // Set when the rule's answer is a guess: a one-element value read both in a parameter position
  // and elsewhere. Says both reads and the flag that decides it.
  std::string ambiguity;
};

// Metadata key the canonicalization pass sets on initializers it made by folding (the value is
// the folded op), and other forward passes on float constants they add (kPassConstant): such
// initializers never train.
inline constexpr char kFoldedMetadata[] = "mixtrain.folded";
inline constexpr char kPassConstant[] = "pass constant";
// Metadata key unroll_rnn sets on initializers that were a recurrent node's W, R or B (the value
// says which), so they keep their role after the node is gone.
// Metadata key the lora pass sets on the adapters it adds ("A" or "B"; passes/lora.h): they are
// parameters whatever else the rule says, and where a graph has them the model's own parameters
// train only where --trainable names them (LoRA trains the adapters alone).
inline constexpr char kLoraRole[] = "mixtrain.lora";
inline constexpr char kLoraAdapterReason[] = "a LoRA adapter";
inline constexpr char kRecurrentWeightMetadata[] = "mixtrain.recurrent_weight";
// The dynamo exporter's metadata: per value, its graph's signature, what a folded value came from.
inline constexpr char kTorchExportKind[] = "pkg.torch.export.graph_signature.InputSpec.kind";
inline constexpr char kTorchExportSignature[] = "pkg.torch.export.ExportedProgram.graph_signature";
inline constexpr char kOnnxscriptFoldedFrom[] = "pkg.onnxscript.optimizer.folded_from";

std::map<const Value*, InitializerClass> ClassifyInitializers(const Graph& g);

struct TrainableSelection {
  std::string trainable;  // ECMAScript regex over whole names; empty = the default rule
  std::string freeze;
};

// The initializers that train under `sel` (before asking whether they reach a loss). Fails on a
// bad regex.
absl::StatusOr<absl::flat_hash_set<const Value*>> SelectTrainable(const Graph& g,
                                                                  const TrainableSelection& sel);

// What a user should hear about the trainable set `sel` gives: each initializer read in a
// parameter position that does not train (exporter metadata or the flags froze it) and each
// ambiguous one, naming it, the rule and the flag that changes it. Fails on a bad regex.
absl::StatusOr<std::vector<std::string>> TrainabilityWarnings(const Graph& g, const TrainableSelection& sel);

}  // namespace mixtrain
