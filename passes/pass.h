// Passes rewrite a Graph; the PassManager runs them in order, verifies after each, and can dump
// the graph after any pass by name (DESIGN.md).
#pragma once

#include <functional>
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

class PassManager {
 public:
  void Add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  // Verify the graph after every pass (on by default; always on in tests).
  void set_verify(bool v) { verify_ = v; }
  // Called after each pass with its name and the graph (for --dump-after).
  void set_after_pass(std::function<void(absl::string_view, const Graph&)> cb) {
    after_pass_ = std::move(cb);
  }
  // Runs every pass in order. An error is prefixed with the pass name.
  absl::Status Run(Graph& g);
  const std::vector<std::unique_ptr<Pass>>& passes() const { return passes_; }

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
  bool verify_ = true;
  std::function<void(absl::string_view, const Graph&)> after_pass_;
};

}  // namespace mixtrain
