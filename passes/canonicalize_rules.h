// Rewrite rules of the canonicalization stage (passes/canonicalize.cc) that turn what exporters
// write for the runtime of their framework into ops this engine runs and differentiates. Each
// rule looks at one node, reads constants through `constant` (initializers that do not train,
// Constant nodes, values folded in this sweep; null when not a constant) and returns whether it
// rewrote something; the canonicalization's dead-code removal deletes what it bypassed.
#pragma once

#include <functional>

#include "graph/graph.h"

namespace mixtrain {

using ConstantLookup = std::function<const Tensor*(const Value*)>;

// Sequences (passes/canonicalize_sequences.cc): a SplitToSequence or SequenceConstruct whose
// readers are SequenceAt at constant positions, SequenceLength and ConcatFromSequence becomes
// plain tensors: a Split (with a Squeeze per piece for keepdims=0) or the constructed tensors
// themselves, SequenceAt the piece, SequenceLength a constant, ConcatFromSequence a Concat (of
// Unsqueezed pieces for new_axis=1). `n` is the sequence's producer.
bool SequenceToTensors(Graph& g, Node* n, const ConstantLookup& constant);

// Exporters' random-mask dropout (passes/canonicalize_dropout.cc), as torch's dynamo exporter
// writes an in-place nn.Dropout (bernoulli) or torch's dropout decomposition:
//   Mul(x, Cast(Less(RandomUniformLike(s), q))) times 1/q in any order (Mul/Div by scalars),
//   or Where(Less(r, q), x / q, 0); Greater(r, p) for Less(r, 1 - p)
//     =>  Dropout(x, ratio = 1 - q, training_mode = true)
// which the train-mode pass seeds, autodiff differentiates through its mask and evaluation and
// export turn off. `n` is the RandomUniformLike.
bool RandomMaskToDropout(Graph& g, Node* n, const ConstantLookup& constant);

}  // namespace mixtrain
