#include "runtime/executor.h"

#include <atomic>
#include <chrono>

#include "graph/check.h"
#include "graph/shape_inference.h"

namespace mixtrain {

namespace {
std::atomic<AllocationCountFn> g_allocation_counter{nullptr};
}  // namespace

void SetProfilerAllocationCounter(AllocationCountFn counter) { g_allocation_counter.store(counter); }
AllocationCountFn ProfilerAllocationCounter() { return g_allocation_counter.load(); }

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(std::shared_ptr<const ExecutionPlan> plan,
                                                           Device* device,
                                                           const std::vector<void*>& initializers,
                                                           Communicator* communicator,
                                                           const std::vector<const void*>& host_initializers) {
  std::unique_ptr<Executor> e(new Executor());
  e->plan_ = std::move(plan);
  e->device_ = device;
  const ExecutionPlan& p = *e->plan_;
  MT_ASSIGN_OR_RETURN(e->arena_, DeviceBuffer::Allocate(device, p.stats.peak_planned_bytes));
  const bool in_place = device->shares_host_memory();
  if (!in_place) {
    for (const Tensor& c : p.constants) {
      MT_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(device, c.nbytes()));
      device->CopyToDevice(b.data(), c.data(), c.nbytes());
      e->constant_buffers_.push_back(std::move(b));
    }
  }
  e->views_.resize(p.slots.size());
  e->host_views_.resize(p.slots.size());
  for (size_t i = 0; i < p.slots.size(); ++i) {
    const Slot& s = p.slots[i];
    TensorView& v = e->views_[i];
    v.dtype = s.dtype;
    v.dims = s.dims;
    switch (s.kind) {
      case SlotKind::kArena: v.data = static_cast<uint8_t*>(e->arena_.data()) + s.offset; break;
      case SlotKind::kConstant:
        v.data = in_place ? const_cast<void*>(p.constants[s.index].data()) : e->constant_buffers_[s.index].data();
        e->host_views_[i] = {s.dtype, s.dims, const_cast<void*>(p.constants[s.index].data())};
        break;
      case SlotKind::kFeed:
        e->feed_slots_.push_back(static_cast<int>(i));
        if (!in_place) {
          MT_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(device, s.nbytes()));
          e->feed_buffers_.push_back(std::move(b));
        }
        break;
      case SlotKind::kInitializer:  // bound below
        if (static_cast<size_t>(s.index) < host_initializers.size() && host_initializers[s.index] != nullptr)
          e->host_views_[i] = {s.dtype, s.dims, const_cast<void*>(host_initializers[s.index])};
        break;
    }
  }
  e->BindInitializers(initializers);
  e->kernels_.reserve(p.steps.size());
  e->contexts_.reserve(p.steps.size());
  for (const Step& st : p.steps) {
    e->has_random_ |= HasOpTraits(*st.node, kOpRandom);
    MT_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> k, st.kernel->factory(*st.node));
    e->kernels_.push_back(std::move(k));
    std::vector<const TensorView*> ins, host_ins;
    std::vector<TensorView*> outs;
    for (int s : st.inputs) ins.push_back(s >= 0 ? &e->views_[s] : nullptr);
    for (int s : st.inputs) {
      const SlotKind k = s < 0 ? SlotKind::kArena : p.slots[s].kind;
      const bool fixed = k == SlotKind::kConstant || k == SlotKind::kInitializer;
      host_ins.push_back(s < 0 ? nullptr : in_place ? &e->views_[s] : fixed ? &e->host_views_[s] : nullptr);
    }
    for (int s : st.outputs) outs.push_back(s >= 0 ? &e->views_[s] : nullptr);
    e->step_costs_.push_back(EstimateCost(*st.node, ins, {outs.begin(), outs.end()}));
    e->contexts_.emplace_back(*st.node, device->type(), std::move(ins), std::move(outs), device->stream(),
                             st.opset);
    e->contexts_.back().set_constant_inputs(st.constant_inputs);
    e->contexts_.back().set_host_inputs(std::move(host_ins));
    e->contexts_.back().set_communicator(communicator);
    e->contexts_.back().set_resources(device->kernel_resources());
  }
  e->step_seconds_.assign(p.steps.size(), 0.0);
  e->step_runs_.assign(p.steps.size(), 0);
  e->step_allocations_.assign(p.steps.size(), 0);
  return e;
}

void Executor::BindHostInitializers(const std::vector<const void*>& host_initializers) {
  for (size_t i = 0; i < plan_->slots.size(); ++i) {
    const Slot& s = plan_->slots[i];
    if (s.kind != SlotKind::kInitializer || static_cast<size_t>(s.index) >= host_initializers.size()) continue;
    host_views_[i] = {s.dtype, s.dims, const_cast<void*>(host_initializers[s.index])};
  }
}

void Executor::BindInitializers(const std::vector<void*>& initializers) {
  recording_.reset();  // it holds the old addresses: the next run records again
  for (size_t i = 0; i < plan_->slots.size(); ++i)
    if (plan_->slots[i].kind == SlotKind::kInitializer) views_[i].data = initializers.at(plan_->slots[i].index);
}

absl::Status Executor::Run(const std::vector<const void*>& feeds, uint64_t run_index) {
  if (device_->shares_host_memory()) {
    for (int s : feed_slots_) views_[s].data = const_cast<void*>(feeds[plan_->slots[s].index]);
  } else {
    for (size_t k = 0; k < feed_slots_.size(); ++k) {
      const int s = feed_slots_[k];
      const void* host = feeds[plan_->slots[s].index];
      views_[s].data = host == nullptr ? nullptr : feed_buffers_[k].data();
      if (host != nullptr) device_->CopyToDevice(feed_buffers_[k].data(), host, plan_->slots[s].nbytes());
    }
  }
  const size_t n = kernels_.size();
  for (KernelContext& c : contexts_) c.set_run_index(run_index);
  const bool record = record_ && !profiling_ && !has_random_ && device_->CanRecord();
  if (!record) recording_.reset();
  if (record && recording_ != nullptr) {
    recording_->Replay();
    ++runs_;
    return absl::OkStatus();
  }
  if (record && runs_ >= 1) {
    device_->BeginRecording();
    absl::Status st = absl::OkStatus();
    for (size_t i = 0; i < n && st.ok(); ++i) st = kernels_[i]->Compute(contexts_[i]);
    recording_ = device_->EndRecording();
    if (!st.ok()) {
      recording_.reset();
      return st;
    }
    if (recording_ != nullptr) {
      recording_->Replay();
      ++runs_;
      return absl::OkStatus();
    }
    record_ = false;  // the device could not record this plan: run it step by step from now on
  }
  ++runs_;
  for (size_t i = 0; i < n; ++i) {
    if (!profiling_) {
      absl::Status st = kernels_[i]->Compute(contexts_[i]);
      if (!st.ok()) return st;
      continue;
    }
    const AllocationCountFn allocations = ProfilerAllocationCounter();
    const uint64_t a0 = allocations != nullptr ? allocations() : 0;
    auto t0 = std::chrono::steady_clock::now();
    absl::Status st = kernels_[i]->Compute(contexts_[i]);
    device_->Synchronize();
    step_seconds_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (allocations != nullptr) step_allocations_[i] += static_cast<int64_t>(allocations() - a0);
    ++step_runs_[i];
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

void Executor::ResetProfile() {
  std::fill(step_seconds_.begin(), step_seconds_.end(), 0.0);
  std::fill(step_runs_.begin(), step_runs_.end(), 0);
  std::fill(step_allocations_.begin(), step_allocations_.end(), 0);
}

}  // namespace mixtrain
