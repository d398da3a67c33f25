// The CUDA Device (see kernels/cuda/cuda_device.h), built into the CUDA backend plugin
// libmixtrain_cuda.so with the CUDA kernels (kernels/cuda/): only that library links cudart,
// cuBLAS and cuBLASLt. libmixtrain.so loads it on first use where an NVIDIA driver exists
// (kernels/cuda/cuda_device.cc), through MixtrainCudaBackend() below.
#include "kernels/cuda/cuda_device.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "graph/check.h"

#include <cstring>
#include <deque>
#include <utility>

#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace mixtrain {
namespace {

// cuBLASLt's recommended workspace on Hopper is 32 MiB; smaller GPUs use less of it.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

absl::Status ProbeCuda() {
  int runtime_version = 0;
  cudaRuntimeGetVersion(&runtime_version);
  int driver_version = 0;
  cudaError_t err = cudaDriverGetVersion(&driver_version);
  if (err != cudaSuccess || driver_version == 0)
    return absl::UnavailableError("no NVIDIA driver found (libcuda.so.1 is not loadable)");
  int count = 0;
  err = cudaGetDeviceCount(&count);
  cudaGetLastError();  // these probe errors are not sticky; clear them for later calls
  if (err == cudaErrorInsufficientDriver)
    return absl::UnavailableError(absl::StrCat("the NVIDIA driver supports CUDA ", driver_version / 1000,
                                               ".", driver_version % 1000 / 10, " but mixtrain was built with CUDA ",
                                               runtime_version / 1000, ".", runtime_version % 1000 / 10));
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0))
    return absl::UnavailableError("the NVIDIA driver is loaded but reports no CUDA device");
  if (err != cudaSuccess)
    return absl::UnavailableError(absl::StrCat("CUDA cannot start: ", cudaGetErrorString(err)));
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess)
    return absl::UnavailableError(absl::StrCat("cannot query GPU 0: ", cudaGetErrorString(err)));
  if (prop.major < 8)
    return absl::UnavailableError(absl::StrCat("GPU 0 (", prop.name, ") has compute capability ", prop.major,
                                               ".", prop.minor, "; mixtrain's CUDA kernels need 8.0 or newer"));
  return absl::OkStatus();
}

class DeviceMemory final : public RawAllocator {
 public:
  absl::StatusOr<void*> Alloc(size_t bytes) override {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat("out of GPU memory (cudaMalloc of ", bytes, " bytes)"));
    }
    MT_CUDA_CHECK(err);
    return p;
  }
  void Release(void* p) override { MT_CUDA_CHECK(cudaFree(p)); }
};

class PinnedMemory final : public RawAllocator {
 public:
  absl::StatusOr<void*> Alloc(size_t bytes) override {
    void* p = nullptr;
    cudaError_t err = cudaMallocHost(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat("out of pinned host memory (", bytes, " bytes)"));
    }
    MT_CUDA_CHECK(err);
    return p;
  }
  void Release(void* p) override { MT_CUDA_CHECK(cudaFreeHost(p)); }
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal), device_cache_(&device_raw_), pinned_cache_(&pinned_raw_) {}

  absl::Status Init() {
    MT_CUDA_CHECK(cudaSetDevice(ordinal_));
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cublasLtHandle_t lt;
    MT_CUBLAS_CHECK(cublasLtCreate(&lt));
    res_.cublaslt = lt;
    cudnnHandle_t dnn;
    MT_CUDNN_CHECK(cudnnCreate(&dnn));
    MT_CUDNN_CHECK(cudnnSetStream(dnn, stream_));
    res_.cudnn = dnn;
    MT_ASSIGN_OR_RETURN(res_.workspace, device_cache_.Allocate(kWorkspaceBytes));
    res_.workspace_bytes = kWorkspaceBytes;
    return absl::OkStatus();
  }

  ~CudaDevice() override {
    if (stream_ == nullptr) return;
    MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    RetireStaging(/*wait=*/true);
    if (res_.workspace) device_cache_.Free(res_.workspace);
    if (res_.cublaslt) MT_CUBLAS_CHECK(cublasLtDestroy(static_cast<cublasLtHandle_t>(res_.cublaslt)));
    if (res_.cudnn) MT_CUDNN_CHECK(cudnnDestroy(static_cast<cudnnHandle_t>(res_.cudnn)));
    for (cudaEvent_t e : idle_events_) MT_CUDA_CHECK(cudaEventDestroy(e));
    MT_CUDA_CHECK(cudaStreamDestroy(stream_));
  }

  DeviceType type() const override { return DeviceType::kCUDA; }
  absl::StatusOr<void*> Allocate(size_t bytes) override { return device_cache_.Allocate(bytes); }
  void Free(void* p) override { device_cache_.Free(p); }

  // Pageable host memory cannot be copied asynchronously, so the bytes go through a pinned
  // block that is returned to its cache once an event says the copy has read it.
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    RetireStaging(/*wait=*/false);
    absl::StatusOr<void*> staging = pinned_cache_.Allocate(bytes);
    if (!staging.ok()) {  // no pinned memory left: a synchronous copy is slower, not wrong
      MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
      MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    std::memcpy(*staging, src, bytes);
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, *staging, bytes, cudaMemcpyHostToDevice, stream_));
    cudaEvent_t done = TakeEvent();
    MT_CUDA_CHECK(cudaEventRecord(done, stream_));
    staging_.push_back({*staging, done});
  }
  // Into pageable memory the copy completes before returning (CUDA's rule for D2H to pageable).
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void Synchronize() override {
    MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    RetireStaging(/*wait=*/false);
  }
  void* stream() override { return stream_; }
  const void* kernel_resources() const override { return &res_; }

  // CUDA graphs: stream capture in thread-local mode (other threads' CUDA calls are unaffected;
  // this thread may not synchronize or allocate while capturing, which the kernels avoid after a
  // plan's first run). A failed capture or instantiation gives null: the executor then runs the
  // plan kernel by kernel.
  class Graph final : public Recording {
   public:
    Graph(cudaGraph_t g, cudaGraphExec_t e, cudaStream_t s) : graph_(g), exec_(e), stream_(s) {}
    ~Graph() override {
      cudaGraphExecDestroy(exec_);
      cudaGraphDestroy(graph_);
    }
    void Replay() override { MT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

   private:
    cudaGraph_t graph_;
    cudaGraphExec_t exec_;
    cudaStream_t stream_;
  };
  bool CanRecord() const override { return true; }
  void BeginRecording() override {
    MT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  }
  std::unique_ptr<Recording> EndRecording() override {
    cudaGraph_t g = nullptr;
    cudaError_t err = cudaStreamEndCapture(stream_, &g);
    if (err != cudaSuccess || g == nullptr) {
      (void)cudaGetLastError();  // clear it: the plan runs without a graph instead
      if (g != nullptr) cudaGraphDestroy(g);
      return nullptr;
    }
    cudaGraphExec_t e = nullptr;
    if (cudaGraphInstantiate(&e, g, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      cudaGraphDestroy(g);
      return nullptr;
    }
    return std::make_unique<Graph>(g, e, stream_);
  }

 private:
  struct Staging {
    void* block;
    cudaEvent_t done;
  };

  cudaEvent_t TakeEvent() {
    if (!idle_events_.empty()) {
      cudaEvent_t e = idle_events_.back();
      idle_events_.pop_back();
      return e;
    }
    cudaEvent_t e;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  // Returns staging blocks whose copies finished (all of them when `wait`) to the pinned cache.
  void RetireStaging(bool wait) {
    while (!staging_.empty()) {
      Staging& s = staging_.front();
      if (wait) {
        MT_CUDA_CHECK(cudaEventSynchronize(s.done));
      } else {
        cudaError_t q = cudaEventQuery(s.done);
        if (q == cudaErrorNotReady) break;  // copies finish in order: later ones are not done either
        MT_CUDA_CHECK(q);
      }
      pinned_cache_.Free(s.block);
      idle_events_.push_back(s.done);
      staging_.pop_front();
    }
  }

  int ordinal_;
  cudaStream_t stream_ = nullptr;
  DeviceMemory device_raw_;
  PinnedMemory pinned_raw_;
  CachingAllocator device_cache_;
  CachingAllocator pinned_cache_;
  CudaStreamResources res_;
  std::deque<Staging> staging_;
  std::vector<cudaEvent_t> idle_events_;
};

}  // namespace

absl::Status CudaAvailableImpl() {
  static const absl::Status* status = new absl::Status(ProbeCuda());
  return *status;
}

absl::StatusOr<std::unique_ptr<Device>> MakeCudaDeviceImpl(int ordinal) {
  MT_RETURN_IF_ERROR(CudaAvailable());
  int count = 0;
  MT_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (ordinal < 0 || ordinal >= count)
    return absl::InvalidArgumentError(absl::StrCat("GPU ", ordinal, " does not exist (", count, " found)"));
  auto d = std::make_unique<CudaDevice>(ordinal);
  MT_RETURN_IF_ERROR(d->Init());
  return std::unique_ptr<Device>(std::move(d));
}


}  // namespace mixtrain

// The plugin's one entry point, looked up by name (extern "C": no mangling) by the loader.
extern "C" __attribute__((visibility("default"))) const mixtrain::CudaBackendApi* MixtrainCudaBackend() {
  static const mixtrain::CudaBackendApi api = {&mixtrain::CudaAvailableImpl, &mixtrain::MakeCudaDeviceImpl};
  return &api;
}
