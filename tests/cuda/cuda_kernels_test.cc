// Every CUDA kernel against the CPU kernel, per dtype, with shapes that reach every branch of
// the launchers (flat and broadcast binary paths, contiguous and strided softmax/reduction rows,
// folded / batched / shared-A MatMul, Gemm transposes and C broadcast, skip flags). Each GPU test
// skips with the reason when CudaAvailable() says no (CI has no GPU); the registry test runs
// everywhere.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/half.h"
#include "runtime/cuda/cuda_device.h"
#include "tests/kernels/elementwise_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain {
namespace {

using ew_test::Make;
using ew_test::Uniform;
using testing_util::MakeNode;

// The CUDA-registered ops (and their domains) this suite covers; the registry test checks the two
// lists agree, so a new CUDA kernel without a test here fails.
const std::vector<std::pair<std::string, std::string>> kCovered = {
    {"Sqrt", ""}, {"Reciprocal", ""}, {"Exp", ""}, {"Log", ""}, {"Erf", ""}, {"Tanh", ""},
    {"Sigmoid", ""}, {"Softplus", ""}, {"Gelu", ""}, {"LeakyRelu", ""}, {"Relu", ""}, {"Neg", ""},
    {"Abs", ""}, {"Add", ""}, {"Sub", ""}, {"Mul", ""}, {"Div", ""}, {"Max", ""}, {"Min", ""},
    {"Pow", ""}, {"Cast", ""}, {"Softmax", ""}, {"LogSoftmax", ""}, {"LayerNormalization", ""},
    {"ReduceSum", ""}, {"ReduceMean", ""}, {"MatMul", ""}, {"Gemm", ""}, {"Adam", "ai.mixtrain"},
    {"SGD", "ai.mixtrain"}, {"AllFinite", "ai.mixtrain"}, {"UpdateLossScale", "ai.mixtrain"},
    {"ReluGrad", "ai.mixtrain"}, {"Not", ""}, {"SoftmaxCrossEntropyLoss", ""},
    {"SoftmaxCrossEntropyLossGrad", "ai.mixtrain"}, {"Conv", ""}, {"FusedConv", "ai.mixtrain"},
    {"ConvGrad", "ai.mixtrain"}, {"MaxPool", ""}, {"MaxPoolGrad", "ai.mixtrain"}, {"Concat", ""},
    {"Split", ""}, {"Transpose", ""}, {"Expand", ""}, {"Where", ""}, {"FusedMatMul", "ai.mixtrain"},
    {"GeluGrad", "ai.mixtrain"}, {"Gelu", "ai.mixtrain"}, {"MaskedSoftmax", "ai.mixtrain"},
    {"SoftmaxGrad", "ai.mixtrain"}, {"LayerNormalizationGrad", "ai.mixtrain"}, {"Gather", ""},
    {"GatherGrad", "ai.mixtrain"}, {"AveragePool", ""}, {"AveragePoolGrad", "ai.mixtrain"},
    {"BatchNormalization", ""}, {"BatchNormalizationGrad", "ai.mixtrain"}, {"GlobalAveragePool", ""},
    {"Slice", ""}, {"Pad", ""}, {"SliceGrad", "ai.mixtrain"}, {"PadGrad", "ai.mixtrain"}, {"HardSigmoid", ""},
    {"HardSwish", ""}, {"IsNaN", ""}, {"Equal", ""}, {"Less", ""}, {"LessOrEqual", ""}, {"Greater", ""},
    {"GreaterOrEqual", ""}, {"And", ""}, {"Or", ""}, {"Xor", ""}, {"GroupNormalization", ""},
    {"GroupNormalizationGrad", "ai.mixtrain"}, {"InstanceNormalization", ""}, {"Elu", ""}, {"CumSum", ""},
    {"Resize", ""}, {"Upsample", ""}, {"ResizeGrad", "ai.mixtrain"}, {"ConvTranspose", ""}};

TEST(CudaRegistryTest, EveryCudaKernelIsCoveredAndHasACpuTwin) {
#if MIXTRAIN_HAVE_CUDA
  // The kernels register when the plugin loads, which needs no GPU.
  absl::Status loaded = LoadCudaBackend();
  ASSERT_TRUE(loaded.ok()) << loaded;
  int cuda_defs = 0;
  for (const KernelDef& d : KernelRegistry::Global().defs()) {
    if (d.device != DeviceType::kCUDA) continue;
    ++cuda_defs;
    bool covered = false;
    for (const auto& [op, domain] : kCovered) covered |= op == d.op_type && domain == d.domain;
    EXPECT_TRUE(covered) << d.domain << "::" << d.op_type << " has a CUDA kernel but no test here";
    EXPECT_TRUE(KernelRegistry::Global().Has(d.domain, d.op_type, DeviceType::kCPU)) << d.op_type;
  }
  for (const auto& [op, domain] : kCovered)
    EXPECT_TRUE(KernelRegistry::Global().Has(domain, op, DeviceType::kCUDA)) << op;
  EXPECT_EQ(cuda_defs, static_cast<int>(kCovered.size()));
#else
  GTEST_SKIP() << "this build has no CUDA backend";
#endif
}

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

const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

TEST_F(CudaKernelTest, UnaryOps) {
  for (DType t : kDtypes) {
    Tensor any = Make(t, {3, 37}, Uniform(111, -4, 4, 1));
    Tensor pos = Make(t, {3, 37}, Uniform(111, 0.01, 9, 2));
    for (const char* op : {"Exp", "Erf", "Tanh", "Sigmoid", "Softplus", "Gelu", "LeakyRelu", "Relu", "Neg", "Abs"})
      Check(op, {any});
    for (const char* op : {"Sqrt", "Reciprocal", "Log"}) Check(op, {pos});
    Check("Gelu", {any}, {Attribute::String("approximate", "tanh")});
    Check("LeakyRelu", {any}, {Attribute::Float("alpha", 0.2f)});
  }
}

TEST_F(CudaKernelTest, BinaryOpsFlatAndBroadcast) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{5, 7}, {5, 7}},         // flat, both contiguous (rank 1 after merging)
      {{5, 7}, {}},             // scalar operand (rank 1, stride 0)
      {{}, {}},                 // one element (rank 0)
      {{5, 7}, {7}},            // bias row (rank 2 layout)
      {{5, 1, 7}, {1, 3, 1}},   // both broadcast (rank 3)
      {{2, 3, 4, 5}, {3, 1, 5}}};
  for (DType t : kDtypes)
    for (const auto& [da, db] : shapes) {
      Tensor a = Make(t, da, Uniform(ew_test::Count(da), 0.5, 3, 3));
      Tensor b = Make(t, db, Uniform(ew_test::Count(db), 0.5, 3, 4));
      for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"}) Check(op, {a, b});
    }
  // Integer arithmetic: the step counter (step + Cast(applied, i64)).
  for (DType t : {DType::kI32, DType::kI64})
    for (const auto& [da, db] : shapes) {
      Tensor a = Make(t, da, Uniform(ew_test::Count(da), -1000, 1000, 6));
      Tensor b = Make(t, db, Uniform(ew_test::Count(db), -1000, 1000, 7));
      for (const char* op : {"Add", "Sub", "Mul", "Max", "Min"}) Check(op, {a, b});
    }
}

// ReluGrad(dY, Y): Y with exact zeros and negatives (no Relu output is negative, but the kernel
// must not care).
TEST_F(CudaKernelTest, ReluGrad) {
  for (DType t : kDtypes) {
    Tensor dy = Make(t, {6, 9}, Uniform(54, -2, 2, 5));
    std::vector<double> y = Uniform(54, -1, 1, 6);
    for (size_t i = 0; i < y.size(); i += 3) y[i] = 0;
    Check("ReluGrad", {dy, Make(t, {6, 9}, y)}, {}, 1, "ai.mixtrain");
  }
}

TEST_F(CudaKernelTest, CastBetweenFloatTypes) {
  for (DType from : kDtypes)
    for (DType to : kDtypes) {
      Tensor x = Make(from, {1001}, Uniform(1001, -70000, 70000, 5));  // f16 overflows to inf
      Check("Cast", {x}, {Attribute::Int("to", static_cast<int64_t>(ToOnnxType(to)))});
    }
  // Between floats, integers and bool (ONNX: float -> int truncates, anything -> bool is != 0).
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kBool};
  std::vector<double> v = Uniform(300, -300, 300, 8);
  v[0] = 0;
  v[1] = 0.5;
  v[2] = -0.5;
  for (DType from : all)
    for (DType to : all) {
      if (from == to) continue;
      std::vector<double> w = v;
      if (from == DType::kBool)
        for (double& e : w) e = e > 0;
      else if (from == DType::kI32 || from == DType::kI64)
        for (double& e : w) e = std::trunc(e);
      Check("Cast", {Make(from, {300}, w)}, {Attribute::Int("to", static_cast<int64_t>(ToOnnxType(to)))});
    }
}

TEST_F(CudaKernelTest, SoftmaxRowsAndColumns) {
  for (DType t : kDtypes) {
    Tensor rows = Make(t, {4, 1000}, Uniform(4000, -20, 20, 6));  // inner == 1, n > block
    Tensor cols = Make(t, {3, 5, 7}, Uniform(105, -5, 5, 7));
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      Check(op, {rows});
      Check(op, {cols}, {Attribute::Int("axis", 1)});  // inner > 1
      Check(op, {cols}, {Attribute::Int("axis", 1)}, 1, "", 11);  // opset 11: coerced to 2-D
    }
  }
}

TEST_F(CudaKernelTest, LayerNormWithStats) {
  for (DType t : kDtypes) {
    Tensor x = Make(t, {6, 300}, Uniform(1800, -3, 5, 8));
    Tensor scale = Make(t, {300}, Uniform(300, 0.5, 1.5, 9));
    Tensor bias = Make(t, {300}, Uniform(300, -1, 1, 10));
    Check("LayerNormalization", {x, scale, bias}, {Attribute::Float("epsilon", 1e-5f)}, 3);
    Check("LayerNormalization", {x, scale}, {}, 1);
  }
}

TEST_F(CudaKernelTest, ReduceSumAndMean) {
  for (DType t : kDtypes) {
    Tensor x = Make(t, {4, 5, 6}, Uniform(120, -2, 2, 11));
    for (const char* op : {"ReduceSum", "ReduceMean"})
      for (std::vector<int64_t> axes : {std::vector<int64_t>{0}, {2}, {1}, {1, 2}, {0, 1, 2}}) {
        Tensor ax = Make(DType::kI64, {static_cast<int64_t>(axes.size())},
                         std::vector<double>(axes.begin(), axes.end()));
        Check(op, {x, ax}, {Attribute::Int("keepdims", 1)}, 1, "", 18);
      }
  }
}

TEST_F(CudaKernelTest, MatMulShapes) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{17, 33}, {33, 19}}, {{2, 3, 17, 33}, {33, 19}}, {{4, 17, 33}, {4, 33, 19}},
      {{17, 33}, {4, 33, 19}}, {{33}, {33, 19}}, {{17, 33}, {33}}, {{2, 1, 17, 33}, {3, 33, 19}},
      {{3, 1, 5, 33}, {2, 33, 19}}};
  for (DType t : kDtypes)
    for (const auto& [da, db] : shapes)
      Check("MatMul", {Make(t, da, Uniform(ew_test::Count(da), -1, 1, 12)),
                       Make(t, db, Uniform(ew_test::Count(db), -1, 1, 13))});
}

// FusedMatMul's branches: operands read in place through perms (a last-two swap, attention's
// head split), a perm neither matrix stride of which is 1 (dense copy first), perm_y written in
// place and scattered, a shared weight folded into rows, bias / activation / residual epilogues.
TEST_F(CudaKernelTest, FusedMatMulPermsAndEpilogues) {
  using Ints = std::vector<int64_t>;
  struct Case {
    Ints a, b;
    Ints perm_a, perm_b, perm_y;
    bool bias, z;
    std::string act;
  };
  const std::vector<Case> cases = {
      {{6, 20}, {20, 12}, {}, {}, {}, true, true, "Gelu"},
      {{2, 5, 6, 20}, {20, 12}, {}, {}, {}, true, false, "GeluTanh"},      // folded into one GEMM
      {{20, 6}, {12, 20}, {1, 0}, {1, 0}, {}, true, false, "Relu"},        // both transposed
      {{2, 6, 3, 8}, {2, 7, 3, 8}, {0, 2, 1, 3}, {0, 2, 3, 1}, {}, false, false, "Sigmoid"},  // Q.K^T
      {{2, 3, 6, 7}, {2, 7, 3, 8}, {}, {0, 2, 1, 3}, {0, 2, 1, 3}, false, false, ""},  // P.V, heads merged
      {{5, 4, 6}, {4, 7}, {2, 0, 1}, {}, {2, 0, 1}, true, false, "Tanh"},  // dense copy of A; Y = A'.B' in place
      {{3, 6, 5}, {5, 7}, {}, {}, {1, 2, 0}, true, false, ""},               // Y scattered from a dense copy
  };
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      std::vector<Tensor> in = {Make(t, c.a, Uniform(ew_test::Count(c.a), -1, 1, 31)),
                                Make(t, c.b, Uniform(ew_test::Count(c.b), -1, 1, 32))};
      std::vector<Attribute> attrs = {Attribute::Float("alpha", 0.75f)};
      if (!c.perm_a.empty()) attrs.push_back(Attribute::Ints("perm_a", c.perm_a));
      if (!c.perm_b.empty()) attrs.push_back(Attribute::Ints("perm_b", c.perm_b));
      if (!c.perm_y.empty()) attrs.push_back(Attribute::Ints("perm_y", c.perm_y));
      if (!c.act.empty()) attrs.push_back(Attribute::String("activation", c.act));
      // N is the last dim of B' (B permuted).
      const int64_t n = c.perm_b.empty() ? c.b.back() : c.b[c.perm_b.back()];
      in.push_back(c.bias ? Make(t, {n}, Uniform(n, -1, 1, 33)) : Tensor());
      if (c.z) {
        auto cpu = testing_util::RunCpuKernel(*MakeNode("FusedMatMul", in, 1, attrs, "ai.mixtrain").node, in, 17);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        const Ints& yd = (*cpu)[0].dims();
        in.push_back(Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, 34)));
      }
      Check("FusedMatMul", in, attrs, 1, "ai.mixtrain");
    }
}

// The transformer ops: masks broadcast along rows and along the row (mask_inner 1 and 0), rows
// longer than a block, LayerNorm's column sums with a float scale under low-precision X, gathers
// with negative and repeated indices (the embedding's backward adds repeats in index order).
TEST_F(CudaKernelTest, TransformerOps) {
  const std::vector<Attribute> masked = {Attribute::Float("scale", 0.125f), Attribute::Float("fill", -1e4f)};
  for (DType t : kDtypes) {
    Tensor x = Make(t, {2, 3, 5, 40}, Uniform(1200, -30, 30, 40));
    Tensor along = Make(DType::kBool, {2, 1, 5, 40}, Uniform(400, 0, 1.6, 41));  // rounds to 0/1
    Tensor rows = Make(DType::kBool, {2, 1, 5, 1}, {1, 0, 1, 1, 0, 1, 1, 1, 0, 1});
    Check("MaskedSoftmax", {x, along}, masked, 1, "ai.mixtrain");
    Check("MaskedSoftmax", {x, rows}, masked, 1, "ai.mixtrain");
    Tensor longx = Make(t, {3, 700}, Uniform(2100, -5, 5, 42));
    Check("MaskedSoftmax", {longx, Make(DType::kBool, {700}, Uniform(700, 0, 1.6, 43))}, masked, 1, "ai.mixtrain");
    Tensor dy = Make(t, {2, 3, 5, 40}, Uniform(1200, -1, 1, 44));
    Tensor y = Make(t, {2, 3, 5, 40}, Uniform(1200, 0, 0.05, 45));
    Check("SoftmaxGrad", {dy, y}, {}, 1, "ai.mixtrain");
    Check("SoftmaxGrad", {dy, y, along}, {Attribute::Float("scale", 0.125f)}, 1, "ai.mixtrain");
    Check("SoftmaxGrad", {dy, y, rows}, {}, 1, "ai.mixtrain");
    Check("SoftmaxGrad", {Make(t, {3, 700}, Uniform(2100, -1, 1, 46)), Make(t, {3, 700}, Uniform(2100, 0, 0.003, 47))},
          {}, 1, "ai.mixtrain");

    for (DType pt : {t, DType::kF32}) {
      Tensor lx = Make(t, {6, 300}, Uniform(1800, -3, 5, 48));
      Tensor ldy = Make(t, {6, 300}, Uniform(1800, -1, 1, 49));
      Tensor scale = Make(pt, {300}, Uniform(300, 0.5, 1.5, 50));
      Check("LayerNormalizationGrad", {ldy, lx, scale}, {Attribute::Float("epsilon", 1e-5f)}, 3, "ai.mixtrain");
      Tensor sx = Make(t, {4, 250, 24}, Uniform(24000, -2, 2, 51));
      Tensor sdy = Make(t, {4, 250, 24}, Uniform(24000, -1, 1, 52));
      Check("LayerNormalizationGrad", {sdy, sx, Make(pt, {24}, Uniform(24, 0.5, 1.5, 53))}, {}, 3, "ai.mixtrain");
      Check("LayerNormalizationGrad", {sdy, sx, Make(pt, {250, 24}, Uniform(6000, 0.5, 1.5, 54))},
            {Attribute::Int("axis", 1)}, 3, "ai.mixtrain");
    }

    Tensor gx = Make(t, {4, 3, 5}, Uniform(60, -9, 9, 55));
    Tensor gdy = Make(t, {4, 3, 5}, Uniform(60, -9, 9, 56));
    for (const char* approx : {"none", "tanh"}) {
      Check("GeluGrad", {gdy, gx}, {Attribute::String("approximate", approx)}, 1, "ai.mixtrain");
      Check("Gelu", {gx}, {Attribute::String("approximate", approx)}, 1, "ai.mixtrain");
    }

    Tensor table = Make(t, {10, 7}, Uniform(70, -9, 9, 57));
    Tensor ids = Make(DType::kI64, {3, 4}, {0, 9, -1, 3, 3, 3, 2, -10, 5, 9, 0, 1});
    Check("Gather", {table, ids});
    Tensor cube = Make(t, {3, 10, 5}, Uniform(150, -9, 9, 58));
    Check("Gather", {cube, Make(DType::kI32, {4}, {7, -3, 0, 7})}, {Attribute::Int("axis", 1)});
    Tensor dtab = Make(t, {3, 4, 7}, Uniform(84, -1, 1, 59));
    for (DType xt : {t, DType::kF32})
      Check("GatherGrad", {dtab, ids, Make(xt, {10, 7}, Uniform(70, -1, 1, 60))}, {}, 1, "ai.mixtrain");
    Check("GatherGrad", {Make(t, {3, 4, 5}, Uniform(60, -1, 1, 61)), Make(DType::kI32, {4}, {7, -3, 0, 7}), cube},
          {Attribute::Int("axis", 1)}, 1, "ai.mixtrain");
  }
  Check("Gather", {Make(DType::kI64, {10, 2}, Uniform(20, -100, 100, 62)), Make(DType::kI64, {3}, {4, -1, 4})});
}

TEST_F(CudaKernelTest, GemmTransposesAndBias) {
  for (DType t : kDtypes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Tensor a = Make(t, ta ? std::vector<int64_t>{31, 9} : std::vector<int64_t>{9, 31}, Uniform(279, -1, 1, 14));
        Tensor b = Make(t, tb ? std::vector<int64_t>{13, 31} : std::vector<int64_t>{31, 13}, Uniform(403, -1, 1, 15));
        std::vector<Attribute> attrs = {Attribute::Int("transA", ta), Attribute::Int("transB", tb),
                                        Attribute::Float("alpha", 0.5f), Attribute::Float("beta", 2.0f)};
        Check("Gemm", {a, b}, attrs);
        Check("Gemm", {a, b, Make(t, {13}, Uniform(13, -1, 1, 16))}, attrs);
        Check("Gemm", {a, b, Make(t, {9, 13}, Uniform(117, -1, 1, 17))}, attrs);
      }
}

TEST_F(CudaKernelTest, OptimizersWithAndWithoutSkip) {
  const int64_t n = 1000;
  Tensor x = Make(DType::kF32, {n}, Uniform(n, -1, 1, 18));
  Tensor g = Make(DType::kF32, {n}, Uniform(n, -1, 1, 19));
  Tensor m = Make(DType::kF32, {n}, Uniform(n, -0.1, 0.1, 20));
  Tensor v = Make(DType::kF32, {n}, Uniform(n, 0, 0.1, 21));
  Tensor lr = Make(DType::kF32, {}, {0.01});
  Tensor step = Make(DType::kI64, {}, {6});
  for (int skip = 0; skip < 2; ++skip) {
    Tensor sk = Make(DType::kBool, {}, {double(skip)});
    for (int decoupled = 0; decoupled < 2; ++decoupled)
      Check("Adam", {lr, step, sk, x, g, m, v},
            {Attribute::Int("decoupled", decoupled), Attribute::Float("weight_decay", 0.1f)}, 3, "ai.mixtrain");
    Check("SGD", {lr, sk, x, g}, {Attribute::Float("weight_decay", 0.01f)}, 1, "ai.mixtrain");
    for (int nesterov = 0; nesterov < 2; ++nesterov)
      Check("SGD", {lr, sk, x, g, m}, {Attribute::Float("momentum", 0.9f), Attribute::Int("nesterov", nesterov)}, 2,
            "ai.mixtrain");
    // Multi-tensor: one node over two parameters of different sizes.
    Tensor x2 = Make(DType::kF32, {7}, Uniform(7, -1, 1, 22));
    Tensor g2 = Make(DType::kF32, {7}, Uniform(7, -1, 1, 23));
    Tensor m2 = Make(DType::kF32, {7}, Uniform(7, -0.1, 0.1, 24));
    Tensor v2 = Make(DType::kF32, {7}, Uniform(7, 0, 0.1, 25));
    Check("Adam", {lr, step, sk, x, g, m, v, x2, g2, m2, v2}, {Attribute::Float("weight_decay", 0.1f)}, 6,
          "ai.mixtrain");
    Check("SGD", {lr, sk, x, g, m, x2, g2, m2}, {Attribute::Float("momentum", 0.9f)}, 4, "ai.mixtrain");
  }
}

TEST_F(CudaKernelTest, AllFiniteAndLossScale) {
  for (DType t : kDtypes) {
    Tensor fine = Make(t, {3000}, Uniform(3000, -1e3, 1e3, 22));
    std::vector<double> vals = Uniform(3000, -1, 1, 23);
    vals[2999] = INFINITY;  // the last element, in the last block
    Tensor inf = Make(t, {3000}, vals);
    vals[2999] = 0;
    vals[7] = NAN;
    Tensor nan = Make(t, {3000}, vals);
    Check("AllFinite", {fine}, {}, 1, "ai.mixtrain");
    Check("AllFinite", {fine, inf}, {}, 1, "ai.mixtrain");
    Check("AllFinite", {nan, fine}, {}, 1, "ai.mixtrain");
  }
  for (int found = 0; found < 2; ++found)
    for (double good : {0.0, 2.0}) {
      Check("UpdateLossScale",
            {Make(DType::kBool, {}, {double(found)}), Make(DType::kF32, {}, {65536}), Make(DType::kI64, {}, {good})},
            {Attribute::Int("growth_interval", 3)}, 2, "ai.mixtrain");
    }
}

TEST_F(CudaKernelTest, Not) {
  Check("Not", {Make(DType::kBool, {5, 3}, {1, 0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1})});
}

// SoftmaxCrossEntropyLoss and its gradient: classes last (a classifier, and a vocabulary wider
// than a block) and strided over extra dims (D > 1); every reduction; class weights in another
// float dtype; an ignored label; int32 and int64 labels; the optional log_prob output.
TEST_F(CudaKernelTest, SoftmaxCrossEntropyLossAndGrad) {
  struct Shape {
    std::vector<int64_t> scores;
    int64_t classes;
  };
  const std::vector<Shape> shapes = {{{16, 10}, 10}, {{5, 700}, 700}, {{4, 6, 3, 2}, 6}};
  int seed = 30;
  for (DType t : kDtypes)
    for (const Shape& sh : shapes) {
      const int64_t n = ew_test::Count(sh.scores);
      std::vector<int64_t> label_dims = sh.scores;
      label_dims.erase(label_dims.begin() + 1);
      const int64_t items = ew_test::Count(label_dims);
      std::vector<double> labels = Uniform(items, 0, static_cast<double>(sh.classes) - 0.01, ++seed);
      for (double& l : labels) l = std::floor(l);
      labels[1] = 2;  // the ignored class, at least once
      Tensor scores = Make(t, sh.scores, Uniform(n, -6, 6, ++seed));
      Tensor weights = Make(DType::kF32, {sh.classes}, Uniform(sh.classes, 0.2, 2, ++seed));
      for (DType lt : {DType::kI64, DType::kI32}) {
        Tensor y = Make(lt, label_dims, labels);
        for (const char* red : {"mean", "sum", "none"}) {
          std::vector<Attribute> attrs = {Attribute::String("reduction", red)};
          Check("SoftmaxCrossEntropyLoss", {scores, y}, attrs, 2);
          std::vector<Attribute> ignoring = attrs;
          ignoring.push_back(Attribute::Int("ignore_index", 2));
          Check("SoftmaxCrossEntropyLoss", {scores, y, weights}, ignoring, 1);
          const bool none = std::string(red) == "none";
          Tensor dl = none ? Make(t, label_dims, Uniform(items, -1, 1, ++seed)) : Make(t, {}, {0.75});
          Check("SoftmaxCrossEntropyLossGrad", {dl, scores, y}, attrs, 1, "ai.mixtrain");
          Check("SoftmaxCrossEntropyLossGrad", {dl, scores, y, weights}, ignoring, 1, "ai.mixtrain");
        }
      }
    }
}

// Convolutions on cuDNN: 2-D with pads, strides, dilations and groups, 1-D (run as 2-D of height
// 1) and 3-D; FusedConv's bias, residual and activations; ConvGrad's three gradients.
TEST_F(CudaKernelTest, ConvForwardFusedAndGrad) {
  struct Case {
    std::vector<int64_t> x, w;
    std::vector<Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 8}, {8, 3, 3, 3}, {}},
      {{2, 4, 11, 10}, {6, 2, 3, 3},
       {Attribute::Ints("pads", {1, 1, 1, 1}), Attribute::Ints("strides", {2, 2}), Attribute::Int("group", 2)}},
      {{1, 3, 12, 12}, {4, 3, 3, 3}, {Attribute::Ints("dilations", {2, 2}), Attribute::Ints("pads", {2, 2, 2, 2})}},
      {{3, 2, 17}, {5, 2, 4}, {Attribute::Ints("strides", {2})}},
      {{1, 2, 5, 6, 7}, {3, 2, 2, 3, 3}, {Attribute::Ints("pads", {0, 1, 1, 0, 1, 1})}},
      // Asymmetric pads (a zero-padded copy of X for cuDNN): TF's SAME at stride 2, and 1-D.
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {Attribute::Ints("pads", {0, 0, 1, 1}), Attribute::Ints("strides", {2, 2})}},
      {{2, 3, 7, 9}, {4, 3, 3, 2}, {Attribute::String("auto_pad", "SAME_UPPER"), Attribute::Ints("strides", {2, 2})}},
      {{3, 2, 10}, {4, 2, 3}, {Attribute::Ints("pads", {0, 2})}}};
  int seed = 60;
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      Tensor x = Make(t, c.x, Uniform(ew_test::Count(c.x), -1, 1, ++seed));
      Tensor w = Make(t, c.w, Uniform(ew_test::Count(c.w), -0.5, 0.5, ++seed));
      Tensor b = Make(t, {c.w[0]}, Uniform(c.w[0], -1, 1, ++seed));
      Check("Conv", {x, w}, c.attrs);
      Check("Conv", {x, w, b}, c.attrs);
      // The output's shape, for Z and dY.
      auto probe = MakeNode("Conv", {x, w}, 1, c.attrs, "");
      auto y = testing_util::RunCpuKernel(*probe.node, {x, w}, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      Tensor z = Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, ++seed));
      for (const char* act : {"", "Relu", "Sigmoid", "Tanh"}) {
        std::vector<Attribute> fused = c.attrs;
        fused.push_back(Attribute::String("activation", act));
        Check("FusedConv", {x, w, b, z}, fused, 1, "ai.mixtrain");
        Check("FusedConv", {x, w, b}, fused, 1, "ai.mixtrain");
      }
      Tensor dy = Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, ++seed));
      Check("ConvGrad", {dy, x, w}, c.attrs, 3, "ai.mixtrain");
    }
}

// MaxPool and MaxPoolGrad: the 2x2/2 pool of every CNN, overlapping 3x3/2 windows with pads,
// ceil_mode, dilations and 1-D; ties (a Relu's zeros) go to the first maximum; relu = 1 drops
// windows whose maximum is not > 0.
TEST_F(CudaKernelTest, MaxPoolAndGrad) {
  struct Case {
    std::vector<int64_t> x;
    std::vector<Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 8, 10}, {Attribute::Ints("kernel_shape", {2, 2}), Attribute::Ints("strides", {2, 2})}},
      {{2, 2, 9, 9},
       {Attribute::Ints("kernel_shape", {3, 3}), Attribute::Ints("strides", {2, 2}), Attribute::Ints("pads", {1, 1, 1, 1})}},
      {{1, 2, 7, 8},
       {Attribute::Ints("kernel_shape", {2, 3}), Attribute::Ints("strides", {2, 2}), Attribute::Int("ceil_mode", 1)}},
      {{1, 2, 9, 9}, {Attribute::Ints("kernel_shape", {2, 2}), Attribute::Ints("dilations", {2, 2})}},
      {{3, 4, 13}, {Attribute::Ints("kernel_shape", {3}), Attribute::Ints("strides", {2})}}};
  int seed = 90;
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      std::vector<double> v = Uniform(ew_test::Count(c.x), -1, 1, ++seed);
      for (size_t i = 0; i < v.size(); i += 3) v[i] = 0;  // ties at zero, as after a Relu
      Tensor x = Make(t, c.x, v);
      Check("MaxPool", {x}, c.attrs);
      auto probe = MakeNode("MaxPool", {x}, 1, c.attrs, "");
      auto y = testing_util::RunCpuKernel(*probe.node, {x}, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      Tensor dy = Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, ++seed));
      Check("MaxPoolGrad", {dy, x}, c.attrs, 1, "ai.mixtrain");
      std::vector<Attribute> relu = c.attrs;
      relu.push_back(Attribute::Int("relu", 1));
      Check("MaxPoolGrad", {dy, x}, relu, 1, "ai.mixtrain");
    }
}

// Data movement by element size: floats, int64 and bool through Concat/Split (strided 2-D copies
// at every axis), Transpose (attention's [B, T, H, D] -> [B, H, T, D], the default reversal),
// Expand and Where with broadcasting.
// AveragePool's divisors (pads counted or not, ceil_mode windows past the end pads) and their
// gradient; GlobalAveragePool.
TEST_F(CudaKernelTest, AveragePoolAndGrad) {
  using A = Attribute;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<Attribute>>> cases = {
      {{2, 3, 8, 10}, {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})}},
      {{2, 2, 9, 9}, {A::Ints("kernel_shape", {3, 3}), A::Ints("strides", {2, 2}), A::Ints("pads", {1, 1, 1, 1})}},
      {{2, 2, 9, 9},
       {A::Ints("kernel_shape", {3, 3}), A::Ints("strides", {2, 2}), A::Ints("pads", {1, 1, 1, 1}),
        A::Int("count_include_pad", 1)}},
      {{1, 2, 7, 8},
       {A::Ints("kernel_shape", {2, 3}), A::Ints("strides", {2, 2}), A::Int("ceil_mode", 1), A::Ints("pads", {0, 1, 0, 1}),
        A::Int("count_include_pad", 1)}},
      {{3, 4, 13}, {A::Ints("kernel_shape", {3}), A::Ints("strides", {2})}}};
  int seed = 130;
  for (DType t : kDtypes) {
    for (const auto& [xd, attrs] : cases) {
      Tensor x = Make(t, xd, Uniform(ew_test::Count(xd), -1, 1, ++seed));
      Check("AveragePool", {x}, attrs);
      auto probe = MakeNode("AveragePool", {x}, 1, attrs, "");
      auto y = testing_util::RunCpuKernel(*probe.node, {x}, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      Check("AveragePoolGrad", {Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, ++seed)), x}, attrs, 1, "ai.mixtrain");
    }
    Check("GlobalAveragePool", {Make(t, {3, 5, 7, 9}, Uniform(945, -1, 1, ++seed))});
    Check("GlobalAveragePool", {Make(t, {2, 4, 1000}, Uniform(8000, -1, 1, ++seed))});
  }
}

// BatchNormalization in training (opset 15's three outputs, opset 9's five) and inference, with
// parameters in the data's dtype or f32; its gradient in both modes.
TEST_F(CudaKernelTest, BatchNormAndGrad) {
  for (DType t : kDtypes)
    for (DType pt : {t, DType::kF32}) {
      const int64_t C = 6;
      Tensor x = Make(t, {4, C, 5, 7}, Uniform(4 * C * 35, -2, 3, 140));
      Tensor scale = Make(pt, {C}, Uniform(C, 0.5, 1.5, 141)), bias = Make(pt, {C}, Uniform(C, -1, 1, 142));
      Tensor mean = Make(pt, {C}, Uniform(C, -0.5, 0.5, 143)), var = Make(pt, {C}, Uniform(C, 0.5, 2, 144));
      const std::vector<Tensor> in = {x, scale, bias, mean, var};
      Check("BatchNormalization", in, {Attribute::Int("training_mode", 1), Attribute::Float("momentum", 0.8f)}, 3, "",
            15);
      Check("BatchNormalization", in, {}, 1, "", 15);  // inference
      Check("BatchNormalization", in, {Attribute::Float("epsilon", 1e-3f)}, 5, "", 9);
      Tensor dy = Make(t, {4, C, 5, 7}, Uniform(4 * C * 35, -1, 1, 145));
      for (int training = 0; training < 2; ++training)
        Check("BatchNormalizationGrad", {dy, x, scale, mean, var}, {Attribute::Int("training_mode", training)}, 3,
              "ai.mixtrain");
    }
}

// Slice (negative steps, axes, clamped ends) and Pad in every mode (negative pads crop), with
// their gradients; integer data for the forward ops.
TEST_F(CudaKernelTest, SliceAndPad) {
  using I = std::vector<double>;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI64}) {
    Tensor x = Make(t, {4, 6, 5}, Uniform(120, -9, 9, 150));
    const std::vector<std::vector<Tensor>> slices = {
        {Make(DType::kI64, {2}, I{1, 0}), Make(DType::kI64, {2}, I{3, 100}), Make(DType::kI64, {2}, I{0, 2})},
        {Make(DType::kI64, {2}, I{-1, 4}), Make(DType::kI64, {2}, I{-100, 0}), Make(DType::kI64, {2}, I{1, 2}),
         Make(DType::kI64, {2}, I{-2, -1})},
        {Make(DType::kI32, {1}, I{1}), Make(DType::kI32, {1}, I{6}), Make(DType::kI32, {1}, I{1}),
         Make(DType::kI32, {1}, I{2})}};
    for (const auto& p : slices) {
      std::vector<Tensor> in = {x};
      in.insert(in.end(), p.begin(), p.end());
      Check("Slice", in);
      if (t == DType::kI64) continue;
      auto y = testing_util::RunCpuKernel(*MakeNode("Slice", in, 1).node, in, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      std::vector<Tensor> g = {Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, 151)), Make(DType::kI64, {3}, I{4, 6, 5})};
      g.insert(g.end(), p.begin(), p.end());
      Check("SliceGrad", g, {}, 1, "ai.mixtrain");
    }
    for (const char* mode : {"constant", "edge", "reflect", "wrap"}) {
      for (const I& pads : {I{1, 0, 2, 0, 2, 1}, I{0, -1, 3, 1, 0, -2}}) {
        std::vector<Tensor> in = {x, Make(DType::kI64, {6}, pads)};
        if (std::string(mode) == "constant") in.push_back(Make(t, {}, I{2.5}));
        Check("Pad", in, {Attribute::String("mode", mode)});
        if (t == DType::kI64) continue;
        auto y = testing_util::RunCpuKernel(*MakeNode("Pad", in, 1, {Attribute::String("mode", mode)}).node, in, 17);
        ASSERT_TRUE(y.ok()) << y.status();
        const std::vector<int64_t> yd = (*y)[0].dims();
        Check("PadGrad", {Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, 152)), Make(DType::kI64, {6}, pads)},
              {Attribute::String("mode", mode)}, 1, "ai.mixtrain");
      }
    }
  }
}

// Comparisons and logic into bool, IsNaN, HardSigmoid and HardSwish.
TEST_F(CudaKernelTest, ComparisonsAndHardActivations) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64}) {
    std::vector<double> av = Uniform(60, -3, 3, 160), bv = Uniform(12, -3, 3, 161);
    for (size_t i = 0; i < 12; ++i) av[i * 5] = bv[i];  // some equal pairs
    for (double& v : av) v = std::round(v * 2) / 2;
    for (double& v : bv) v = std::round(v * 2) / 2;
    Tensor a = Make(t, {5, 12}, av), b = Make(t, {12}, bv);
    for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}) Check(op, {a, b});
  }
  Tensor p = Make(DType::kBool, {4, 3}, Uniform(12, 0, 1.6, 162)), q = Make(DType::kBool, {3}, {1, 0, 1});
  for (const char* op : {"And", "Or", "Xor", "Equal"}) Check(op, {p, q});
  for (DType t : kDtypes) {
    std::vector<double> v = Uniform(100, -8, 8, 163);
    v[3] = NAN;
    v[50] = INFINITY;
    Tensor x = Make(t, {10, 10}, v);
    Check("IsNaN", {x});
    Check("HardSwish", {x});
    Check("HardSigmoid", {x});
    Check("HardSigmoid", {x}, {Attribute::Float("alpha", 0.3f), Attribute::Float("beta", 0.4f)});
  }
}

// GroupNormalization with per-channel (opset 21) and per-group (opset 18) parameters, and its
// gradient; one group per channel is InstanceNormalization's.
TEST_F(CudaKernelTest, GroupNormAndGrad) {
  for (DType t : kDtypes)
    for (DType pt : {t, DType::kF32})
      for (int64_t groups : {1, 3, 6}) {
        const int64_t C = 6;
        Tensor x = Make(t, {3, C, 5, 4}, Uniform(3 * C * 20, -2, 3, 170));
        for (int64_t affine : {C, groups}) {
          Tensor scale = Make(pt, {affine}, Uniform(affine, 0.5, 1.5, 171));
          Tensor bias = Make(pt, {affine}, Uniform(affine, -1, 1, 172));
          const std::vector<Attribute> attrs = {Attribute::Int("num_groups", groups), Attribute::Float("epsilon", 1e-4f)};
          Check("GroupNormalization", {x, scale, bias}, attrs, 1, "", affine == C ? 21 : 18);
          Tensor dy = Make(t, {3, C, 5, 4}, Uniform(3 * C * 20, -1, 1, 173));
          Check("GroupNormalizationGrad", {dy, x, scale}, attrs, 3, "ai.mixtrain");
        }
      }
  for (DType t : kDtypes) {
    Tensor x = Make(t, {2, 5, 7, 3}, Uniform(210, -2, 3, 174));
    Check("InstanceNormalization", {x, Make(t, {5}, Uniform(5, 0.5, 1.5, 175)), Make(t, {5}, Uniform(5, -1, 1, 176))},
          {Attribute::Float("epsilon", 1e-4f)});
  }
}

// Elu, and CumSum along each axis, forwards and reversed, inclusive and exclusive.
TEST_F(CudaKernelTest, EluAndCumSum) {
  for (DType t : kDtypes) {
    Tensor x = Make(t, {4, 9}, Uniform(36, -4, 4, 180));
    Check("Elu", {x});
    Check("Elu", {x}, {Attribute::Float("alpha", 0.5f)});
  }
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64}) {
    Tensor x = Make(t, {3, 4, 5}, Uniform(60, -5, 5, 181));
    for (int64_t axis : {0, 1, -1})
      for (int exclusive = 0; exclusive < 2; ++exclusive)
        for (int reverse = 0; reverse < 2; ++reverse)
          Check("CumSum", {x, Make(DType::kI64, {}, {double(axis)})},
                {Attribute::Int("exclusive", exclusive), Attribute::Int("reverse", reverse)});
  }
}

// Resize in nearest, linear and cubic modes with scales or sizes (and a crop box), Upsample, and
// ResizeGrad's adjoint of the same taps.
TEST_F(CudaKernelTest, ResizeAndGrad) {
  using A = Attribute;
  using V = std::vector<double>;
  struct Case {
    std::vector<Attribute> attrs;
    std::vector<double> roi, scales, sizes;
  };
  const std::vector<Case> cases = {
      {{A::String("mode", "nearest")}, {}, {1, 1, 2, 1.5}, {}},
      {{A::String("mode", "linear")}, {}, {1, 1, 0.5, 1.75}, {}},
      {{A::String("mode", "linear"), A::String("coordinate_transformation_mode", "align_corners")}, {}, {}, {2, 3, 9, 4}},
      {{A::String("mode", "cubic"), A::Int("exclude_outside", 1)}, {}, {1, 1, 1.5, 2}, {}},
      {{A::String("mode", "linear"), A::String("coordinate_transformation_mode", "tf_crop_and_resize"),
        A::Float("extrapolation_value", -2)},
       {0, 0, -0.2, 0.1, 1, 1, 1.1, 0.9}, {}, {2, 3, 7, 6}},
  };
  for (DType t : kDtypes) {
    Tensor x = Make(t, {2, 3, 5, 4}, Uniform(120, -2, 2, 190));
    for (const Case& c : cases) {
      std::vector<Tensor> in = {x, c.roi.empty() ? Tensor() : Make(DType::kF32, {8}, c.roi),
                                c.scales.empty() ? Tensor() : Make(DType::kF32, {4}, c.scales),
                                c.sizes.empty() ? Tensor() : Make(DType::kI64, {4}, c.sizes)};
      if (c.sizes.empty()) in.pop_back();
      Check("Resize", in, c.attrs);
      auto y = testing_util::RunCpuKernel(*MakeNode("Resize", in, 1, c.attrs).node, in, 17);
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<int64_t> yd = (*y)[0].dims();
      Check("ResizeGrad",
            {Make(t, yd, Uniform(ew_test::Count(yd), -1, 1, 191)), Make(DType::kI64, {4}, V{2, 3, 5, 4}),
             c.roi.empty() ? Tensor() : Make(DType::kF32, {8}, c.roi),
             c.scales.empty() ? Tensor() : Make(DType::kF32, {4}, c.scales)},
            c.attrs, 1, "ai.mixtrain");
    }
    Check("Upsample", {x, Make(DType::kF32, {4}, V{1, 1, 2, 2})}, {A::String("mode", "nearest")}, 1, "", 9);
  }
}

// ConvTranspose: strides, pads (the crop), output_padding, groups, dilations, 1-D and 2-D, bias.
TEST_F(CudaKernelTest, ConvTranspose) {
  using A = Attribute;
  struct Case {
    std::vector<int64_t> x, w;
    std::vector<Attribute> attrs;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 4, 5, 6}, {4, 3, 3, 3}, {A::Ints("strides", {2, 2})}, true},
      {{2, 4, 5, 6}, {4, 3, 3, 3}, {A::Ints("strides", {2, 2}), A::Ints("pads", {1, 1, 1, 1}),
                                    A::Ints("output_padding", {1, 0})}, false},
      {{1, 4, 7, 5}, {4, 2, 2, 3}, {A::Int("group", 2), A::Ints("dilations", {2, 1}), A::Ints("pads", {0, 1, 1, 0})}, true},
      {{3, 2, 9}, {2, 5, 4}, {A::Ints("strides", {3})}, true},
  };
  int seed = 200;
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      std::vector<Tensor> in = {Make(t, c.x, Uniform(ew_test::Count(c.x), -1, 1, ++seed)),
                                Make(t, c.w, Uniform(ew_test::Count(c.w), -1, 1, ++seed))};
      const int64_t m = c.w[1] * (c.attrs.size() > 0 && c.attrs[0].name == "group" ? 2 : 1);
      if (c.bias) in.push_back(Make(t, {m}, Uniform(m, -1, 1, ++seed)));
      Check("ConvTranspose", in, c.attrs);
    }
}

TEST_F(CudaKernelTest, MovementOps) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kI64}) {
    Tensor a = Make(t, {2, 3, 4}, Uniform(24, -9, 9, 120));
    Tensor b = Make(t, {2, 5, 4}, Uniform(40, -9, 9, 121));
    Tensor c = Make(t, {2, 1, 4}, Uniform(8, -9, 9, 122));
    Check("Concat", {a, b, c}, {Attribute::Int("axis", 1)});
    Check("Concat", {a, a}, {Attribute::Int("axis", 0)});
    Check("Concat", {a, a, a}, {Attribute::Int("axis", -1)});
    Tensor whole = Make(t, {4, 6, 3}, Uniform(72, -9, 9, 123));
    Check("Split", {whole}, {Attribute::Int("axis", 1), Attribute::Ints("split", {1, 2, 3})}, 3, "", 11);
    Check("Split", {whole}, {Attribute::Int("axis", 0), Attribute::Ints("split", {3, 1})}, 2, "", 11);
    Tensor x4 = Make(t, {2, 5, 3, 4}, Uniform(120, -9, 9, 124));
    Check("Transpose", {x4}, {Attribute::Ints("perm", {0, 2, 1, 3})});
    Check("Transpose", {x4});
    Check("Expand", {c, Make(DType::kI64, {4}, {3, 2, 5, 4})});
    Tensor cond = Make(DType::kBool, {5, 1}, {1, 0, 0, 1, 1});
    Check("Where", {cond, Make(t, {5, 4}, Uniform(20, -9, 9, 125)), Make(t, {4}, Uniform(4, -9, 9, 126))});
  }
}

}  // namespace
}  // namespace mixtrain
