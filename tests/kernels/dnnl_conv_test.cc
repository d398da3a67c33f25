// The oneDNN-backed Conv and ConvTranspose kernels against naive reference loops: 1-D, 2-D and
// 3-D, groups and depthwise, strides, pads, dilations, auto_pad, output_padding, output_shape,
// with and without bias, in fp32, bf16 and fp16.
#include "tests/kernels/dnnl_test_util.h"

namespace mixtrain::dnnl_testing {
namespace {

struct Window {
  std::vector<int64_t> strides, dilations, pads_begin;
};

// y[n, m, o...] = b[m] + sum_{c in group, k} x[n, c, o*s - p + k*d] * w[m, c, k].
void RefConv(const std::vector<Tensor>& in, const Window& win, int64_t group, Tensor& y) {
  const Tensor &x = in[0], &w = in[1];
  const auto& xd = x.dims();
  const auto& wd = w.dims();
  const auto& yd = y.dims();
  const size_t nsp = xd.size() - 2;
  std::vector<int64_t> xsp(xd.begin() + 2, xd.end()), ksp(wd.begin() + 2, wd.end()),
      ysp(yd.begin() + 2, yd.end());
  const int64_t cg = wd[1], mg = wd[0] / group;
  auto xs = Strides(xd), ws = Strides(wd);
  int64_t yi = 0;
  for (int64_t n = 0; n < xd[0]; ++n)
    for (int64_t m = 0; m < yd[1]; ++m) {
      std::vector<int64_t> o(nsp, 0);
      do {
        double s = in.size() > 2 && in[2].defined() ? in[2].data_as<float>()[m] : 0.0;
        for (int64_t c = 0; c < cg; ++c) {
          std::vector<int64_t> k(nsp, 0);
          do {
            int64_t xo = n * xs[0] + ((m / mg) * cg + c) * xs[1], wo = m * ws[0] + c * ws[1];
            bool inside = true;
            for (size_t d = 0; d < nsp; ++d) {
              int64_t p = o[d] * win.strides[d] - win.pads_begin[d] + k[d] * win.dilations[d];
              inside &= p >= 0 && p < xsp[d];
              xo += p * xs[2 + d];
              wo += k[d] * ws[2 + d];
            }
            if (inside) s += double(x.data_as<float>()[xo]) * w.data_as<float>()[wo];
          } while (Next(k, ksp));
        }
        y.data_as<float>()[yi++] = static_cast<float>(s);
      } while (Next(o, ysp));
    }
}

// Scatter form: y[n, g*og + o, i*s - p + k*d] += x[n, g*ig + c, i] * w[g*ig + c, o, k].
void RefConvTranspose(const std::vector<Tensor>& in, const Window& win, int64_t group, Tensor& y) {
  const Tensor &x = in[0], &w = in[1];
  const auto& xd = x.dims();
  const auto& wd = w.dims();
  const auto& yd = y.dims();
  const size_t nsp = xd.size() - 2;
  std::vector<int64_t> xsp(xd.begin() + 2, xd.end()), ksp(wd.begin() + 2, wd.end());
  const int64_t ig = xd[1] / group, og = wd[1];
  auto xs = Strides(xd), ws = Strides(wd), ys = Strides(yd);
  std::vector<double> acc(y.numel(), 0.0);
  for (int64_t n = 0; n < xd[0]; ++n)
    for (int64_t ci = 0; ci < xd[1]; ++ci)
      for (int64_t o = 0; o < og; ++o) {
        const int64_t m = (ci / ig) * og + o;
        std::vector<int64_t> i(nsp, 0);
        do {
          std::vector<int64_t> k(nsp, 0);
          do {
            int64_t yo = n * ys[0] + m * ys[1], xo = n * xs[0] + ci * xs[1],
                    wo = ci * ws[0] + o * ws[1];
            bool inside = true;
            for (size_t d = 0; d < nsp; ++d) {
              int64_t p = i[d] * win.strides[d] - win.pads_begin[d] + k[d] * win.dilations[d];
              inside &= p >= 0 && p < yd[2 + d];
              yo += p * ys[2 + d];
              xo += i[d] * xs[2 + d];
              wo += k[d] * ws[2 + d];
            }
            if (inside) acc[yo] += double(x.data_as<float>()[xo]) * w.data_as<float>()[wo];
          } while (Next(k, ksp));
        } while (Next(i, xsp));
      }
  const int64_t plane = y.numel() / (yd[0] * yd[1]);
  for (int64_t j = 0; j < y.numel(); ++j) {
    double b = in.size() > 2 && in[2].defined() ? in[2].data_as<float>()[(j / plane) % yd[1]] : 0;
    y.data_as<float>()[j] = static_cast<float>(acc[j] + b);
  }
}

struct ConvCase {
  std::vector<int64_t> x, w;
  bool bias = true;
  int64_t group = 1;
  std::vector<Attribute> attrs;
  Window win;  // the resolved geometry the reference uses
  std::vector<int64_t> y;
};

void RunConv(const ConvCase& c, bool transposed) {
  std::vector<Tensor> in = {Random(c.x, 11), Random(c.w, 12)};
  const int64_t m = transposed ? c.w[1] * c.group : c.w[0];
  if (c.bias) in.push_back(Random({m}, 13));
  std::vector<Attribute> attrs = c.attrs;
  attrs.push_back(Attribute::Int("group", c.group));
  for (DType dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    Check(transposed ? "ConvTranspose" : "Conv", in, attrs, dt, c.y,
          [&](const std::vector<Tensor>& r, Tensor& y) {
            transposed ? RefConvTranspose(r, c.win, c.group, y) : RefConv(r, c.win, c.group, y);
          });
  }
}

TEST(DnnlConv, Plain2D) {
  RunConv({{2, 3, 7, 6}, {4, 3, 3, 3}, true, 1, {}, {{1, 1}, {1, 1}, {0, 0}}, {2, 4, 5, 4}}, false);
}

TEST(DnnlConv, StridesPadsDilationsNoBias) {
  RunConv({{1, 2, 9, 8}, {3, 2, 3, 2}, false, 1,
           {Attribute::Ints("strides", {2, 3}), Attribute::Ints("pads", {1, 0, 2, 1}),
            Attribute::Ints("dilations", {2, 1})},
           {{2, 3}, {2, 1}, {1, 0}}, {1, 3, 4, 3}},  // (9+3-5)/2+1, (8+1-2)/3+1
          false);
}

TEST(DnnlConv, Groups) {
  RunConv({{2, 4, 6, 6}, {6, 2, 3, 3}, true, 2, {Attribute::Ints("pads", {1, 1, 1, 1})},
           {{1, 1}, {1, 1}, {1, 1}}, {2, 6, 6, 6}},
          false);
}

TEST(DnnlConv, Depthwise) {
  RunConv({{1, 5, 8, 7}, {5, 1, 3, 3}, true, 5,
           {Attribute::Ints("strides", {2, 2}), Attribute::Ints("pads", {1, 1, 1, 1})},
           {{2, 2}, {1, 1}, {1, 1}}, {1, 5, 4, 4}},
          false);
}

TEST(DnnlConv, AutoPadSameUpper) {
  // in 7, stride 2: out 4, total pad (4-1)*2+3-7 = 2 -> 1/1; in 6: out 3, total 1 -> 0/1.
  RunConv({{1, 2, 7, 6}, {3, 2, 3, 3}, true, 1,
           {Attribute::String("auto_pad", "SAME_UPPER"), Attribute::Ints("strides", {2, 2})},
           {{2, 2}, {1, 1}, {1, 0}}, {1, 3, 4, 3}},
          false);
}

TEST(DnnlConv, AutoPadSameLower) {
  RunConv({{1, 2, 7, 6}, {3, 2, 3, 3}, true, 1,
           {Attribute::String("auto_pad", "SAME_LOWER"), Attribute::Ints("strides", {2, 2})},
           {{2, 2}, {1, 1}, {1, 1}}, {1, 3, 4, 3}},
          false);
}

TEST(DnnlConv, AutoPadValid) {
  RunConv({{1, 2, 7, 6}, {3, 2, 3, 3}, true, 1,
           {Attribute::String("auto_pad", "VALID"), Attribute::Ints("strides", {2, 1})},
           {{2, 1}, {1, 1}, {0, 0}}, {1, 3, 3, 4}},
          false);
}

TEST(DnnlConv, OneDimensional) {
  RunConv({{2, 3, 10}, {4, 3, 3}, true, 1,
           {Attribute::Ints("strides", {2}), Attribute::Ints("pads", {2, 1}),
            Attribute::Ints("dilations", {2})},
           {{2}, {2}, {2}}, {2, 4, 5}},  // (10+3-5)/2+1
          false);
}

TEST(DnnlConv, ThreeDimensional) {
  RunConv({{1, 2, 5, 4, 4}, {3, 2, 3, 2, 2}, true, 1, {Attribute::Ints("pads", {1, 0, 1, 1, 0, 0})},
           {{1, 1, 1}, {1, 1, 1}, {1, 0, 1}}, {1, 3, 5, 3, 4}},
          false);
}

TEST(DnnlConvTranspose, Plain2D) {
  RunConv({{2, 3, 4, 5}, {3, 2, 3, 3}, true, 1, {}, {{1, 1}, {1, 1}, {0, 0}}, {2, 2, 6, 7}}, true);
}

TEST(DnnlConvTranspose, StridesPadsDilations) {
  // out = s*(in-1) + (k-1)*d + 1 - pads: 2*3+5-1-1 = 9, 3*4+3-0-2 = 13.
  RunConv({{1, 2, 4, 5}, {2, 3, 3, 3}, false, 1,
           {Attribute::Ints("strides", {2, 3}), Attribute::Ints("pads", {1, 0, 1, 2}),
            Attribute::Ints("dilations", {2, 1})},
           {{2, 3}, {2, 1}, {1, 0}}, {1, 3, 9, 13}},
          true);
}

TEST(DnnlConvTranspose, GroupsAndOutputPadding) {
  // out = 2*(3-1) + 3 + 1 = 8 per dim; the last row/column is reached by no input.
  RunConv({{1, 4, 3, 3}, {4, 3, 3, 3}, true, 2,
           {Attribute::Ints("strides", {2, 2}), Attribute::Ints("output_padding", {1, 1})},
           {{2, 2}, {1, 1}, {0, 0}}, {1, 6, 8, 8}},
          true);
}

TEST(DnnlConvTranspose, OutputPaddingWithPads) {
  RunConv({{1, 2, 3, 3}, {2, 2, 3, 3}, true, 1,
           {Attribute::Ints("strides", {2, 2}), Attribute::Ints("pads", {1, 1, 1, 1}),
            Attribute::Ints("output_padding", {1, 1})},
           {{2, 2}, {1, 1}, {1, 1}}, {1, 2, 6, 6}},
          true);
}

TEST(DnnlConvTranspose, Depthwise) {
  RunConv({{1, 3, 4, 4}, {3, 1, 2, 2}, true, 3, {Attribute::Ints("strides", {2, 2})},
           {{2, 2}, {1, 1}, {0, 0}}, {1, 3, 8, 8}},
          true);
}

TEST(DnnlConvTranspose, OutputShape) {
  // full = 3*(3-1) + 3 = 9 per dim; output_shape 10x8: total pads -1 / 1, split end-heavy.
  RunConv({{1, 1, 3, 3}, {1, 2, 3, 3}, true, 1,
           {Attribute::Ints("strides", {3, 3}), Attribute::Ints("output_shape", {10, 8})},
           {{3, 3}, {1, 1}, {0, 1}}, {1, 2, 10, 8}},
          true);
}

TEST(DnnlConvTranspose, AutoPadSameUpper) {
  // out = in*s = 6; full = 2*2+3 = 7, total 1: SAME_UPPER puts it at the end (begin 0).
  RunConv({{1, 2, 3, 3}, {2, 2, 3, 3}, true, 1,
           {Attribute::String("auto_pad", "SAME_UPPER"), Attribute::Ints("strides", {2, 2})},
           {{2, 2}, {1, 1}, {0, 0}}, {1, 2, 6, 6}},
          true);
}

TEST(DnnlConvTranspose, OneDimensional) {
  RunConv({{2, 3, 5}, {3, 2, 4}, true, 1,
           {Attribute::Ints("strides", {3}), Attribute::Ints("pads", {1, 2})},
           {{3}, {1}, {1}}, {2, 2, 13}},  // 3*4+4-3
          true);
}

TEST(DnnlConv, ChannelMismatchNamesNode) {
  Tensor x = Random({1, 3, 5, 5}, 1), w = Random({2, 2, 3, 3}, 2);
  auto one = MakeNode("Conv", {x, w}, 1);
  auto out = RunCpuKernel(*one.node, {x, w});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'node'"), absl::string_view::npos) << out.status();
}

}  // namespace
}  // namespace mixtrain::dnnl_testing
