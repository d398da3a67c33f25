// The ai.mixtrain FusedConv kernel against the unfused reference (the ONNX Conv kernel, then
// + Z and the activation on the host), channels-first and channels-last, fp32 and bf16, odd
// shapes, groups, strides, asymmetric pads, 1-D/2-D/3-D; its constant-weight cache; and the
// channels-last pools against the ONNX ones.
#include "tests/kernels/dnnl_test_util.h"

#include <cmath>

namespace mixtrain::dnnl_testing {
namespace {

using A = Attribute;

// [N, C, sp...] <-> [N, sp..., C] on host tensors.
Tensor Permute(const Tensor& t, bool to_last) {
  const auto& d = t.dims();
  const int64_t n = d[0], c = to_last ? d[1] : d.back();
  const int64_t sp = t.numel() / std::max<int64_t>(n * c, 1);
  std::vector<int64_t> nd = {d[0]};
  if (to_last) {
    nd.insert(nd.end(), d.begin() + 2, d.end());
    nd.push_back(d[1]);
  } else {
    nd.push_back(d.back());
    nd.insert(nd.end(), d.begin() + 1, d.end() - 1);
  }
  Tensor out(t.dtype(), nd);
  const size_t e = DTypeSize(t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < sp; ++s) {
        const int64_t first = (b * c + ch) * sp + s, last = (b * sp + s) * c + ch;
        std::memcpy(dst + (to_last ? last : first) * e, src + (to_last ? first : last) * e, e);
      }
  return out;
}

float Activate(const std::string& act, const std::vector<float>& p, float v) {
  if (act == "Relu") return std::max(v, 0.0f);
  if (act == "LeakyRelu") return v < 0 ? p[0] * v : v;
  if (act == "Sigmoid") return 1.0f / (1.0f + std::exp(-v));
  if (act == "Tanh") return std::tanh(v);
  if (act == "Clip") return std::min(std::max(v, p[0]), p[1]);
  return v;
}

struct Case {
  std::vector<int64_t> x, w;  // X as [N, C, sp...], W as [M, C/group, k...]
  std::vector<A> conv_attrs;
  std::string act;
  std::vector<float> params;
  bool bias = true, z = false;
};

// FusedConv on dt-rounded inputs vs fp32 Conv + Z + act on the same rounded inputs.
void CheckFused(const Case& c, DType dt, bool channels_last) {
  SCOPED_TRACE(::testing::Message() << "dtype " << DTypeName(dt) << " channels_last "
                                    << channels_last << " act '" << c.act << "'");
  std::vector<Tensor> in = {ToF32(ToType(Random(c.x, 1), dt)), ToF32(ToType(Random(c.w, 2), dt)),
                            c.bias ? ToF32(ToType(Random({c.w[0]}, 3), dt)) : Tensor()};
  auto conv = MakeNode("Conv", in, 1, c.conv_attrs);
  auto ref = RunCpuKernel(*conv.node, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Tensor want = (*ref)[0];
  Tensor z = ToF32(ToType(Random(want.dims(), 4), dt));
  for (int64_t i = 0; i < want.numel(); ++i) {
    float v = want.data_as<float>()[i] + (c.z ? z.data_as<float>()[i] : 0.0f);
    want.data_as<float>()[i] = Activate(c.act, c.params, v);
  }
  std::vector<Tensor> fin = {ToType(in[0], dt), ToType(in[1], dt),
                             c.bias ? ToType(in[2], dt) : Tensor()};
  if (c.z) fin.push_back(ToType(z, dt));
  if (channels_last) {
    fin[0] = Permute(fin[0], true);
    if (c.z) fin[3] = Permute(fin[3], true);
  }
  std::vector<A> attrs = c.conv_attrs;
  if (!c.act.empty()) attrs.push_back(A::String("activation", c.act));
  if (!c.params.empty()) attrs.push_back(A::Floats("activation_params", c.params));
  attrs.push_back(A::Int("channels_last", channels_last));
  auto fused = MakeNode("FusedConv", fin, 1, attrs, "ai.mixtrain");
  auto got = RunCpuKernel(*fused.node, fin);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ((*got)[0].dtype(), dt);
  Tensor y = channels_last ? Permute((*got)[0], false) : (*got)[0];
  ExpectNear(y, want, Tol(dt));
}

std::vector<Case> Cases() {
  const auto pads = [](std::vector<int64_t> p) { return A::Ints("pads", std::move(p)); };
  const auto strides = [](std::vector<int64_t> s) { return A::Ints("strides", std::move(s)); };
  return {
      // fashion_cnn's layers, smaller: one input channel, then 32 -> 64 (odd batch and sizes).
      {{3, 1, 9, 7}, {8, 1, 3, 3}, {pads({1, 1, 1, 1})}, "Relu", {}},
      {{2, 32, 7, 5}, {64, 32, 3, 3}, {pads({1, 1, 1, 1})}, "Relu", {}, true, true},
      // Strides, asymmetric pads, no bias, residual without activation.
      {{2, 5, 9, 8}, {6, 5, 3, 2}, {strides({2, 1}), pads({0, 1, 2, 0})}, "", {}, false, true},
      // Groups and depthwise.
      {{1, 6, 6, 6}, {4, 3, 3, 3}, {A::Int("group", 2), pads({1, 1, 1, 1})}, "LeakyRelu", {0.2f}},
      {{2, 8, 5, 5}, {8, 1, 3, 3}, {A::Int("group", 8)}, "Clip", {-0.5f, 0.7f}, true, true},
      // 1-D and 3-D.
      {{2, 3, 11}, {5, 3, 3}, {strides({2})}, "Sigmoid", {}},
      {{1, 4, 4, 5, 3}, {6, 4, 2, 3, 1}, {}, "Tanh", {}, true, true},
  };
}

TEST(FusedConvKernel, MatchesConvPlusEpilogue) {
  for (const Case& c : Cases())
    for (DType dt : {DType::kF32, DType::kBF16})
      for (bool cl : {false, true}) CheckFused(c, dt, cl);
}

TEST(FusedConvKernel, RejectsUnknownActivation) {
  std::vector<Tensor> in = {Random({1, 2, 4, 4}, 1), Random({3, 2, 3, 3}, 2)};
  auto n = MakeNode("FusedConv", in, 1, {A::String("activation", "Softmax")}, "ai.mixtrain");
  auto got = RunCpuKernel(*n.node, in);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(std::string(got.status().message()).find("Softmax"), std::string::npos);
}

// Constant weights are reordered into the primitive's layout on the first call only; later
// calls (new X, same W) must still compute with them.
TEST(FusedConvKernel, ConstantWeightsCachedAcrossCalls) {
  const std::vector<int64_t> wd = {16, 8, 3, 3};
  Tensor w = Random(wd, 2), b = Random({16}, 3);
  std::vector<A> attrs = {A::Ints("pads", {1, 1, 1, 1}), A::Int("channels_last", 1),
                          A::String("activation", "Relu")};
  auto node = MakeNode("FusedConv", {Random({2, 6, 6, 8}, 1), w, b}, 1, attrs, "ai.mixtrain");
  auto def = KernelRegistry::Global().Find(*node.node, DeviceType::kCPU,
                                           {DType::kF32, DType::kF32, DType::kF32}, {DType::kF32});
  ASSERT_TRUE(def.ok()) << def.status();
  auto kernel = (*def)->factory(*node.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  for (uint32_t seed : {10u, 11u, 12u}) {
    Tensor x = Random({2, 6, 6, 8}, seed);
    auto want = RunCpuKernel(*node.node, {x, w, b});  // a fresh kernel: no cache
    ASSERT_TRUE(want.ok()) << want.status();
    Tensor y(DType::kF32, (*want)[0].dims());
    TensorView xv{DType::kF32, x.dims(), x.data()}, wv{DType::kF32, w.dims(), w.data()},
        bv{DType::kF32, b.dims(), b.data()}, yv{DType::kF32, y.dims(), y.data()};
    KernelContext ctx(*node.node, DeviceType::kCPU, {&xv, &wv, &bv}, {&yv});
    ctx.set_constant_inputs({false, true, true});
    ASSERT_TRUE((*kernel)->Compute(ctx).ok());
    ExpectNear(y, (*want)[0], 1e-6f);
  }
}

// ---- channels-last pools --------------------------------------------------------------------

void CheckPool(const std::string& op, std::vector<int64_t> xd, std::vector<A> attrs, DType dt) {
  SCOPED_TRACE(::testing::Message() << op << " " << DTypeName(dt));
  Tensor x = ToType(Random(xd, 5), dt);
  auto ref_node = MakeNode(op, {x}, 1, attrs);
  auto want = RunCpuKernel(*ref_node.node, {x});
  ASSERT_TRUE(want.ok()) << want.status();
  Tensor xl = Permute(x, true);
  attrs.push_back(A::Int("channels_last", 1));
  auto node = MakeNode(op, {xl}, 1, attrs, "ai.mixtrain");
  auto got = RunCpuKernel(*node.node, {xl});
  ASSERT_TRUE(got.ok()) << got.status();
  // bf16 averages may round differently (another summation order).
  ExpectNear(Permute((*got)[0], false), ToF32((*want)[0]),
             dt == DType::kF32 ? 1e-6f : Tol(dt));
}

TEST(ChannelsLastPool, MatchesOnnxPools) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    CheckPool("MaxPool", {3, 5, 8, 7},
              {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})}, dt);
    CheckPool("MaxPool", {2, 3, 7, 7},
              {A::Ints("kernel_shape", {3, 3}), A::Ints("pads", {1, 1, 1, 1}),
               A::Ints("strides", {2, 2}), A::Int("ceil_mode", 1)},
              dt);
    // The ceil_mode window past the end pad: the rescale path, indexed channels-last.
    CheckPool("AveragePool", {2, 3, 6, 5},
              {A::Ints("kernel_shape", {3, 2}), A::Ints("pads", {1, 0, 1, 1}),
               A::Ints("strides", {2, 2}), A::Int("ceil_mode", 1), A::Int("count_include_pad", 1)},
              dt);
    CheckPool("AveragePool", {1, 4, 9}, {A::Ints("kernel_shape", {3}), A::Ints("strides", {2})},
              dt);
    CheckPool("GlobalAveragePool", {3, 7, 5, 4}, {}, dt);
  }
}

}  // namespace
}  // namespace mixtrain::dnnl_testing
