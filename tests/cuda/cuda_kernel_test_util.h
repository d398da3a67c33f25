// The fixture of the CUDA kernel tests (tests/cuda/cuda_*kernels_test.cc): each case runs a node
// on the CPU kernel (which also gives the outputs' dtypes and dims), then on the CUDA kernel, and
// compares element by element within a few units of the storage type's rounding. Every input is
// also handed to the kernel as its host copy (KernelContext::host_input), as the executor does
// for a plan's constants. Each test skips with the reason when CudaAvailable() says no (CI has
// no GPU).
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "graph/half.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/device.h"
#include "tests/kernels/elementwise_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain::cuda_test {

using ew_test::Make;
using ew_test::Uniform;
using testing_util::MakeNode;

class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status st = CudaAvailable();
    if (!st.ok()) GTEST_SKIP() << "no usable GPU, CUDA kernel not run: " << st.message();
    auto d = MakeCudaDevice(0);
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = std::move(*d);
  }

  // Runs `node` on the CPU (which also gives the output dtypes and dims), then on the GPU, and
  // returns {cpu outputs, gpu outputs}.
  std::pair<std::vector<Tensor>, std::vector<Tensor>> Run(const Node& node, const std::vector<Tensor>& in,
                                                          int64_t opset = 17) {
    auto cpu = testing_util::RunCpuKernel(node, in, opset);
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    if (!cpu.ok()) return {};
    std::vector<DeviceBuffer> bufs;
    std::vector<TensorView> iv(in.size()), ov(cpu->size());
    std::vector<const TensorView*> ip;
    std::vector<TensorView*> op;
    std::vector<DType> idt, odt;
    auto upload = [&](const Tensor& t) {
      auto b = DeviceBuffer::Allocate(device_.get(), t.nbytes());
      EXPECT_TRUE(b.ok());
      device_->CopyToDevice(b->data(), t.data(), t.nbytes());
      bufs.push_back(std::move(*b));
      return bufs.back().data();
    };
    for (size_t i = 0; i < in.size(); ++i) {
      idt.push_back(in[i].dtype());
      if (!in[i].defined()) {
        ip.push_back(nullptr);
        continue;
      }
      iv[i] = {in[i].dtype(), in[i].dims(), upload(in[i])};
      ip.push_back(&iv[i]);
    }
    // Outputs start as the CPU's inputs where the op updates in place would; else garbage-free zeros.
    for (size_t i = 0; i < cpu->size(); ++i) {
      const Tensor& t = (*cpu)[i];
      odt.push_back(t.dtype());
      Tensor zeros(t.dtype(), t.dims());
      std::memset(zeros.data(), 0, zeros.nbytes());
      ov[i] = {t.dtype(), t.dims(), upload(zeros)};
      op.push_back(&ov[i]);
    }
    auto def = KernelRegistry::Global().Find(node, DeviceType::kCUDA, idt, odt);
    EXPECT_TRUE(def.ok()) << def.status();
    if (!def.ok()) return {};
    auto kernel = (*def)->factory(node);
    EXPECT_TRUE(kernel.ok());
    KernelContext ctx(node, DeviceType::kCUDA, ip, op, device_->stream(), opset);
    ctx.set_resources(device_->kernel_resources());
    // Every input also on the host, as the executor gives a plan's constants (Slice's starts,
    // Pad's pads): the kernels read their integer parameters there.
    std::vector<TensorView> hv(in.size());
    std::vector<const TensorView*> hp;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].defined()) hv[i] = {in[i].dtype(), in[i].dims(), const_cast<void*>(in[i].data())};
      hp.push_back(in[i].defined() ? &hv[i] : nullptr);
    }
    ctx.set_host_inputs(hp);
    absl::Status st = (*kernel)->Compute(ctx);
    EXPECT_TRUE(st.ok()) << st;
    std::vector<Tensor> gpu;
    for (size_t i = 0; i < cpu->size(); ++i) {
      gpu.emplace_back((*cpu)[i].dtype(), (*cpu)[i].dims());
      device_->CopyToHost(gpu.back().data(), ov[i].data, gpu.back().nbytes());
    }
    device_->Synchronize();
    return {std::move(*cpu), std::move(gpu)};
  }

  // Element-wise |gpu - cpu| <= tol * (1 + |cpu|) with a per-dtype tolerance (a few units of the
  // storage type's rounding; f32 leaves room for summation order and libdevice vs libm ulps).
  static void ExpectClose(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
    ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
    ASSERT_EQ(cpu.numel(), gpu.numel()) << what;
    const double tol = cpu.dtype() == DType::kF16 ? 2e-3 : cpu.dtype() == DType::kBF16 ? 1.6e-2 : 2e-5;
    int bad = 0;
    for (int64_t i = 0; i < cpu.numel() && bad < 5; ++i) {
      double c = cpu.GetDouble(i), g = gpu.GetDouble(i);
      if (std::isnan(c) && std::isnan(g)) continue;
      if (c == g) continue;
      if (!(std::fabs(c - g) <= tol * (1 + std::fabs(c)))) {
        ++bad;
        ADD_FAILURE() << what << " element " << i << ": cpu " << c << " gpu " << g;
      }
    }
  }

  void Check(const std::string& op, const std::vector<Tensor>& in, std::vector<Attribute> attrs = {},
             int num_outputs = 1, const std::string& domain = "", int64_t opset = 17) {
    auto n = MakeNode(op, in, num_outputs, std::move(attrs), domain);
    auto [cpu, gpu] = Run(*n.node, in, opset);
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i)
      ExpectClose(cpu[i], gpu[i], op + " " + DTypeName(in[0].dtype()) + " output " + std::to_string(i));
  }

  std::unique_ptr<Device> device_;
};

inline constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

}  // namespace mixtrain::cuda_test
