// A random batch for a model's inputs, written as .npz, for CLI tests that train models with no
// data set of their own.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "runtime/npy.h"

namespace mixtrain::cli_test {

// Four examples for the model's inputs (symbolic dims as 4): floats N(0, 1), token ids in
// [0, 10), and labels in [0, classes) shaped as the logits without their class axis.
inline absl::Status WriteRandomBatch(const std::string& model, int class_axis, const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model));
  std::mt19937 rng(1);
  std::map<std::string, Tensor> arrays;
  auto dims_of = [](const Shape& s) {
    std::vector<int64_t> dims;
    for (const Dim& d : s.dims) dims.push_back(d.known() ? d.value : 4);
    return dims;
  };
  for (const Value* v : g->inputs()) {
    if (v->is_initializer()) continue;
    Tensor t(v->dtype, dims_of(v->shape));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (v->dtype == DType::kI64) t.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
      else t.data_as<float>()[i] = std::normal_distribution<float>()(rng);
    }
    arrays.emplace(v->name, std::move(t));
  }
  std::vector<int64_t> logits = dims_of(g->outputs()[0]->shape);
  const int64_t axis = class_axis < 0 ? class_axis + static_cast<int64_t>(logits.size()) : class_axis;
  const int64_t classes = logits[axis];
  logits.erase(logits.begin() + axis);
  Tensor labels(DType::kI64, logits);
  for (int64_t i = 0; i < labels.numel(); ++i) labels.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % classes);
  arrays.emplace("labels", std::move(labels));
  return WriteNpz(path, arrays);
}

}  // namespace mixtrain::cli_test
