// CheckTrainingData's checks over arrays that need not be in memory: a data set read through
// memory maps is checked a chunk of rows at a time, so checking it never holds it whole.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "mixtrain/data.h"

namespace mixtrain::api {

// An array as the checks see it: element type, full shape, and a reader that hands `visit`
// consecutive chunks covering the array (each with the flat index of its first element).
struct CheckedArray {
  ElementType type = ElementType::kFloat32;
  std::vector<int64_t> shape;
  using Visit = std::function<absl::Status(const HostTensor& chunk, int64_t first_element)>;
  std::function<absl::Status(const Visit&)> read;
};

// CheckTrainingData after the shape checks: the arrays options.inputs names are present and fit,
// then values (NaN/Inf, labels within the classes) chunk by chunk.
absl::Status CheckArrays(const std::map<std::string, CheckedArray>& arrays, const std::string& source,
                         const DataCheckOptions& options);

}  // namespace mixtrain::api
