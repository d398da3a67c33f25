// The CUDA kernel registry, and the elementwise, reduction, optimizer and loss kernels against the
// CPU kernels, per dtype, with shapes that reach every branch of the launchers (flat and
// broadcast binary paths, contiguous and strided softmax/reduction rows, skip flags). The other
// kernels are in cuda_matmul_kernels_test, cuda_conv_norm_kernels_test and
// cuda_movement_kernels_test (fixture: cuda_kernel_test_util.h). The GPU tests skip with the
// reason when CudaAvailable() says no (CI has no GPU); the registry test runs everywhere.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tests/cuda/cuda_kernel_test_util.h"

namespace mixtrain::cuda_test {
namespace {

// The CUDA-registered ops (and their domains) the cuda_*kernels_test files cover; the registry
// test checks the two lists agree, so a new CUDA kernel without a test fails.
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
    {"Resize", ""}, {"Upsample", ""}, {"ResizeGrad", "ai.mixtrain"}, {"ConvTranspose", ""}, {"PRelu", ""},
    {"DepthToSpace", ""}, {"SpaceToDepth", ""}};

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

// PRelu(X, slope): one slope, one per channel ([C, 1, 1], nn.PReLU(C)'s), one per element; X with
// exact zeros; and opset 6's 1-D per-channel slope.
TEST_F(CudaKernelTest, PRelu) {
  for (DType t : kDtypes) {
    std::vector<double> xv = Uniform(2 * 3 * 4 * 5, -2, 2, 8);
    for (size_t i = 0; i < xv.size(); i += 7) xv[i] = 0;
    Tensor x = Make(t, {2, 3, 4, 5}, xv);
    for (const std::vector<int64_t>& sd : {std::vector<int64_t>{1}, {3, 1, 1}, {3, 4, 5}})
      Check("PRelu", {x, Make(t, sd, Uniform(ew_test::Count(sd), 0.05, 0.5, 9))});
    Check("PRelu", {x, Make(t, {3}, Uniform(3, 0.05, 0.5, 10))}, {}, 1, "", 6);
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

}  // namespace
}  // namespace mixtrain::cuda_test
