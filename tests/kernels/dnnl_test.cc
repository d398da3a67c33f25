// The oneDNN-backed MatMul and Gemm kernels against naive reference loops, in fp32, bf16 and
// fp16 (see dnnl_test_util.h for the tolerances).
#include "tests/kernels/dnnl_test_util.h"

namespace mixtrain::dnnl_testing {
namespace {

// ---- MatMul / Gemm ------------------------------------------------------------------------

// numpy matmul: 1-D operands promoted and squeezed, batch dims broadcast.
void RefMatMul(const Tensor& a, const Tensor& b, Tensor& y) {
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  size_t r = std::max(ad.size(), bd.size());
  ad.insert(ad.begin(), r - ad.size(), 1);
  bd.insert(bd.begin(), r - bd.size(), 1);
  int64_t m = ad[r - 2], k = ad[r - 1], n = bd[r - 1];
  std::vector<int64_t> batch(r - 2);
  for (size_t i = 0; i + 2 < r; ++i) batch[i] = std::max(ad[i], bd[i]);
  auto as = Strides(ad), bs = Strides(bd);
  std::vector<int64_t> idx(batch.size(), 0);
  int64_t bi = 0;
  do {
    int64_t ao = 0, bo = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      ao += (ad[i] == 1 ? 0 : idx[i]) * as[i];
      bo += (bd[i] == 1 ? 0 : idx[i]) * bs[i];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += double(a.data_as<float>()[ao + i * k + l]) * b.data_as<float>()[bo + l * n + j];
        y.data_as<float>()[(bi * m + i) * n + j] = static_cast<float>(s);
      }
    ++bi;
  } while (!batch.empty() && Next(idx, batch));
}

void CheckMatMul(std::vector<int64_t> ad, std::vector<int64_t> bd, std::vector<int64_t> yd) {
  for (DType dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    Check("MatMul", {Random(ad, 1), Random(bd, 2)}, {}, dt, yd,
          [](const std::vector<Tensor>& in, Tensor& y) { RefMatMul(in[0], in[1], y); });
  }
}

TEST(DnnlMatMul, Plain2D) { CheckMatMul({7, 33}, {33, 5}, {7, 5}); }
TEST(DnnlMatMul, SharedWeightsAcrossBatch) { CheckMatMul({2, 3, 4, 16}, {16, 8}, {2, 3, 4, 8}); }
TEST(DnnlMatMul, BatchedBothSides) { CheckMatMul({3, 5, 6}, {3, 6, 4}, {3, 5, 4}); }
TEST(DnnlMatMul, BroadcastBatchDims) { CheckMatMul({2, 1, 5, 6}, {1, 3, 6, 4}, {2, 3, 5, 4}); }
TEST(DnnlMatMul, BroadcastLowerRank) { CheckMatMul({5, 6}, {2, 3, 6, 4}, {2, 3, 5, 4}); }
TEST(DnnlMatMul, VectorLeft) { CheckMatMul({6}, {2, 6, 4}, {2, 4}); }
TEST(DnnlMatMul, VectorRight) { CheckMatMul({2, 5, 6}, {6}, {2, 5}); }
TEST(DnnlMatMul, VectorBoth) { CheckMatMul({6}, {6}, {}); }

TEST(DnnlMatMul, InnerDimMismatchNamesNode) {
  Tensor a = Random({2, 3}, 1), b = Random({4, 2}, 2);
  auto one = MakeNode("MatMul", {a, b}, 1);
  auto out = RunCpuKernel(*one.node, {a, b});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("node"), absl::string_view::npos) << out.status();
}

void CheckGemm(bool ta, bool tb, float alpha, float beta, std::vector<int64_t> cdims,
               int64_t m = 5, int64_t k = 7, int64_t n = 4) {
  std::vector<Tensor> in = {Random(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, 3),
                            Random(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, 4)};
  if (!cdims.empty() || beta != 0) in.push_back(Random(cdims, 5));
  std::vector<Attribute> attrs = {Attribute::Int("transA", ta), Attribute::Int("transB", tb),
                                  Attribute::Float("alpha", alpha), Attribute::Float("beta", beta)};
  for (DType dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    Check("Gemm", in, attrs, dt, {m, n}, [&](const std::vector<Tensor>& r, Tensor& y) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t l = 0; l < k; ++l)
            s += double(r[0].data_as<float>()[ta ? l * m + i : i * k + l]) *
                 r[1].data_as<float>()[tb ? j * k + l : l * n + j];
          s *= alpha;
          if (r.size() > 2) {
            std::vector<int64_t> cd = r[2].dims();
            cd.insert(cd.begin(), 2 - cd.size(), 1);
            s += beta * r[2].data_as<float>()[(cd[0] == 1 ? 0 : i) * cd[1] + (cd[1] == 1 ? 0 : j)];
          }
          y.data_as<float>()[i * n + j] = static_cast<float>(s);
        }
    });
  }
}

TEST(DnnlGemm, NoTransposeFullC) { CheckGemm(false, false, 1.0f, 1.0f, {5, 4}); }
TEST(DnnlGemm, TransposeA) { CheckGemm(true, false, 0.5f, 2.0f, {4}); }
TEST(DnnlGemm, TransposeB) { CheckGemm(false, true, 1.0f, 1.0f, {1, 4}); }
TEST(DnnlGemm, TransposeBoth) { CheckGemm(true, true, 2.0f, -1.0f, {5, 1}); }
TEST(DnnlGemm, ScalarC) { CheckGemm(false, true, 1.5f, 0.25f, {}); }
TEST(DnnlGemm, NoC) { CheckGemm(true, false, 3.0f, 0.0f, {}); }

// Products long on one side of C with that side's operand not K-contiguous: where oneDNN runs
// gemm:jit (AVX2; the capped test pass) the kernel copies that operand K-contiguous first.
TEST(DnnlGemm, TallTransposedA) { CheckGemm(true, false, 1.0f, 0.0f, {}, 160, 72, 64); }
TEST(DnnlGemm, TallTransposedAWithC) { CheckGemm(true, true, 0.5f, 1.0f, {160, 64}, 160, 72, 64); }
TEST(DnnlGemm, WideB) { CheckGemm(false, false, 1.0f, 0.0f, {}, 64, 72, 160); }
TEST(DnnlGemm, WideBTransposedAWithBias) { CheckGemm(true, false, 2.0f, 1.0f, {160}, 64, 72, 160); }
TEST(DnnlMatMul, WidePlain2D) { CheckMatMul({64, 80}, {80, 192}, {64, 192}); }

}  // namespace
}  // namespace mixtrain::dnnl_testing
