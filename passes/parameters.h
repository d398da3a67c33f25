// Which initializers train by default: what the framework trains. Exporters also store their own
// constants as float initializers (GELU coefficients, attention scales, rotary frequencies, masks:
// torch's dynamo exporter names them val_N, the TorchScript exporter onnx::Op_N, tf2onnx Const:0);
// training those changes the model (a Pow exponent gets a NaN gradient, scales drift). The rule,
// first match wins:
//   1. not a float tensor                               -> constant
//   2. a BatchNormalization running mean/var             -> state (updated by the step, not trained)
//   3. torch's dynamo exporter says what each of the program's inputs is (the graph signature in
//      the graph's metadata, a kind on each value): PARAMETER -> parameter; BUFFER,
//      CONSTANT_TENSOR... -> constant. An initializer its optimizer folded ("folded_from") from a
//      parameter (a transposed Linear weight; pos.weight[arange(T)]) -> parameter, from buffers
//      only (rotary tables) -> constant; any other initializer of such a model is the
//      exporter's own -> constant
//   4. tf2onnx: Keras variables are read through "ReadVariableOp" -> parameter; so are the W, R
//      and B of an LSTM/GRU/RNN node (tf2onnx folds the Keras layer's weights into them);
//      anything else -> constant
//   5. a one-element "onnx::..." (TorchScript exporter's folded scalars) -> constant (its larger
//      onnx:: tensors may be folded weights, e.g. a transposed Linear weight, and train)
//   6. folded by canonicalization                        -> constant
//   7. otherwise                                         -> parameter
// --trainable=REGEX replaces the default set by the float initializers it matches (state
// excepted); --freeze=REGEX removes what it matches.
#pragma once

#include <map>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mixtrain {

enum class InitializerRole { kParameter, kState, kConstant };

struct InitializerClass {
  InitializerRole role = InitializerRole::kParameter;
  std::string reason;  // why, in a few words ("torch.export kind BUFFER")
};

// Metadata key the canonicalization pass sets on initializers it made by folding (the value is
// the folded op), and other forward passes on float constants they add (kPassConstant): such
// initializers never train.
inline constexpr char kFoldedMetadata[] = "mixtrain.folded";
inline constexpr char kPassConstant[] = "pass constant";
// Metadata key unroll_rnn sets on initializers that were a recurrent node's W, R or B (the value
// says which), so they keep their role after the node is gone.
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

}  // namespace mixtrain
