// Communicator::MpiWorld: the MPI implementation (Debian's Open MPI, libopenmpi-dev).
#include "mixtrain/communicator.h"

// The C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mixtrain {
inline namespace v1 {
namespace {

absl::Status MpiError(int code, const char* what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return absl::InternalError(absl::StrCat("MPI ", what, " failed: ", std::string(text, len)));
}

#define MT_MPI(call, what)                                        \
  do {                                                            \
    if (int rc_ = (call); rc_ != MPI_SUCCESS) return MpiError(rc_, what); \
  } while (0)

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, len);
    library_ = v.substr(0, v.find(','));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override {
    return absl::StrCat("MPI (", library_, "), rank ", rank_, " of ", size_);
  }

  absl::Status AllReduceSum(float* data, size_t count, bool fixed_order) override {
    if (size_ == 1 && !fixed_order) return absl::OkStatus();
    // MPI counts are ints; a chunk also bounds the fixed-order gather buffer (K x 4 MiB).
    constexpr size_t kChunk = size_t{1} << 20;
    for (size_t begin = 0; begin < count; begin += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, count - begin));
      float* x = data + begin;
      if (!fixed_order) {
        MT_MPI(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, comm_), "Allreduce");
        continue;
      }
      // Every rank gathers every rank's values and adds them in rank order from 0, so all ranks
      // compute the same sum the same way (MPI_Allreduce promises neither order nor equality).
      gathered_.resize(static_cast<size_t>(size_) * kChunk);
      MT_MPI(MPI_Allgather(x, n, MPI_FLOAT, gathered_.data(), n, MPI_FLOAT, comm_), "Allgather");
      for (int i = 0; i < n; ++i) {
        float s = 0.0f;
        for (int r = 0; r < size_; ++r) s += gathered_[static_cast<size_t>(r) * n + i];
        x[i] = s;
      }
    }
    return absl::OkStatus();
  }

  [[noreturn]] void Abort(int exit_code) override {
    MPI_Abort(comm_, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; should it, end this process at least
  }

  absl::Status AllGather(const void* send, size_t bytes, void* recv) override {
    if (bytes > static_cast<size_t>(INT_MAX)) return absl::InvalidArgumentError("AllGather: too many bytes");
    const int n = static_cast<int>(bytes);
    MT_MPI(MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_), "Allgather");
    return absl::OkStatus();
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::string library_;
  std::vector<float> gathered_;
};

void FinalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> Communicator::MpiWorld() {
  static std::mutex mu;
  static std::shared_ptr<Communicator> world;
  std::lock_guard<std::mutex> lock(mu);
  if (world) return world;
  int initialized = 0;
  MT_MPI(MPI_Initialized(&initialized), "Initialized");
  if (!initialized) {
    // Open MPI's shared-memory transport copies large messages straight between processes with
    // process_vm_readv (CMA), which containers commonly forbid: the copy fails ("Read -1,
    // expected N, errno = 14") and the rank crashes. The copy through shared memory works
    // everywhere; a user who knows CMA works here can set the variable to "cma".
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", /*overwrite=*/0);
    // Keep Open MPI's plugins mapped until exit, so a leak checker can name the library behind
    // what MPI never frees (an unloaded plugin shows as "<unknown module>").
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", /*overwrite=*/0);
    int provided = 0;
    MT_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "Init_thread");
    std::atexit(FinalizeMpi);
  }
  MPI_Comm comm;
  MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "Comm_dup");
  MT_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "Comm_set_errhandler");
  world = std::make_shared<MpiCommunicator>(comm);
  return world;
}

}  // namespace v1
}  // namespace mixtrain
