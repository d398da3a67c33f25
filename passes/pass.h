// Passes rewrite a Graph; the PassManager runs them in order, verifies after each, and can dump
// the graph after any pass by name (docs/architecture.md).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace mixtrain {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual absl::string_view name() const = 0;
  // True when the graph changed.
  virtual absl::StatusOr<bool> Run(Graph& g) = 0;
};

// Runs passes in order, verifying the graph after each (a pass that leaves it invalid is a bug,
// reported with the pass's name).
class PassManager {
 public:
  void Add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  // Runs every pass in order. An error is prefixed with the pass name.
  absl::Status Run(Graph& g);

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace mixtrain
