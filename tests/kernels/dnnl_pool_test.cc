// The MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool kernels against naive reference
// loops: strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, Indices, 1-D and 2-D,
// in fp32, bf16 and fp16.
#include <limits>

#include "tests/kernels/dnnl_test_util.h"

namespace mixtrain::dnnl_testing {
namespace {

struct PoolCase {
  std::vector<int64_t> x, kernel, strides, dilations, pads_begin, pads_end;  // resolved pads
  std::vector<Attribute> attrs;
  std::vector<int64_t> y;
};

// Max over taps inside X; average over taps inside X, or (count_include_pad) inside the
// explicitly padded X: windows reaching into ceil_mode's extra end region count only up to
// the pads, as in PyTorch and ONNX Runtime.
void RefPool(const Tensor& x, const PoolCase& c, bool is_max, bool include_pad, Tensor& y) {
  const auto& xd = x.dims();
  const size_t nsp = xd.size() - 2;
  std::vector<int64_t> xsp(xd.begin() + 2, xd.end()), ysp(c.y.begin() + 2, c.y.end());
  auto xs = Strides(xd);
  int64_t yi = 0;
  for (int64_t p = 0; p < xd[0] * xd[1]; ++p) {
    std::vector<int64_t> o(nsp, 0);
    do {
      double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t count = 0;
      std::vector<int64_t> k(nsp, 0);
      do {
        bool inside = true, in_padded = true;
        int64_t off = p * xs[1];
        for (size_t d = 0; d < nsp; ++d) {
          int64_t pos = o[d] * c.strides[d] - c.pads_begin[d] + k[d] * c.dilations[d];
          inside &= pos >= 0 && pos < xsp[d];
          in_padded &= pos < xsp[d] + c.pads_end[d];
          off += pos * xs[2 + d];
        }
        if (inside) {
          double v = x.data_as<float>()[off];
          acc = is_max ? std::max(acc, v) : acc + v;
        }
        count += include_pad ? in_padded : inside;
      } while (Next(k, c.kernel));
      y.data_as<float>()[yi++] = static_cast<float>(is_max ? acc : acc / count);
    } while (Next(o, ysp));
  }
}

void RunPool(const PoolCase& c, bool is_max, bool include_pad = false) {
  std::vector<Attribute> attrs = c.attrs;
  attrs.push_back(Attribute::Ints("kernel_shape", c.kernel));
  if (include_pad) attrs.push_back(Attribute::Int("count_include_pad", 1));
  for (DType dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    Check(is_max ? "MaxPool" : "AveragePool", {Random(c.x, 21)}, attrs, dt, c.y,
          [&](const std::vector<Tensor>& r, Tensor& y) { RefPool(r[0], c, is_max, include_pad, y); });
  }
}

const PoolCase kStridedPadded = {{2, 3, 7, 8}, {3, 2}, {2, 2}, {1, 1}, {1, 0}, {1, 1},
                                 {Attribute::Ints("strides", {2, 2}),
                                  Attribute::Ints("pads", {1, 0, 1, 1})},
                                 {2, 3, 4, 4}};  // (7+2-3)/2+1, (8+1-2)/2+1

TEST(DnnlPool, MaxStridedPadded) { RunPool(kStridedPadded, true); }
// Windows that tile X (kernel == stride, no pads): the kernel's own loop instead of oneDNN;
// odd sizes leave the last row/column out; non-square windows; every dtype.
TEST(DnnlPool, MaxDisjointWindows) {
  RunPool({{2, 3, 7, 9}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {Attribute::Ints("strides", {2, 2})}, {2, 3, 3, 4}},
          true);
  RunPool({{1, 4, 6, 9}, {3, 2}, {3, 2}, {1, 1}, {0, 0}, {0, 0}, {Attribute::Ints("strides", {3, 2})}, {1, 4, 2, 4}},
          true);
}
TEST(DnnlPool, AvgExcludePad) { RunPool(kStridedPadded, false); }
TEST(DnnlPool, AvgIncludePad) { RunPool(kStridedPadded, false, true); }

TEST(DnnlPool, MaxDilated) {
  RunPool({{1, 2, 9, 9}, {2, 3}, {1, 2}, {2, 2}, {0, 1}, {0, 1},
           {Attribute::Ints("strides", {1, 2}), Attribute::Ints("dilations", {2, 2}),
            Attribute::Ints("pads", {0, 1, 0, 1})},
           {1, 2, 7, 4}},  // 9-3+1, (9+2-5)/2+1
          true);
}

// ceil_mode: (6+1-3)/2 -> ceil 2 (+1 = 3) windows, the last one reaching one past the pads.
const PoolCase kCeil = {{1, 2, 6, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 0},
                        {Attribute::Ints("strides", {2, 2}), Attribute::Ints("pads", {1, 0, 0, 0}),
                         Attribute::Int("ceil_mode", 1)},
                        {1, 2, 3, 2}};  // ceil(4/2)+1, ceil(2/2)+1

TEST(DnnlPool, MaxCeilMode) { RunPool(kCeil, true); }
TEST(DnnlPool, AvgCeilMode) { RunPool(kCeil, false); }
TEST(DnnlPool, AvgCeilModeIncludePad) { RunPool(kCeil, false, true); }

TEST(DnnlPool, MaxAutoPadSameUpper) {
  // out = ceil(7/2) = 4, total pad (4-1)*2+3-7 = 2 -> 1/1.
  RunPool({{1, 1, 7, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
           {Attribute::Ints("strides", {2, 2}), Attribute::String("auto_pad", "SAME_UPPER")},
           {1, 1, 4, 4}},
          true);
}

TEST(DnnlPool, AvgAutoPadSameLower) {
  // out = ceil(6/1) = 6, total pad 1 -> begin 1, end 0.
  RunPool({{1, 2, 6, 6}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0},
           {Attribute::String("auto_pad", "SAME_LOWER")}, {1, 2, 6, 6}},
          false);
}

TEST(DnnlPool, OneDimensional) {
  RunPool({{2, 3, 11}, {3}, {2}, {1}, {1}, {1},
           {Attribute::Ints("strides", {2}), Attribute::Ints("pads", {1, 1})}, {2, 3, 6}},
          false, true);
}

TEST(DnnlPool, MaxWithIndices) {
  Tensor x = Random({2, 2, 5, 4}, 7);
  for (int64_t order : {0, 1}) {
    auto one = MakeNode("MaxPool", {x}, 2,
                        {Attribute::Ints("kernel_shape", {2, 2}), Attribute::Ints("pads", {1, 0, 0, 0}),
                         Attribute::Ints("strides", {2, 2}), Attribute::Int("storage_order", order)});
    auto out = RunCpuKernel(*one.node, {x});
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor &y = (*out)[0], &ind = (*out)[1];
    ASSERT_EQ(y.dims(), (std::vector<int64_t>{2, 2, 3, 2}));
    ASSERT_EQ(ind.dtype(), DType::kI64);
    for (int64_t i = 0; i < y.numel(); ++i) {
      int64_t idx = ind.data_as<int64_t>()[i];
      int64_t plane = idx / 20, sp = idx % 20;
      int64_t h = order == 0 ? sp / 4 : sp % 5, w = order == 0 ? sp % 4 : sp / 5;
      ASSERT_EQ(y.data_as<float>()[i], x.data_as<float>()[plane * 20 + h * 4 + w]) << i;
      ASSERT_EQ(plane, i / 6);
      int64_t oh = (i % 6) / 2, ow = i % 2;  // the window covers rows 2*oh-1.., cols 2*ow..
      EXPECT_TRUE(h >= 2 * oh - 1 && h <= 2 * oh && w >= 2 * ow && w <= 2 * ow + 1) << i;
    }
  }
}

TEST(DnnlPool, Global) {
  Tensor x = Random({2, 3, 4, 5}, 9);
  for (DType dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    for (bool is_max : {false, true}) {
      Check(is_max ? "GlobalMaxPool" : "GlobalAveragePool", {x}, {}, dt, {2, 3, 1, 1},
            [&](const std::vector<Tensor>& r, Tensor& y) {
              for (int64_t p = 0; p < 6; ++p) {
                double acc = is_max ? -1e30 : 0.0;
                for (int64_t i = 0; i < 20; ++i) {
                  double v = r[0].data_as<float>()[p * 20 + i];
                  acc = is_max ? std::max(acc, v) : acc + v;
                }
                y.data_as<float>()[p] = static_cast<float>(is_max ? acc : acc / 20);
              }
            });
    }
  }
}

}  // namespace
}  // namespace mixtrain::dnnl_testing
