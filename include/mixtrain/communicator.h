// mixtrain public API: Communicator, the ranks a data-parallel Trainer reduces its gradients
// over (TrainConfig::data_parallel; docs/distributed.md). MPI's world is built in; a service with
// its own transport may implement the interface and pass it to Trainer::Create.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mixtrain {
inline namespace v1 {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // 0 .. size()-1
  virtual int size() const = 0;
  // Sums `count` floats over the ranks, in place. Every rank must end with the same bits.
  // `fixed_order`: the sum is 0 + x_0 + x_1 + ... + x_{K-1} in rank order, so it is reproducible
  // from run to run and equal to summing the ranks' values in one process.
  virtual absl::Status AllReduceSum(float* data, size_t count, bool fixed_order) = 0;
  // Rank r's `bytes` bytes land at recv + r * bytes on every rank (recv holds size() * bytes).
  virtual absl::Status AllGather(const void* send, size_t bytes, void* recv) = 0;
  // "MPI (Open MPI v4.1.4), rank 0 of 2", for logs.
  virtual std::string Describe() const = 0;
  // Ends every rank's process with `exit_code`: what a rank that failed alone does, since the
  // others would wait for it in their next collective (MPI_Abort).
  [[noreturn]] virtual void Abort(int exit_code) = 0;

  // The processes mpirun started (a duplicate of MPI_COMM_WORLD, errors returned, not fatal):
  // initializes MPI (thread level SERIALIZED) unless the program already has, and finalizes it at
  // exit if it did. A process started without mpirun is one rank of one. The same object is
  // returned on every call.
  static absl::StatusOr<std::shared_ptr<Communicator>> MpiWorld();
};

}  // namespace v1
}  // namespace mixtrain
