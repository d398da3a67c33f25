// The public Dataset's read-ahead: while the caller trains on one batch, a worker thread gathers
// the batch it will most likely ask for next, so reading (from memory-mapped files, converting
// element types) overlaps the step instead of adding to it. The guess is the range one stride on
// in the same order (the stride: how far the last two requests' starts lie apart, else the batch
// size), which is what a loop over an epoch's batches, or over one rank's shard of each global
// batch, asks for. A prefetched batch is used only when its example indices equal the request's,
// so a wrong guess costs a wasted gather, never a wrong batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "mixtrain/tensor.h"

namespace mixtrain::api {

class ReadAhead {
 public:
  // Gathers the examples `indices` names (from the data set this read-ahead serves).
  using GatherFn = std::function<absl::StatusOr<TensorMap>(const std::vector<int64_t>& indices)>;
  explicit ReadAhead(GatherFn gather) : gather_(std::move(gather)) {}
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // order[begin, end) gathered (from the prefetched batch when it holds exactly those examples),
  // then the likely next range handed to the worker.
  absl::StatusOr<TensorMap> Gather(const std::vector<int64_t>& order, int64_t begin, int64_t end);

 private:
  void Work();

  const GatherFn gather_;
  std::mutex call_mu_;  // one Gather at a time: the guess follows one caller's requests
  std::mutex mu_;       // guards what the worker shares
  std::condition_variable cv_;
  std::optional<std::vector<int64_t>> job_;             // indices for the worker to gather
  std::vector<int64_t> ready_indices_;                  // what `ready_` holds
  std::optional<absl::StatusOr<TensorMap>> ready_;      // the worker's result
  bool busy_ = false, stop_ = false;
  int64_t last_begin_ = -1;
  std::thread worker_;  // started by the first Gather
};

}  // namespace mixtrain::api
