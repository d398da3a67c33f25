// Where a model reads its weights: the inputs of each op that hold a layer's parameters (Conv's
// W and B, Gemm's B and C, a norm's scale and bias, Gather's table, ...), one row per op in
// parameter_positions.cc. passes/parameters.h decides from them which initializers train: a
// float initializer read in such a position is a parameter whatever the exporter named it.
//
// Exporters put views and casts between an initializer and its reader (tf2onnx stores a Conv1D
// kernel behind Unsqueeze/Transpose and a PReLU slope negated; the precision pass adds a Cast),
// so a read is found by following the value through ops that only move, reshape or map its
// elements one by one (view ops, elementwise unary ops, Transpose, Slice, Split, a Concat of
// constants only: torch's LSTM W re-ordered from Slices) to the first node that does anything
// else.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace mixtrain {

// One read of an initializer (or of a view of it): by which node, at which input, and what that
// input is ("Conv W", "Add bias after a product"; empty when it is not a parameter position).
struct InitializerRead {
  const Node* node = nullptr;
  size_t input = 0;
  std::string position;

  // "Conv W (node 'c1')", or "Pow input 1 (node 'p')" for a read in no parameter position.
  std::string Describe() const;
};

// Every read of initializer `v` past the view chains (each reader once per input it reads). Reads
// of dims only (Shape, Size) are left out: they do not use the values.
std::vector<InitializerRead> ReadsOf(const Value& v);

// The parameter position input `i` of node `n` is ("Conv W"), or "" when it is none.
std::string ParameterPosition(const Node& n, size_t i);

}  // namespace mixtrain
