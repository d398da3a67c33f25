// Channel-blocked ([N, C/16, spatial..., 16]) FusedConv and ai.mixtrain pools against the ONNX
// kernels on NC<spatial> tensors, fp32 and bf16; and the accuracy of the Winograd kernel that
// FusedConv picks for fp32 3x3 stride-1 convs with constant weights, measured against a
// double-precision reference next to the direct conv's.
#include "tests/kernels/dnnl_test_util.h"

#include <cmath>

namespace mixtrain::dnnl_testing {
namespace {

using A = Attribute;
constexpr int64_t kB = 16;

// [N, C, sp...] <-> [N, C/16, sp..., 16] on host tensors.
Tensor Reblock(const Tensor& t, bool to_blocked) {
  const auto& d = t.dims();
  const int64_t n = d[0];
  const int64_t c = to_blocked ? d[1] : d[1] * d.back();
  const int64_t sp = t.numel() / std::max<int64_t>(n * c, 1);
  std::vector<int64_t> nd = {n};
  if (to_blocked) {
    nd.push_back(c / kB);
    nd.insert(nd.end(), d.begin() + 2, d.end());
    nd.push_back(kB);
  } else {
    nd.push_back(c);
    nd.insert(nd.end(), d.begin() + 2, d.end() - 1);
  }
  Tensor out(t.dtype(), nd);
  const size_t e = DTypeSize(t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < sp; ++s) {
        const int64_t plain = (b * c + ch) * sp + s;
        const int64_t blocked = ((b * (c / kB) + ch / kB) * sp + s) * kB + ch % kB;
        std::memcpy(dst + (to_blocked ? blocked : plain) * e,
                    src + (to_blocked ? plain : blocked) * e, e);
      }
  return out;
}

// Runs `node` through a kernel whose weights (input 1) are marked constant, as in an inference
// session: that is when FusedConv may use Winograd.
Tensor RunWithConstantWeights(const Node& node, const std::vector<Tensor>& in,
                              const std::vector<int64_t>& y_dims) {
  std::vector<DType> types;
  for (const Tensor& t : in) types.push_back(t.dtype());
  auto def = KernelRegistry::Global().Find(node, DeviceType::kCPU, types, {in[0].dtype()});
  EXPECT_TRUE(def.ok()) << def.status();
  auto kernel = (*def)->factory(node);
  EXPECT_TRUE(kernel.ok()) << kernel.status();
  Tensor y(in[0].dtype(), y_dims);
  std::vector<TensorView> views;
  for (const Tensor& t : in) views.push_back({t.dtype(), t.dims(), const_cast<void*>(t.data())});
  std::vector<const TensorView*> ptrs;
  for (const TensorView& v : views) ptrs.push_back(&v);
  TensorView yv{y.dtype(), y.dims(), y.data()};
  KernelContext ctx(node, DeviceType::kCPU, ptrs, {&yv});
  std::vector<bool> constant(in.size(), true);
  constant[0] = false;
  ctx.set_constant_inputs(constant);
  absl::Status st = (*kernel)->Compute(ctx);
  EXPECT_TRUE(st.ok()) << st;
  return y;
}

struct Case {
  std::vector<int64_t> x, w;  // X as [N, C, sp...], W as [M, C, k...]
  std::vector<A> attrs;
  bool x_blocked = true, z = false;
};

// Blocked FusedConv (Relu, bias, optional Z) vs the ONNX Conv plus epilogue on the host.
void CheckBlocked(const Case& c, DType dt, bool constant_weights) {
  SCOPED_TRACE(::testing::Message() << DTypeName(dt) << " x " << c.x[1] << " -> " << c.w[0]
                                    << " constant weights " << constant_weights);
  std::vector<Tensor> in = {ToF32(ToType(Random(c.x, 1), dt)), ToF32(ToType(Random(c.w, 2), dt)),
                            ToF32(ToType(Random({c.w[0]}, 3), dt))};
  auto conv = MakeNode("Conv", in, 1, c.attrs);
  auto ref = RunCpuKernel(*conv.node, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Tensor want = (*ref)[0];
  Tensor z = ToF32(ToType(Random(want.dims(), 4), dt));
  for (int64_t i = 0; i < want.numel(); ++i)
    want.data_as<float>()[i] =
        std::max(want.data_as<float>()[i] + (c.z ? z.data_as<float>()[i] : 0.0f), 0.0f);
  std::vector<Tensor> fin = {ToType(in[0], dt), ToType(in[1], dt), ToType(in[2], dt)};
  if (c.x_blocked) fin[0] = Reblock(fin[0], true);
  if (c.z) fin.push_back(Reblock(ToType(z, dt), true));
  std::vector<A> attrs = c.attrs;
  attrs.push_back(A::String("activation", "Relu"));
  attrs.push_back(A::Int("channel_block", kB));
  attrs.push_back(A::Int("input_channel_block", c.x_blocked ? kB : 0));
  auto fused = MakeNode("FusedConv", fin, 1, attrs, "ai.mixtrain");
  Tensor y;
  if (constant_weights) {
    y = RunWithConstantWeights(*fused.node, fin, Reblock(want, true).dims());
  } else {
    auto got = RunCpuKernel(*fused.node, fin);
    ASSERT_TRUE(got.ok()) << got.status();
    y = (*got)[0];
  }
  ASSERT_EQ(y.dtype(), dt);
  // Winograd's transforms round more than the direct conv (measured below).
  const float tol = dt == DType::kF32 && constant_weights ? 1e-4f : Tol(dt);
  ExpectNear(Reblock(y, false), want, tol);
}

TEST(BlockedConvKernel, MatchesConvPlusEpilogue) {
  const auto pads = A::Ints("pads", {1, 1, 1, 1});
  const std::vector<Case> cases = {
      // fashion_cnn's first conv: one plain input channel into blocked Y (odd sizes).
      {{3, 1, 9, 7}, {16, 1, 3, 3}, {pads}, false},
      // Its second, with a residual: blocked in and out, 3x3 stride 1 (Winograd's case).
      {{2, 32, 7, 5}, {64, 32, 3, 3}, {pads}, true, true},
      // Strided, asymmetric pads, a non-square kernel.
      {{2, 16, 9, 8}, {32, 16, 3, 2}, {A::Ints("strides", {2, 1}), A::Ints("pads", {0, 1, 2, 0})}},
      // 1-D.
      {{2, 16, 11}, {16, 16, 3}, {A::Ints("pads", {1, 1})}},
  };
  for (const Case& c : cases)
    for (DType dt : {DType::kF32, DType::kBF16})
      for (bool constant : {false, true}) CheckBlocked(c, dt, constant);
}

TEST(BlockedConvKernel, RejectsChannelsThatDoNotFillBlocks) {
  std::vector<Tensor> in = {Random({1, 2, 4, 4}, 1), Random({8, 2, 3, 3}, 2)};
  auto n = MakeNode("FusedConv", in, 1, {A::Int("channel_block", kB)}, "ai.mixtrain");
  auto got = RunCpuKernel(*n.node, in);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(std::string(got.status().message()).find("16"), std::string::npos) << got.status();
}

// fashion_cnn's 32 -> 64 3x3 conv (batch 4) in double precision.
std::vector<double> ReferenceConv(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t n = x.dims()[0], c = x.dims()[1], h = x.dims()[2], wd = x.dims()[3];
  const int64_t m = w.dims()[0];
  std::vector<double> y(n * m * h * wd);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t r = 0; r < h; ++r)
        for (int64_t s = 0; s < wd; ++s) {
          double acc = b.data_as<float>()[o];
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t kr = 0; kr < 3; ++kr)
              for (int64_t ks = 0; ks < 3; ++ks) {
                const int64_t rr = r + kr - 1, ss = s + ks - 1;
                if (rr < 0 || rr >= h || ss < 0 || ss >= wd) continue;
                acc += static_cast<double>(x.data_as<float>()[((i * c + ch) * h + rr) * wd + ss]) *
                       w.data_as<float>()[((o * c + ch) * 3 + kr) * 3 + ks];
              }
          y[((i * m + o) * h + r) * wd + s] = acc;
        }
  return y;
}

// max |y - ref| / max |ref|: the error relative to the output's scale (an element-wise
// relative error is unbounded where an output is near 0).
double MaxRelativeError(const Tensor& y, const std::vector<double>& ref) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::fabs(y.data_as<float>()[i] - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return err / scale;
}

// Winograd (constant weights) against the direct conv (weights not constant) on conv2's shape.
// Measured on this CPU (AMD EPYC, AVX-512) with oneDNN 2.6, uniform [-1, 1) data: here (batch
// 4) direct 3.6e-7, Winograd (jit_wino_4x3) 1.0e-6; at fashion_cnn's batch 64 over four seeds
// direct 3.8-4.5e-7, Winograd 1.2-1.6e-6, i.e. Winograd's error is 3-3.6x the direct conv's.
// The bounds are 2-2.5x the worst of those and still far below what a wrong transform or tile
// would give (errors of order 1).
TEST(BlockedConvKernel, WinogradErrorIsBounded) {
  Tensor x = Random({4, 32, 14, 14}, 11), w = Random({64, 32, 3, 3}, 12), b = Random({64}, 13);
  const std::vector<double> ref = ReferenceConv(x, w, b);
  const std::vector<A> attrs = {A::Ints("pads", {1, 1, 1, 1}), A::Int("channel_block", kB),
                                A::Int("input_channel_block", kB)};
  const std::vector<Tensor> in = {Reblock(x, true), w, b};
  auto node = MakeNode("FusedConv", in, 1, attrs, "ai.mixtrain");
  auto direct = RunCpuKernel(*node.node, in);
  ASSERT_TRUE(direct.ok()) << direct.status();
  const Tensor wino = RunWithConstantWeights(*node.node, in, (*direct)[0].dims());
  const double direct_err = MaxRelativeError(Reblock((*direct)[0], false), ref);
  const double wino_err = MaxRelativeError(Reblock(wino, false), ref);
  std::printf("max relative error: direct %.3g, winograd %.3g\n", direct_err, wino_err);
  EXPECT_LT(direct_err, 1e-6);
  EXPECT_LT(wino_err, 4e-6);
}

// ---- FusedConv with a folded max pool (kernels/cpu/conv_pool.cc) ----------------------------

struct PoolCase {
  std::vector<int64_t> x, w;
  std::vector<A> conv_attrs;
  std::vector<int64_t> pool_kernel, pool_strides;
  std::string act;
  std::vector<float> params;
};

// The folded kernel vs the ONNX Conv, the activation on the host, then the ONNX MaxPool.
void CheckConvPool(const PoolCase& c, DType dt, bool constant_weights) {
  SCOPED_TRACE(::testing::Message() << DTypeName(dt) << " act '" << c.act << "' constant "
                                    << constant_weights);
  std::vector<Tensor> in = {ToF32(ToType(Random(c.x, 1), dt)), ToF32(ToType(Random(c.w, 2), dt)),
                            ToF32(ToType(Random({c.w[0]}, 3), dt))};
  auto conv = MakeNode("Conv", in, 1, c.conv_attrs);
  auto ref = RunCpuKernel(*conv.node, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Tensor act = (*ref)[0];
  for (int64_t i = 0; i < act.numel(); ++i) {
    float& v = act.data_as<float>()[i];
    if (c.act == "Relu") v = std::max(v, 0.0f);
    if (c.act == "LeakyRelu") v = v < 0 ? c.params[0] * v : v;
    if (c.act == "Sigmoid") v = 1.0f / (1.0f + std::exp(-v));
  }
  auto pool = MakeNode("MaxPool", {act}, 1,
                       {A::Ints("kernel_shape", c.pool_kernel), A::Ints("strides", c.pool_strides)});
  auto want = RunCpuKernel(*pool.node, {act});
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> fin = {ToType(in[0], dt), ToType(in[1], dt), ToType(in[2], dt)};
  std::vector<A> attrs = c.conv_attrs;
  if (!c.act.empty()) attrs.push_back(A::String("activation", c.act));
  if (!c.params.empty()) attrs.push_back(A::Floats("activation_params", c.params));
  attrs.push_back(A::Int("channel_block", kB));
  attrs.push_back(A::Ints("pool_kernel_shape", c.pool_kernel));
  attrs.push_back(A::Ints("pool_strides", c.pool_strides));
  auto fused = MakeNode("FusedConv", fin, 1, attrs, "ai.mixtrain");
  const std::vector<int64_t> y_dims = Reblock((*want)[0], true).dims();
  Tensor y;
  if (constant_weights) {
    y = RunWithConstantWeights(*fused.node, fin, y_dims);
  } else {
    auto got = RunCpuKernel(*fused.node, fin);
    ASSERT_TRUE(got.ok()) << got.status();
    y = (*got)[0];
  }
  ASSERT_EQ(y.dims(), y_dims);
  ExpectNear(Reblock(y, false), (*want)[0], Tol(dt));
}

TEST(ConvPoolKernel, MatchesConvActivationMaxPool) {
  const auto pads = [](std::vector<int64_t> p) { return A::Ints("pads", std::move(p)); };
  const std::vector<PoolCase> cases = {
      // fashion_cnn's conv1 + pool1, smaller and with an odd batch.
      {{3, 1, 12, 12}, {32, 1, 3, 3}, {pads({1, 1, 1, 1})}, {2, 2}, {2, 2}, "Relu", {}},
      // RGB, strided asymmetric pads, an overlapping 3x3/2 pool that leaves a remainder,
      // widths that are no multiple of the kernel's run of 14.
      {{2, 3, 17, 11}, {16, 3, 3, 2}, {A::Ints("strides", {1, 2}), pads({0, 1, 2, 0})},
       {3, 3}, {2, 2}, "LeakyRelu", {0.1f}},
      // No activation (the max starts at -inf) and a non-trivial one applied after the max.
      {{1, 2, 9, 31}, {16, 2, 5, 5}, {pads({2, 2, 2, 2})}, {2, 2}, {2, 2}, "", {}},
      {{1, 1, 8, 8}, {16, 1, 3, 3}, {}, {2, 3}, {2, 1}, "Sigmoid", {}},
  };
  for (const PoolCase& c : cases)
    for (DType dt : {DType::kF32, DType::kBF16})
      for (bool constant : {false, true}) CheckConvPool(c, dt, constant);
}

// ---- blocked pools ----------------------------------------------------------------------------

void CheckPool(const std::string& op, std::vector<int64_t> xd, std::vector<A> attrs, DType dt) {
  SCOPED_TRACE(::testing::Message() << op << " " << DTypeName(dt));
  Tensor x = ToType(Random(xd, 5), dt);
  auto ref_node = MakeNode(op, {x}, 1, attrs);
  auto want = RunCpuKernel(*ref_node.node, {x});
  ASSERT_TRUE(want.ok()) << want.status();
  Tensor xb = Reblock(x, true);
  attrs.push_back(A::Int("channel_block", kB));
  auto node = MakeNode(op, {xb}, 1, attrs, "ai.mixtrain");
  auto got = RunCpuKernel(*node.node, {xb});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectNear(Reblock((*got)[0], false), ToF32((*want)[0]), dt == DType::kF32 ? 1e-6f : Tol(dt));
}

TEST(BlockedPool, MatchesOnnxPools) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    CheckPool("MaxPool", {3, 32, 8, 7},
              {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})}, dt);
    CheckPool("MaxPool", {2, 16, 7, 7},
              {A::Ints("kernel_shape", {3, 3}), A::Ints("pads", {1, 1, 1, 1}),
               A::Ints("strides", {2, 2}), A::Int("ceil_mode", 1)},
              dt);
    // The ceil_mode window past the end pad: the rescale path, indexed per block.
    CheckPool("AveragePool", {2, 16, 6, 5},
              {A::Ints("kernel_shape", {3, 2}), A::Ints("pads", {1, 0, 1, 1}),
               A::Ints("strides", {2, 2}), A::Int("ceil_mode", 1), A::Int("count_include_pad", 1)},
              dt);
  }
}

}  // namespace
}  // namespace mixtrain::dnnl_testing
