// Trainer::SetProfiling / Profile: per-node kernel times of the training step, attributed to the
// forward, loss, backward and optimizer phases by the names the passes give their nodes.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "mixtrain/mixtrain.h"

namespace mixtrain {
namespace {

// An fp32 Trainer of models/mlp.onnx and a batch of 8 zero examples for it.
void MlpTrainer(std::unique_ptr<Trainer>* t, TensorMap* batch) {
  TrainConfig c;
  c.precision.preset = TrainConfig::Precision::Preset::kFp32;
  auto made = Trainer::Create(std::string(MT_SOURCE_DIR) + "/models/mlp.onnx", c);
  ASSERT_TRUE(made.ok()) << made.status();
  *t = std::move(*made);
  for (const TensorInfo& in : (*t)->BatchInputs()) {
    std::vector<int64_t> dims = in.shape;
    for (int64_t& d : dims) d = d < 0 ? 8 : d;
    auto z = HostTensor::Zeros(in.type, dims);
    ASSERT_TRUE(z.ok());
    (*batch)[in.name] = *z;
  }
}

TEST(StepProfile, EveryPhaseAndEveryParameterUpdateIsTimed) {
  std::unique_ptr<Trainer> t;
  TensorMap batch;
  ASSERT_NO_FATAL_FAILURE(MlpTrainer(&t, &batch));
  ASSERT_TRUE(t->Step(batch).ok());  // unprofiled
  EXPECT_TRUE(t->Profile().empty());
  t->SetProfiling(true);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->Step(batch, {.read_loss = false}).ok());
  auto rows = t->Profile();
  ASSERT_FALSE(rows.empty());
  std::set<std::string> phases;
  std::map<std::string, int64_t> adam_calls;
  double total = 0;
  for (const auto& r : rows) {
    phases.insert(r.phase);
    EXPECT_GE(r.seconds, 0);
    total += r.seconds;
    if (r.op_type == "Adam") adam_calls[r.node] = r.calls;
    if (r.node.find("/grad") != std::string::npos) EXPECT_EQ(r.phase, "backward") << r.node;
  }
  EXPECT_GT(total, 0);
  EXPECT_TRUE(phases.contains("forward"));
  EXPECT_TRUE(phases.contains("backward"));
  EXPECT_TRUE(phases.contains("optimizer"));
  // One multi-tensor Adam node updates every parameter, run once per profiled step.
  ASSERT_EQ(adam_calls.size(), 1u);
  EXPECT_EQ(adam_calls.begin()->second, 3);
  t->ResetProfile();
  EXPECT_TRUE(t->Profile().empty());
}

// The profile's arithmetic and traffic columns: fc1 of models/mlp.onnx is a [8, 784] x [784, 256]
// product (2*8*784*256 FLOPs a call) reading and writing at least its operands and result. The
// allocation count comes from the counter the program registers: here one that ticks once per
// read, so each kernel call is charged exactly 1.
uint64_t g_ticks = 0;
uint64_t Ticks() { return ++g_ticks; }

TEST(StepProfile, CountsFlopsBytesAndAllocations) {
  std::unique_ptr<Trainer> t;
  TensorMap batch;
  ASSERT_NO_FATAL_FAILURE(MlpTrainer(&t, &batch));
  SetHeapAllocationCounter(&Ticks);
  t->SetProfiling(true);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(t->Step(batch, {.read_loss = false}).ok());
  SetHeapAllocationCounter(nullptr);
  bool saw_fc1 = false;
  for (const auto& r : t->Profile()) {
    EXPECT_EQ(r.allocations, r.calls) << r.node;
    EXPECT_GT(r.bytes, 0) << r.node;
    if (r.node != "node_linear") continue;
    saw_fc1 = true;
    EXPECT_EQ(r.calls, 2);
    EXPECT_DOUBLE_EQ(r.flops, 2.0 * 2 * 8 * 784 * 256) << r.op_type;
    EXPECT_GE(r.bytes, 2.0 * 4 * (8 * 784 + 784 * 256 + 8 * 256)) << r.op_type;
  }
  EXPECT_TRUE(saw_fc1);
}

}  // namespace
}  // namespace mixtrain
