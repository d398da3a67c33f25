// The oneDNN-backed ConvGrad and the pooling backward loops against direct reference loops in
// double, at shapes where oneDNN picks its blocked-layout kernels (the finite-difference checks
// in tests/passes/ use tiny shapes that its reference kernels take): fp32 and bf16 (native on
// CPUs with avx512_bf16, staged through fp32 elsewhere), only dX or only dW requested, an empty
// batch, and MaxPool's first-maximum rule on ties (windows of zeros after a Relu).
#include <bit>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "graph/half.h"
#include "graph/tensor.h"
#include "kernels/cpu/simd_target.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain {
namespace {

using testing_util::MakeNode;
using testing_util::RunCpuKernel;
using A = Attribute;

Tensor Random(DType dt, std::vector<int64_t> dims, uint32_t seed) {
  Tensor t(dt, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = u(rng);
    if (dt == DType::kF32) t.data_as<float>()[i] = v;
    else t.data_as<uint16_t>()[i] = FloatToBFloat16(v);
  }
  return t;
}

struct Conv2D {
  int64_t group = 1, stride = 1, pad = 0, dil = 1;
  std::vector<A> attrs() const {
    return {A::Int("group", group), A::Ints("strides", {stride, stride}),
            A::Ints("pads", {pad, pad, pad, pad}), A::Ints("dilations", {dil, dil})};
  }
};

// dX and dW of a 2-D Conv by direct loops in double.
void ReferenceConvGrad(const Conv2D& c, const Tensor& dy, const Tensor& x, const Tensor& w,
                       std::vector<double>* dx, std::vector<double>* dw) {
  const int64_t N = x.dims()[0], C = x.dims()[1], H = x.dims()[2], W = x.dims()[3];
  const int64_t M = w.dims()[0], Cg = w.dims()[1], KH = w.dims()[2], KW = w.dims()[3];
  const int64_t OH = dy.dims()[2], OW = dy.dims()[3], Mg = M / c.group;
  dx->assign(x.numel(), 0.0);
  dw->assign(w.numel(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t cl = 0; cl < Cg; ++cl)
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw)
            for (int64_t oh = 0; oh < OH; ++oh)
              for (int64_t ow = 0; ow < OW; ++ow) {
                const int64_t ih = oh * c.stride + kh * c.dil - c.pad;
                const int64_t iw = ow * c.stride + kw * c.dil - c.pad;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t ci = (m / Mg) * Cg + cl;
                const int64_t xi = ((n * C + ci) * H + ih) * W + iw;
                const int64_t wi = ((m * Cg + cl) * KH + kh) * KW + kw;
                const double g = dy.GetDouble(((n * M + m) * OH + oh) * OW + ow);
                (*dx)[xi] += g * w.GetDouble(wi);
                (*dw)[wi] += g * x.GetDouble(xi);
              }
}

void ExpectClose(const Tensor& got, const std::vector<double>& want, double rel,
                 const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double scale = 1e-12;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.GetDouble(i), want[i], rel * scale) << what << "[" << i << "]";
}

// Runs ConvGrad on random operands of the given shapes and checks both outputs.
void CheckConvGrad(DType dt, const Conv2D& c, std::vector<int64_t> x_dims,
                   std::vector<int64_t> w_dims) {
  const int64_t oh = (x_dims[2] + 2 * c.pad - (w_dims[2] - 1) * c.dil - 1) / c.stride + 1;
  const int64_t ow = (x_dims[3] + 2 * c.pad - (w_dims[3] - 1) * c.dil - 1) / c.stride + 1;
  Tensor x = Random(dt, x_dims, 1), w = Random(dt, w_dims, 2);
  Tensor dy = Random(dt, {x_dims[0], w_dims[0], oh, ow}, 3);
  auto node = MakeNode("ConvGrad", {dy, x, w}, 3, c.attrs(), "ai.mixtrain");
  auto got = RunCpuKernel(*node.node, {dy, x, w});
  ASSERT_TRUE(got.ok()) << got.status().message();
  std::vector<double> dx, dw, db(w_dims[0], 0.0);
  ReferenceConvGrad(c, dy, x, w, &dx, &dw);
  for (int64_t i = 0; i < dy.numel(); ++i) db[(i / (oh * ow)) % w_dims[0]] += dy.GetDouble(i);
  // fp32: summation order only. bf16: the outputs' rounding (inputs are exact bf16 values).
  const double rel = dt == DType::kF32 ? 1e-5 : 1e-2;
  ExpectClose((*got)[0], dx, rel, "dX");
  ExpectClose((*got)[1], dw, rel, "dW");
  ExpectClose((*got)[2], db, rel, "dB");
}

// params_to = f32 on bf16 operands (AMP's conv weight gradients, passes/fp32_grad_products.cc):
// dW and dB come out fp32, as exact as fp32 sums of the bf16 products (1e-5 of the largest),
// dX stays bf16; without it dW is bf16 and off by its rounding, far more. Also under the AVX2
// cap, where the operands are widened to fp32 first (no native bf16 there).
TEST(GradDnnl, ConvGradWideWeightGradients) {
  const Conv2D c{.pad = 1};
  Tensor x = Random(DType::kBF16, {4, 8, 9, 9}, 1), w = Random(DType::kBF16, {16, 8, 3, 3}, 2);
  Tensor dy = Random(DType::kBF16, {4, 16, 9, 9}, 3);
  std::vector<double> dx, dw, db(16, 0.0);
  ReferenceConvGrad(c, dy, x, w, &dx, &dw);
  for (int64_t i = 0; i < dy.numel(); ++i) db[(i / 81) % 16] += dy.GetDouble(i);
  std::vector<A> attrs = c.attrs();
  attrs.push_back(A::Int("params_to", 1));
  auto wide = MakeNode("ConvGrad", {dy, x, w}, 3, attrs, "ai.mixtrain");
  auto got = RunCpuKernel(*wide.node, {dy, x, w});
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ((*got)[0].dtype(), DType::kBF16);
  ASSERT_EQ((*got)[1].dtype(), DType::kF32);
  ASSERT_EQ((*got)[2].dtype(), DType::kF32);
  ExpectClose((*got)[0], dx, 1e-2, "dX");
  ExpectClose((*got)[1], dw, 1e-5, "dW");
  ExpectClose((*got)[2], db, 1e-5, "dB");
  auto low = MakeNode("ConvGrad", {dy, x, w}, 3, c.attrs(), "ai.mixtrain");
  auto rounded = RunCpuKernel(*low.node, {dy, x, w});
  ASSERT_TRUE(rounded.ok()) << rounded.status().message();
  double err_wide = 0, err_low = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    err_wide = std::max(err_wide, std::abs((*got)[1].GetDouble(i) - dw[i]));
    err_low = std::max(err_low, std::abs((*rounded)[1].GetDouble(i) - dw[i]));
  }
  EXPECT_GT(err_low, 30 * err_wide);
}

TEST(GradDnnl, ConvGradBlockedShapes) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    CheckConvGrad(dt, {.pad = 1}, {4, 16, 9, 9}, {32, 16, 3, 3});
    CheckConvGrad(dt, {.pad = 1}, {3, 1, 10, 10}, {32, 1, 3, 3});  // fashion_cnn's first conv
    CheckConvGrad(dt, {.group = 2, .stride = 2, .pad = 1}, {2, 32, 11, 11}, {16, 16, 3, 3});
    CheckConvGrad(dt, {.dil = 2}, {2, 16, 9, 8}, {16, 16, 2, 3});
    CheckConvGrad(dt, {.group = 16, .pad = 1}, {2, 16, 8, 8}, {16, 1, 3, 3});  // depthwise
  }
}

// Only one of dX, dW requested (the primitive for the other is never built).
TEST(GradDnnl, ConvGradSingleOutput) {
  const Conv2D c{.pad = 1};
  Tensor x = Random(DType::kF32, {2, 16, 6, 6}, 1), w = Random(DType::kF32, {16, 16, 3, 3}, 2);
  Tensor dy = Random(DType::kF32, {2, 16, 6, 6}, 3);
  std::vector<double> dx, dw;
  ReferenceConvGrad(c, dy, x, w, &dx, &dw);
  for (int want : {0, 1}) {
    Graph g;
    std::vector<Value*> ins;
    for (const Tensor* t : {&dy, &x, &w}) {
      ins.push_back(g.AddValue("in" + std::to_string(ins.size()), DType::kF32, Shape::Of(t->dims())));
      g.AddInput(ins.back());
    }
    Value* out = g.AddValue("out", DType::kF32, Shape::Of(want == 0 ? x.dims() : w.dims()));
    Node* n = g.AddNode("ConvGrad", ins, want == 0 ? std::vector<Value*>{out, nullptr}
                                                   : std::vector<Value*>{nullptr, out},
                        "node", "ai.mixtrain");
    for (A& a : c.attrs()) n->SetAttr(std::move(a));
    auto got = RunCpuKernel(*n, {dy, x, w});
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_FALSE((*got)[1 - want].defined());
    ExpectClose((*got)[want], want == 0 ? dx : dw, 1e-5, want == 0 ? "dX" : "dW");
  }
}

TEST(GradDnnl, ConvGradEmptyBatchGivesZeroWeightGradient) {
  Tensor x(DType::kF32, {0, 4, 5, 5}), dy(DType::kF32, {0, 8, 5, 5});
  Tensor w = Random(DType::kF32, {8, 4, 3, 3}, 2);
  auto node = MakeNode("ConvGrad", {dy, x, w}, 2, Conv2D{.pad = 1}.attrs(), "ai.mixtrain");
  auto got = RunCpuKernel(*node.node, {dy, x, w});
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ((*got)[0].numel(), 0);
  ExpectClose((*got)[1], std::vector<double>(w.numel(), 0.0), 0, "dW");
}

TEST(GradDnnl, ConvGradRejectsMismatchedDY) {
  Tensor x = Random(DType::kF32, {1, 4, 5, 5}, 1), w = Random(DType::kF32, {8, 4, 3, 3}, 2);
  Tensor dy = Random(DType::kF32, {1, 8, 5, 5}, 3);  // the unpadded conv's output is 3 x 3
  auto node = MakeNode("ConvGrad", {dy, x, w}, 2, {}, "ai.mixtrain");
  auto got = RunCpuKernel(*node.node, {dy, x, w});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("dY's shape"), std::string::npos) << got.status().message();
}

// MaxPool 2x2/2 over Relu-like data: windows of equal values send the gradient to their first
// element in scan order; overlapping 3x3/1 windows add up at a shared maximum. Both dtypes.
TEST(GradDnnl, MaxPoolGradTiesAndOverlap) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    auto make = [&](std::vector<int64_t> dims, std::vector<float> v) {
      Tensor t(dt, std::move(dims));
      for (size_t i = 0; i < v.size(); ++i) {
        if (dt == DType::kF32) t.data_as<float>()[i] = v[i];
        else t.data_as<uint16_t>()[i] = FloatToBFloat16(v[i]);
      }
      return t;
    };
    // 1 x 1 x 4 x 4: top-left window all zeros, top-right has its max at (1, 3), bottom-left
    // ties 2 = 2 at (2, 1) and (3, 0), bottom-right all 5.
    Tensor x = make({1, 1, 4, 4}, {0, 0, 1, 0,  //
                                   0, 0, 0, 3,  //
                                   1, 2, 5, 5,  //
                                   2, 0, 5, 5});
    Tensor dy = make({1, 1, 2, 2}, {1, 2, 3, 4});
    auto pool = MakeNode("MaxPoolGrad", {dy, x}, 1,
                         {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})}, "ai.mixtrain");
    auto got = RunCpuKernel(*pool.node, {dy, x});
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectClose((*got)[0], {1, 0, 0, 0,  //
                            0, 0, 0, 2,  //
                            0, 3, 4, 0,  //
                            0, 0, 0, 0},
                0, "dX");

    // 3x3 windows, stride 1, pad 1: every window holding the 9 at (1, 1) routes to it.
    Tensor x2 = make({1, 1, 3, 3}, {0, 0, 0, 0, 9, 0, 0, 0, 1});
    Tensor dy2 = make({1, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1});
    auto overlap = MakeNode("MaxPoolGrad", {dy2, x2}, 1,
                            {A::Ints("kernel_shape", {3, 3}), A::Ints("pads", {1, 1, 1, 1})},
                            "ai.mixtrain");
    auto got2 = RunCpuKernel(*overlap.node, {dy2, x2});
    ASSERT_TRUE(got2.ok()) << got2.status().message();
    ExpectClose((*got2)[0], {0, 0, 0, 0, 9, 0, 0, 0, 0}, 0, "dX overlapping");
  }
}

// Windows that tile the input (kernel == stride; the kernel's fast paths, 2x2 and general)
// against a plain loop: ties (values -1..2, so Relu-killed windows too), odd sizes whose last
// rows/columns no window covers, non-square windows, fp32 and bf16, and with relu=1 (the
// fuse_backward form: the gradient kept only where the window's maximum is > 0). Both the
// AVX-512 and the AVX2 loops where the CPU has AVX-512.
TEST(GradDnnl, MaxPoolGradDisjointWindowsMatchAPlainLoop) {
  struct Case { std::vector<int64_t> k; int64_t h, w; };
  const bool avx512 = cpu::Avx512Enabled();
  for (bool wide : {true, false}) {
   if (wide && !avx512) continue;
   cpu::Avx512Enabled() = wide;
   for (DType dt : {DType::kF32, DType::kBF16})
   for (bool relu : {false, true})
   for (const Case& c : {Case{{2, 2}, 7, 8}, Case{{2, 2}, 6, 35}, Case{{3, 3}, 7, 8}, Case{{2, 3}, 7, 8}}) {
    SCOPED_TRACE(absl::StrCat(DTypeName(dt), " relu ", relu, " k ", c.k[0], "x", c.k[1], " ",
                              c.h, "x", c.w, wide ? " avx512" : " avx2"));
    const int64_t n = 2, ch = 3, h = c.h, w = c.w;
    const int64_t oh = h / c.k[0], ow = w / c.k[1];
    Tensor x(DType::kF32, {n, ch, h, w}), dy(DType::kF32, {n, ch, oh, ow});
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>((i * 7919) % 4) - 1.0f;
    for (int64_t i = 0; i < dy.numel(); ++i) dy.data_as<float>()[i] = 1.0f + static_cast<float>(i % 13);
    std::vector<double> want(x.numel(), 0.0);
    for (int64_t p = 0; p < n * ch; ++p)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < ow; ++q) {
          int64_t best = -1;
          for (int64_t a = 0; a < c.k[0]; ++a)
            for (int64_t b = 0; b < c.k[1]; ++b) {
              const int64_t i = p * h * w + (r * c.k[0] + a) * w + q * c.k[1] + b;
              if (best < 0 || x.data_as<float>()[i] > x.data_as<float>()[best]) best = i;
            }
          if (!relu || x.data_as<float>()[best] > 0) want[best] += dy.data_as<float>()[p * oh * ow + r * ow + q];
        }
    std::vector<A> attrs = {A::Ints("kernel_shape", c.k), A::Ints("strides", c.k)};
    if (relu) attrs.push_back(A::Int("relu", 1));
    Tensor xt = ConvertFloat(x, dt), dyt = ConvertFloat(dy, dt);  // small integers: exact in bf16
    auto pool = MakeNode("MaxPoolGrad", {dyt, xt}, 1, attrs, "ai.mixtrain");
    auto got = RunCpuKernel(*pool.node, {dyt, xt});
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectClose((*got)[0], want, 0, "dX");
   }
  }
  cpu::Avx512Enabled() = avx512;
}

// The forward 2x2/2 MaxPool path (plain NCHW, as the training graph runs it) against a plain
// loop: ties, negative values, odd sizes, both dtypes, both vector widths.
TEST(GradDnnl, MaxPool2x2MatchesAPlainLoop) {
  const bool avx512 = cpu::Avx512Enabled();
  for (bool wide : {true, false}) {
    if (wide && !avx512) continue;
    cpu::Avx512Enabled() = wide;
    for (DType dt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), wide ? " avx512" : " avx2"));
      const int64_t n = 2, ch = 3, h = 9, w = 37, oh = h / 2, ow = w / 2;
      Tensor x(DType::kF32, {n, ch, h, w});
      for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>((i * 7919) % 9) - 4.0f;
      std::vector<double> want;
      for (int64_t p = 0; p < n * ch; ++p)
        for (int64_t r = 0; r < oh; ++r)
          for (int64_t q = 0; q < ow; ++q) {
            float m = -1e30f;
            for (int64_t a = 0; a < 2; ++a)
              for (int64_t b = 0; b < 2; ++b) m = std::max(m, x.data_as<float>()[p * h * w + (2 * r + a) * w + 2 * q + b]);
            want.push_back(m);
          }
      Tensor xt = ConvertFloat(x, dt);
      auto pool = MakeNode("MaxPool", {xt}, 1, {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})});
      auto got = RunCpuKernel(*pool.node, {xt});
      ASSERT_TRUE(got.ok()) << got.status().message();
      ExpectClose((*got)[0], want, 0, "Y");
    }
  }
  cpu::Avx512Enabled() = avx512;
}

// The 2x2/2 pools bit for bit against a scalar loop of the same rule, at every row width from 1
// to 40 outputs (the AVX-512 loops step 16 outputs and mask the row's end) with odd input widths
// and heights too: NaN wins only as a window's first element, a later +0 does not beat a first
// -0 (their bits differ), relu=1 drops a window whose maximum is NaN or <= 0. Forward and
// gradient, fp32 and bf16, both vector widths.
TEST(GradDnnl, MaxPool2x2BitsAtEveryRowWidth) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float values[] = {nan, -0.0f, 0.0f, 1.0f, -2.0f, 3.0f, 0.0f, -0.0f, 2.0f};
  const bool avx512 = cpu::Avx512Enabled();
  for (bool wide : {true, false}) {
    if (wide && !avx512) continue;
    cpu::Avx512Enabled() = wide;
    for (DType dt : {DType::kF32, DType::kBF16})
      for (int64_t ow = 1; ow <= 40; ++ow) {
        const int64_t n = 1, ch = 2, oh = 3, h = 2 * oh + ow % 2, w = 2 * ow + (ow % 3 == 0);
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), " ", h, "x", w, wide ? " avx512" : " avx2"));
        Tensor x(DType::kF32, {n, ch, h, w}), dy(DType::kF32, {n, ch, oh, ow});
        for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = values[(i * 7919 + ow) % 9];
        for (int64_t i = 0; i < dy.numel(); ++i) dy.data_as<float>()[i] = 1.0f + static_cast<float>(i % 13);
        const Tensor xt = ConvertFloat(x, dt), dyt = ConvertFloat(dy, dt);
        auto bits = [&](const Tensor& t, int64_t i) -> uint32_t {
          if (dt == DType::kF32) return std::bit_cast<uint32_t>(t.data_as<float>()[i]);
          return t.data_as<uint16_t>()[i];
        };
        // The scalar rule, as indices into x: first maximum in scan order.
        std::vector<int64_t> win(n * ch * oh * ow);
        for (int64_t p = 0; p < n * ch; ++p)
          for (int64_t r = 0; r < oh; ++r)
            for (int64_t q = 0; q < ow; ++q) {
              int64_t best = -1;
              for (int64_t a = 0; a < 2; ++a)
                for (int64_t b = 0; b < 2; ++b) {
                  const int64_t i = p * h * w + (2 * r + a) * w + 2 * q + b;
                  if (best < 0 || x.data_as<float>()[i] > x.data_as<float>()[best]) best = i;
                }
              win[(p * oh + r) * ow + q] = best;
            }
        auto pool = MakeNode("MaxPool", {xt}, 1, {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})});
        auto y = RunCpuKernel(*pool.node, {xt});
        ASSERT_TRUE(y.ok()) << y.status().message();
        for (size_t o = 0; o < win.size(); ++o)
          ASSERT_EQ(bits((*y)[0], o), bits(xt, win[o])) << "Y at " << o;
        for (bool relu : {false, true}) {
          std::vector<A> attrs = {A::Ints("kernel_shape", {2, 2}), A::Ints("strides", {2, 2})};
          if (relu) attrs.push_back(A::Int("relu", 1));
          auto grad = MakeNode("MaxPoolGrad", {dyt, xt}, 1, attrs, "ai.mixtrain");
          auto dx = RunCpuKernel(*grad.node, {dyt, xt});
          ASSERT_TRUE(dx.ok()) << dx.status().message();
          Tensor want = ConvertFloat(Tensor(DType::kF32, {n, ch, h, w}), dt);  // zeros
          for (size_t o = 0; o < win.size(); ++o)
            if (!relu || x.data_as<float>()[win[o]] > 0.0f) {
              if (dt == DType::kF32) want.data_as<float>()[win[o]] = dyt.data_as<float>()[o];
              else want.data_as<uint16_t>()[win[o]] = dyt.data_as<uint16_t>()[o];
            }
          for (int64_t i = 0; i < want.numel(); ++i)
            ASSERT_EQ(bits((*dx)[0], i), bits(want, i)) << "dX at " << i << (relu ? " relu" : "");
        }
      }
  }
  cpu::Avx512Enabled() = avx512;
}

// ---- channel_block = 16 (passes/conv_layout_train.cc) ---------------------------------------

// [N, C, sp...] <-> [N, C/k, sp..., k], element by element (any dtype: copies the bytes).
Tensor Block(const Tensor& t, int64_t k) {
  const std::vector<int64_t>& d = t.dims();
  const int64_t n = d[0], c = d[1], sp = t.numel() / (n * c), es = DTypeSize(t.dtype());
  std::vector<int64_t> bd = {n, c / k};
  bd.insert(bd.end(), d.begin() + 2, d.end());
  bd.push_back(k);
  Tensor b(t.dtype(), bd);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < sp; ++s)
        std::memcpy(static_cast<char*>(b.data()) + (((i * (c / k) + ch / k) * sp + s) * k + ch % k) * es,
                    static_cast<const char*>(t.data()) + ((i * c + ch) * sp + s) * es, es);
  return b;
}
Tensor Unblock(const Tensor& b) {
  const std::vector<int64_t>& d = b.dims();
  const int64_t k = d.back();
  std::vector<int64_t> pd = {d[0], d[1] * k};
  pd.insert(pd.end(), d.begin() + 2, d.end() - 1);
  Tensor t(b.dtype(), pd);
  const int64_t n = pd[0], c = pd[1], sp = t.numel() / (n * c), es = DTypeSize(t.dtype());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < sp; ++s)
        std::memcpy(static_cast<char*>(t.data()) + ((i * c + ch) * sp + s) * es,
                    static_cast<const char*>(b.data()) + (((i * (c / k) + ch / k) * sp + s) * k + ch % k) * es,
                    es);
  return t;
}

// ConvGrad with dY (and X, dX) channel-blocked against the reference loops: a region conv
// (X blocked, all three outputs) and an image's first conv (X plain, no dX), fp32 and bf16.
TEST(GradDnnl, ConvGradChannelBlocked) {
  for (int64_t k : {16, 8})
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (bool plain_x : {false, true}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), plain_x ? " plain X" : " blocked X", " block ", k));
      const Conv2D c{.stride = plain_x ? 1 : 2, .pad = 1};
      const std::vector<int64_t> xd = plain_x ? std::vector<int64_t>{2, 3, 10, 10} : std::vector<int64_t>{2, 16, 9, 9};
      const std::vector<int64_t> wd = {32, xd[1], 3, 3};
      const int64_t oh = (xd[2] + 2 - 3) / c.stride + 1;
      Tensor x = Random(dt, xd, 1), w = Random(dt, wd, 2), dy = Random(dt, {xd[0], 32, oh, oh}, 3);
      std::vector<double> dx, dw, db(32, 0.0);
      ReferenceConvGrad(c, dy, x, w, &dx, &dw);
      for (int64_t i = 0; i < dy.numel(); ++i) db[(i / (oh * oh)) % 32] += dy.GetDouble(i);
      std::vector<A> attrs = c.attrs();
      attrs.push_back(A::Int("channel_block", k));
      attrs.push_back(A::Int("input_channel_block", plain_x ? 0 : k));
      const Tensor dyb = Block(dy, k), xb = plain_x ? x : Block(x, k);
      Graph g;
      std::vector<Value*> ins;
      for (const Tensor* t : {&dyb, &xb, static_cast<const Tensor*>(&w)}) {
        ins.push_back(g.AddValue("in" + std::to_string(ins.size()), dt, Shape::Of(t->dims())));
        g.AddInput(ins.back());
      }
      std::vector<Value*> outs;
      for (const char* name : {"dx", "dw", "db"}) outs.push_back(g.AddValue(name, dt, Shape()));
      if (plain_x) outs[0] = nullptr;
      Node* n = g.AddNode("ConvGrad", ins, outs, "node", "ai.mixtrain");
      for (A& a : attrs) n->SetAttr(std::move(a));
      auto got = RunCpuKernel(*n, {dyb, xb, w});
      ASSERT_TRUE(got.ok()) << got.status().message();
      const double rel = dt == DType::kF32 ? 1e-5 : 1e-2;
      if (!plain_x) {
        ASSERT_EQ((*got)[0].dims(), xb.dims());
        ExpectClose(Unblock((*got)[0]), dx, rel, "dX");
      }
      ExpectClose((*got)[1], dw, rel, "dW");
      ExpectClose((*got)[2], db, rel, "dB");
    }
  }
  // A blocked operand that is not [N, C/16, sp..., 16] is refused, naming it.
  Tensor x = Random(DType::kF32, {1, 16, 5, 5}, 1), w = Random(DType::kF32, {16, 16, 3, 3}, 2);
  Tensor dy = Random(DType::kF32, {1, 16, 3, 3}, 3);
  auto bad = MakeNode("ConvGrad", {dy, Block(x, 16), w}, 2,
                      {A::Int("channel_block", 16), A::Int("input_channel_block", 16)}, "ai.mixtrain");
  auto got = RunCpuKernel(*bad.node, {dy, Block(x, 16), w});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("dY must be channel-blocked"), std::string::npos) << got.status().message();
}

// MaxPoolGrad on channel-blocked dY and X gives, bit for bit, the blocked form of the NC<sp>
// kernel's dX (the same first-maximum rule, per channel), and the 2x2/2 MaxPool its Y: 2x2/2 with
// tails no window covers,
// non-square disjoint windows, overlapping padded 3x3/2 windows; ties, NaN, relu; fp32, bf16,
// both vector widths.
TEST(GradDnnl, MaxPoolGradChannelBlockedMatchesNCHW) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float values[] = {nan, -0.0f, 0.0f, 1.0f, -2.0f, 3.0f, 0.0f, -0.0f, 2.0f, 1.0f};
  struct Case { std::vector<int64_t> k, s, pads; int64_t h, w; };
  const bool avx512 = cpu::Avx512Enabled();
  for (bool wide : {true, false}) {
    if (wide && !avx512) continue;
    cpu::Avx512Enabled() = wide;
    for (int64_t block : {16, 8})
    for (DType dt : {DType::kF32, DType::kBF16})
      for (bool relu : {false, true})
        for (const Case& c : {Case{{2, 2}, {2, 2}, {0, 0, 0, 0}, 9, 11}, Case{{2, 2}, {2, 2}, {0, 0, 0, 0}, 32, 32},
                              Case{{3, 2}, {3, 2}, {0, 0, 0, 0}, 7, 8}, Case{{3, 3}, {2, 2}, {1, 1, 1, 1}, 9, 8}}) {
          SCOPED_TRACE(absl::StrCat(DTypeName(dt), " relu ", relu, " k ", c.k[0], "x", c.k[1], " s ", c.s[0],
                                    " ", c.h, "x", c.w, " block ", block, wide ? " avx512" : " avx2"));
          const int64_t n = 2, ch = 32;
          const int64_t oh = (c.h + c.pads[0] + c.pads[2] - c.k[0]) / c.s[0] + 1;
          const int64_t ow = (c.w + c.pads[1] + c.pads[3] - c.k[1]) / c.s[1] + 1;
          Tensor x(DType::kF32, {n, ch, c.h, c.w}), dy(DType::kF32, {n, ch, oh, ow});
          for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = values[(i * 7919) % 10];
          for (int64_t i = 0; i < dy.numel(); ++i) dy.data_as<float>()[i] = 1.0f + static_cast<float>(i % 13);
          const Tensor xt = ConvertFloat(x, dt), dyt = ConvertFloat(dy, dt);
          std::vector<A> attrs = {A::Ints("kernel_shape", c.k), A::Ints("strides", c.s), A::Ints("pads", c.pads)};
          if (relu) attrs.push_back(A::Int("relu", 1));
          auto plain = MakeNode("MaxPoolGrad", {dyt, xt}, 1, attrs, "ai.mixtrain");
          auto want = RunCpuKernel(*plain.node, {dyt, xt});
          ASSERT_TRUE(want.ok()) << want.status().message();
          attrs.push_back(A::Int("channel_block", block));
          const Tensor dyb = Block(dyt, block), xb = Block(xt, block);
          auto blocked = MakeNode("MaxPoolGrad", {dyb, xb}, 1, attrs, "ai.mixtrain");
          auto got = RunCpuKernel(*blocked.node, {dyb, xb});
          ASSERT_TRUE(got.ok()) << got.status().message();
          ASSERT_EQ((*got)[0].dims(), xb.dims());
          const Tensor back = Unblock((*got)[0]);
          ASSERT_EQ(std::memcmp(back.data(), (*want)[0].data(), back.nbytes()), 0);
          if (c.k != std::vector<int64_t>{2, 2}) continue;
          // The blocked 2x2/2 forward: the same first maximum, bit for bit (NaN, -0 and +0).
          std::vector<A> fwd = {A::Ints("kernel_shape", c.k), A::Ints("strides", c.s)};
          auto pool = MakeNode("MaxPool", {xt}, 1, fwd);
          auto y = RunCpuKernel(*pool.node, {xt});
          fwd.push_back(A::Int("channel_block", block));
          auto pool_b = MakeNode("MaxPool", {xb}, 1, fwd, "ai.mixtrain");
          auto yb = RunCpuKernel(*pool_b.node, {xb});
          ASSERT_TRUE(y.ok() && yb.ok()) << y.status().message() << yb.status().message();
          const Tensor yback = Unblock((*yb)[0]);
          ASSERT_EQ(yback.dims(), (*y)[0].dims());
          ASSERT_EQ(std::memcmp(yback.data(), (*y)[0].data(), yback.nbytes()), 0) << "MaxPool Y";
        }
  }
  cpu::Avx512Enabled() = avx512;
}

}  // namespace
}  // namespace mixtrain
