// Two things the runtime does for devices with memory of their own, checked on the host with a
// fake such device and a probe op this test registers (test.Probe(X, P, S) -> X, a copy that
// notes what its kernel saw):
//   * KernelContext::host_input: a kernel sees the host copy of a fixed initializer (P) and of a
//     folded constant, and none of state (S) or of values computed per run; after
//     SetInitializer it sees the new contents (the CUDA kernels read pads, slice bounds and
//     reduction axes there instead of copying them back from the GPU);
//   * Executor recording (CUDA graphs on a GPU): run 1 goes kernel by kernel, run 2 is recorded,
//     and later runs replay the recording without calling a kernel; a plan with a random op is
//     never recorded, nor a profiled run, and rebinding an initializer drops the recording.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/mixtrain_schemas.h"
#include "graph/shape_inference.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "kernels/device.h"
#include "runtime/session.h"

namespace mixtrain {
namespace {

struct ProbeLog {
  int computes = 0;
  bool saw_p = false, saw_s = false, saw_x = false;
  std::vector<float> p;
};
ProbeLog g_probe;

absl::Status InferProbe(InferContext& ctx) {
  ctx.output(0).dtype = ctx.input(0).dtype;
  ctx.output(0).shape = ctx.input(0).shape;
  return absl::OkStatus();
}
MT_REGISTER_OP_SCHEMAS(host_input_probe, {{"Probe", "test", InferProbe}});

absl::Status ProbeKernel(KernelContext& ctx) {
  ++g_probe.computes;
  g_probe.saw_x = ctx.host_input(0) != nullptr;
  g_probe.saw_s = ctx.host_input(2) != nullptr;
  const TensorView* p = ctx.host_input(1);
  g_probe.saw_p = p != nullptr;
  if (p != nullptr) g_probe.p.assign(p->as<float>(), p->as<float>() + p->numel());
  std::memcpy(ctx.output(0)->data, ctx.input(0)->data, ctx.input(0)->nbytes());
  return absl::OkStatus();
}
MT_REGISTER_KERNELS(host_input_probe) {
  r.Register({"Probe", "test", DeviceType::kCPU, {}, 0, FnKernel(ProbeKernel)});
}

// Host memory behind a device interface that does not share it (every tensor goes through
// copies), optionally able to "record": it notes the protocol; a replay runs nothing.
class FakeDevice final : public Device {
 public:
  explicit FakeDevice(bool can_record) : can_record_(can_record) {}
  DeviceType type() const override { return DeviceType::kCPU; }
  absl::StatusOr<void*> Allocate(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64); }
  void Free(void* p) override { std::free(p); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyToHost(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void Synchronize() override {}
  void* stream() override { return nullptr; }
  bool shares_host_memory() const override { return false; }

  class FakeRecording final : public Recording {
   public:
    explicit FakeRecording(int* replays) : replays_(replays) {}
    void Replay() override { ++*replays_; }

   private:
    int* replays_;
  };
  bool CanRecord() const override { return can_record_; }
  void BeginRecording() override { ++begins; }
  std::unique_ptr<Recording> EndRecording() override { return std::make_unique<FakeRecording>(&replays); }

  int begins = 0, replays = 0;

 private:
  bool can_record_;
};

Tensor F32(std::vector<int64_t> dims, std::vector<float> v) { return Tensor::FromVector<float>(DType::kF32, std::move(dims), v); }

// y = Probe(x, p, s); s' = s + x (so s is state); `random` adds a training-mode Dropout.
std::unique_ptr<Graph> ProbeGraph(bool random) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  g->opset_imports["test"] = 1;
  Value* x = g->AddValue("x", DType::kF32, Shape::Of({3}));
  g->AddInput(x);
  Value* p = g->AddInitializer("p", F32({3}, {7, 8, 9}));
  Value* s = g->AddInitializer("s", F32({3}, {0, 0, 0}));
  Value* in = x;
  if (random) {
    Node* d = g->AddNode("Dropout", {x, g->AddInitializer("ratio", Tensor::Scalar(0.5f)),
                                     g->AddInitializer("training", Tensor::FromVector<uint8_t>(DType::kBool, {}, {1}))},
                         1, "drop");
    in = d->output(0);
  }
  g->AddOutput(g->AddNode("Probe", {in, p, s}, 1, "probe", "test")->output(0));
  Value* next = g->AddNode("Add", {s, x}, 1, "next")->output(0);
  next->name = "s_next";
  g->AddOutput(next);
  EXPECT_TRUE(InferShapes(*g).ok());
  return g;
}

std::unique_ptr<Session> MakeSession(const Graph& g, std::shared_ptr<Device> d, bool record = false) {
  SessionOptions o;
  o.run_on = std::move(d);
  o.state_updates["s_next"] = "s";
  o.record_steps = record;
  auto s = Session::Create(g, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(HostInput, FixedInitializersAreSeenOnTheHostStateAndRunValuesAreNot) {
  auto g = ProbeGraph(false);
  auto s = MakeSession(*g, std::make_shared<FakeDevice>(false));
  ASSERT_NE(s, nullptr);
  g_probe = {};
  ASSERT_TRUE(s->Run({{"x", F32({3}, {1, 2, 3})}}).ok());
  EXPECT_EQ(g_probe.computes, 1);
  EXPECT_TRUE(g_probe.saw_p);
  EXPECT_EQ(g_probe.p, (std::vector<float>{7, 8, 9}));
  EXPECT_FALSE(g_probe.saw_s) << "state changes every run: its host copy is stale";
  EXPECT_FALSE(g_probe.saw_x) << "a fed value lives on the device only";
  ASSERT_TRUE(s->SetInitializer("p", F32({3}, {4, 5, 6})).ok());
  ASSERT_TRUE(s->Run({{"x", F32({3}, {1, 2, 3})}}).ok());
  EXPECT_EQ(g_probe.p, (std::vector<float>{4, 5, 6}));
  // On a device that shares host memory every input is its own host view.
  auto cpu = MakeSession(*g, nullptr);
  g_probe = {};
  ASSERT_TRUE(cpu->Run({{"x", F32({3}, {1, 2, 3})}}).ok());
  EXPECT_TRUE(g_probe.saw_p && g_probe.saw_s && g_probe.saw_x);
}

TEST(Recording, RecordsTheSecondRunAndReplaysAfter) {
  auto g = ProbeGraph(false);
  auto device = std::make_shared<FakeDevice>(true);
  auto s = MakeSession(*g, device, /*record=*/true);
  ASSERT_NE(s, nullptr);
  g_probe = {};
  for (int run = 0; run < 5; ++run) ASSERT_TRUE(s->Run({{"x", F32({3}, {1, 2, 3})}}).ok());
  EXPECT_EQ(g_probe.computes, 2) << "run 1 step by step, run 2 recorded; the rest replayed";
  EXPECT_EQ(device->begins, 1);
  EXPECT_EQ(device->replays, 4) << "the recorded run and the three after it";
  // Profiling runs step by step; the next plain run records again.
  s->set_profiling(true);
  ASSERT_TRUE(s->Run({{"x", F32({3}, {1, 2, 3})}}).ok());
  EXPECT_EQ(g_probe.computes, 3);
  s->set_profiling(false);
  ASSERT_TRUE(s->Run({{"x", F32({3}, {1, 2, 3})}}).ok());
  EXPECT_EQ(device->begins, 2);
  // Off by default.
  auto plain_device = std::make_shared<FakeDevice>(true);
  auto plain = MakeSession(*g, plain_device);
  for (int run = 0; run < 3; ++run) ASSERT_TRUE(plain->Run({{"x", F32({3}, {1, 2, 3})}}).ok());
  EXPECT_EQ(plain_device->begins, 0);
}

TEST(Recording, ARandomOpIsNeverRecorded) {
  auto g = ProbeGraph(true);
  auto device = std::make_shared<FakeDevice>(true);
  auto s = MakeSession(*g, device, /*record=*/true);
  ASSERT_NE(s, nullptr);
  g_probe = {};
  for (int run = 0; run < 4; ++run) ASSERT_TRUE(s->Run({{"x", F32({3}, {1, 2, 3})}}).ok());
  EXPECT_EQ(device->begins, 0);
  EXPECT_EQ(device->replays, 0);
  EXPECT_EQ(g_probe.computes, 4);
}

}  // namespace
}  // namespace mixtrain
