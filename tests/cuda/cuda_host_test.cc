// Host-side tests of the CUDA backend that run on every machine: the caching allocator's
// bookkeeping over a fake raw allocator, --device selection in every branch, and CudaAvailable()
// answering cleanly (no crash, a reason) where there is no GPU.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/backend_choice.h"

namespace mixtrain {
namespace {

// Hands out distinct fake addresses, counts calls, and fails beyond a byte budget.
class FakeRaw final : public RawAllocator {
 public:
  explicit FakeRaw(size_t budget) : budget_(budget) {}
  absl::StatusOr<void*> Alloc(size_t bytes) override {
    if (in_use_ + bytes > budget_) return absl::ResourceExhaustedError("fake device full");
    in_use_ += bytes;
    void* p = std::malloc(bytes);
    sizes_[p] = bytes;
    ++allocs_;
    return p;
  }
  void Release(void* p) override {
    ASSERT_TRUE(sizes_.count(p)) << "release of an unknown block";
    in_use_ -= sizes_[p];
    sizes_.erase(p);
    std::free(p);
    ++releases_;
  }
  size_t in_use() const { return in_use_; }
  int allocs() const { return allocs_; }
  int releases() const { return releases_; }

 private:
  size_t budget_;
  size_t in_use_ = 0;
  std::map<void*, size_t> sizes_;
  int allocs_ = 0, releases_ = 0;
};

TEST(CachingAllocatorTest, SizeClasses) {
  EXPECT_EQ(CachingAllocator::SizeClass(0), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(1), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(512), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(513), 1024u);
  EXPECT_EQ(CachingAllocator::SizeClass(3000), 4096u);
  EXPECT_EQ(CachingAllocator::SizeClass(size_t{2} << 20), size_t{2} << 20);
  EXPECT_EQ(CachingAllocator::SizeClass((size_t{2} << 20) + 1), size_t{4} << 20);
  EXPECT_EQ(CachingAllocator::SizeClass((size_t{5} << 20) + 7), size_t{6} << 20);
  // Every class holds its request and keeps 512-byte (so 64-byte) alignment of offsets.
  for (size_t b : {1ul, 100ul, 4097ul, 65536ul, 1ul << 21, (1ul << 23) + 3}) {
    EXPECT_GE(CachingAllocator::SizeClass(b), b);
    EXPECT_EQ(CachingAllocator::SizeClass(b) % 512, 0u);
  }
}

// The property the training loop relies on: once a step's sizes have been seen, repeating the
// step allocates nothing new from the device.
TEST(CachingAllocatorTest, NoRawAllocationAfterWarmup) {
  FakeRaw raw(1ul << 30);
  {
    CachingAllocator a(&raw);
    const std::vector<size_t> step = {100, 4096, 4096, 70000, 3u << 20, 17};
    for (int iter = 0; iter < 5; ++iter) {
      std::vector<void*> blocks;
      for (size_t s : step) {
        auto p = a.Allocate(s);
        ASSERT_TRUE(p.ok()) << p.status();
        blocks.push_back(*p);
      }
      EXPECT_EQ(std::set<void*>(blocks.begin(), blocks.end()).size(), blocks.size());
      for (void* p : blocks) a.Free(p);
      if (iter == 0) {
        EXPECT_EQ(a.stats().raw_allocs, 6);
      }
    }
    EXPECT_EQ(a.stats().raw_allocs, 6);
    EXPECT_EQ(a.stats().reuses, 4 * 6);
    EXPECT_EQ(a.stats().live_bytes, 0u);
    EXPECT_EQ(a.stats().cached_bytes, raw.in_use());
  }
  EXPECT_EQ(raw.in_use(), 0u);  // the destructor gave every cached block back
  EXPECT_EQ(raw.releases(), 6);
}

TEST(CachingAllocatorTest, SameClassReusesTheFreedBlock) {
  FakeRaw raw(1ul << 20);
  CachingAllocator a(&raw);
  void* p = *a.Allocate(1000);
  a.Free(p);
  void* q = *a.Allocate(600);  // same 1024-byte class
  EXPECT_EQ(p, q);
  void* r = *a.Allocate(2000);  // another class: a new block
  EXPECT_NE(r, q);
  EXPECT_EQ(a.stats().live_bytes, 1024u + 2048u);
  a.Free(q);
  a.Free(r);
}

TEST(CachingAllocatorTest, OutOfMemoryEmptiesTheCacheThenRetries) {
  FakeRaw raw(8192);
  CachingAllocator a(&raw);
  void* small = *a.Allocate(4096);
  a.Free(small);  // cached, still holding 4096 of the 8192 budget
  auto big = a.Allocate(8192);
  ASSERT_TRUE(big.ok()) << big.status();  // succeeded after releasing the cached block
  EXPECT_EQ(a.stats().raw_releases, 1);
  auto more = a.Allocate(512);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(more.status().message().find("512 bytes"), absl::string_view::npos) << more.status();
  a.Free(*big);
}

TEST(CachingAllocatorDeathTest, FreeOfUnknownBlockAborts) {
  FakeRaw raw(1 << 20);
  CachingAllocator a(&raw);
  int not_ours = 0;
  EXPECT_DEATH(a.Free(&not_ours), "did not hand out");
}

TEST(DeviceSelectTest, ParsesTheFlag) {
  EXPECT_EQ(*ParseDeviceFlag("cpu"), DeviceRequest::kCpu);
  EXPECT_EQ(*ParseDeviceFlag("cuda"), DeviceRequest::kCuda);
  EXPECT_EQ(*ParseDeviceFlag("auto"), DeviceRequest::kAuto);
  auto bad = ParseDeviceFlag("gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--device=gpu"), absl::string_view::npos) << bad.status();
}

TEST(DeviceSelectTest, EveryBranch) {
  const absl::Status no_gpu = absl::UnavailableError("no NVIDIA driver found");
  // cpu: always the CPU, silently.
  auto cpu = SelectDevice(DeviceRequest::kCpu, no_gpu);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->type, DeviceType::kCPU);
  EXPECT_TRUE(cpu->note.empty());
  // auto with a GPU: CUDA; without: the CPU and a note that says why.
  auto a1 = SelectDevice(DeviceRequest::kAuto, absl::OkStatus());
  ASSERT_TRUE(a1.ok());
  EXPECT_EQ(a1->type, DeviceType::kCUDA);
  auto a2 = SelectDevice(DeviceRequest::kAuto, no_gpu);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2->type, DeviceType::kCPU);
  EXPECT_NE(a2->note.find("running on the CPU"), std::string::npos) << a2->note;
  EXPECT_NE(a2->note.find("no NVIDIA driver found"), std::string::npos) << a2->note;
  // cuda: the GPU, or an error naming the flag and the reason.
  auto c1 = SelectDevice(DeviceRequest::kCuda, absl::OkStatus());
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(c1->type, DeviceType::kCUDA);
  auto c2 = SelectDevice(DeviceRequest::kCuda, no_gpu);
  ASSERT_FALSE(c2.ok());
  EXPECT_NE(c2.status().message().find("--device=cuda"), absl::string_view::npos) << c2.status();
  EXPECT_NE(c2.status().message().find("no NVIDIA driver found"), absl::string_view::npos);
}

// On this machine, whatever it has: CudaAvailable answers without crashing, gives a reason when
// it says no, and the selection and device factory agree with it.
TEST(CudaAvailableTest, AnswersCleanlyAndAgreesWithSelection) {
  absl::Status st = CudaAvailable();
  auto dev = MakeCudaDevice(0);
  auto cuda = SelectDevice(DeviceRequest::kCuda);
  auto autos = SelectDevice(DeviceRequest::kAuto);
  ASSERT_TRUE(autos.ok());
  if (st.ok()) {
    ASSERT_TRUE(dev.ok()) << dev.status();
    EXPECT_EQ((*dev)->type(), DeviceType::kCUDA);
    EXPECT_TRUE(cuda.ok());
    EXPECT_EQ(autos->type, DeviceType::kCUDA);
  } else {
    std::printf("CudaAvailable(): %s\n", st.ToString().c_str());
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(st.message().empty());
    ASSERT_FALSE(dev.ok());
    EXPECT_EQ(dev.status(), st);
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(autos->type, DeviceType::kCPU);
    EXPECT_FALSE(autos->note.empty());
  }
  auto cpu = BackendFor(DeviceType::kCPU).MakeDevice();
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->type(), DeviceType::kCPU);
}

}  // namespace
}  // namespace mixtrain
