// Tests of the CPU normalization and loss kernels (kernels/cpu/norm.cc, loss.cc) against plain
// reference loops in double written here: LayerNormalization per axis with all three outputs,
// BatchNormalization inference and both training forms, SoftmaxCrossEntropyLoss and
// NegativeLogLikelihoodLoss with every reduction, weights, ignore_index and extra dims, per dtype.
#include <cmath>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/reduce_test_util.h"

namespace mixtrain {
namespace {

using red_test::ExpectNear;
using red_test::Make;
using red_test::Rounded;
using red_test::Tol;
using red_test::Uniform;
using red_test::Values;

const DType kFloats[] = {DType::kF32, DType::kF16, DType::kBF16};

TEST(LayerNormTest, AxesOutputsAndDtypes) {
  const std::vector<int64_t> dims = {2, 3, 4, 5};
  std::vector<double> x = Uniform(120, -3, 5, 1);
  for (DType t : kFloats) {
    for (int64_t axis : {1, 2, -1}) {
      for (bool with_bias : {true, false}) {
        const int64_t a = axis < 0 ? axis + 4 : axis;
        std::vector<int64_t> norm(dims.begin() + a, dims.end());
        const int64_t n = red_test::Count(norm), rows = 120 / n;
        std::vector<double> s = Uniform(n, 0.5, 1.5, 2), b = Uniform(n, -1, 1, 3);
        std::vector<double> xr = Rounded(t, x), sr = Rounded(t, s), br = Rounded(t, b);
        std::vector<double> want_y(120), want_mean(rows), want_inv(rows);
        for (int64_t r = 0; r < rows; ++r) {
          double m = 0, v = 0;
          for (int64_t i = 0; i < n; ++i) m += xr[r * n + i];
          m /= n;
          for (int64_t i = 0; i < n; ++i) v += (xr[r * n + i] - m) * (xr[r * n + i] - m);
          double inv = 1 / std::sqrt(v / n + 1e-3);
          for (int64_t i = 0; i < n; ++i)
            want_y[r * n + i] = (xr[r * n + i] - m) * inv * sr[i] + (with_bias ? br[i] : 0);
          want_mean[r] = m;
          want_inv[r] = inv;
        }
        std::vector<Tensor> in = {Make(t, dims, x), Make(t, norm, s)};
        if (with_bias) in.push_back(Make(t, norm, b));
        auto out = red_test::RunAll("LayerNormalization", in,
                                    {Attribute::Int("axis", axis), Attribute::Float("epsilon", 1e-3f)},
                                    17, 3);
        ASSERT_TRUE(out.ok()) << out.status();
        const std::string what = std::string(DTypeName(t)) + " axis " + std::to_string(axis);
        ExpectNear(Values((*out)[0]), want_y, Tol(t), Tol(t), what + " Y");
        EXPECT_EQ((*out)[0].dtype(), t);
        // Statistics are in stash_type (float) with the normalized dims kept as 1.
        EXPECT_EQ((*out)[1].dtype(), DType::kF32);
        std::vector<int64_t> stat_dims = dims;
        for (int64_t i = a; i < 4; ++i) stat_dims[i] = 1;
        EXPECT_EQ((*out)[1].dims(), stat_dims);
        ExpectNear(Values((*out)[1]), want_mean, 1e-5, 1e-6, what + " Mean");
        ExpectNear(Values((*out)[2]), want_inv, 1e-5, 1e-6, what + " InvStdDev");
      }
    }
  }
}

TEST(LayerNormTest, ScaleBroadcastsToNormalizedShape) {
  std::vector<double> x = Uniform(24, -1, 1, 4);
  Tensor y = red_test::Run("LayerNormalization",
                           {Make(DType::kF32, {2, 3, 4}, x), Make(DType::kF32, {4}, {1, 2, 3, 4})},
                           {Attribute::Int("axis", 1)});
  Tensor full = red_test::Run(
      "LayerNormalization",
      {Make(DType::kF32, {2, 3, 4}, x),
       Make(DType::kF32, {3, 4}, {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4})},
      {Attribute::Int("axis", 1)});
  EXPECT_TRUE(y.Identical(full));
  absl::Status st = red_test::RunStatus(
      "LayerNormalization", {Make(DType::kF32, {2, 3, 4}, x), Make(DType::kF32, {3}, {1, 2, 3})},
      {Attribute::Int("axis", 1)});
  EXPECT_FALSE(st.ok());
}

// Reference BatchNormalization on [N, C, S] with given per-channel mean/var.
std::vector<double> RefBn(const std::vector<double>& x, int64_t N, int64_t C, int64_t S,
                          const std::vector<double>& scale, const std::vector<double>& bias,
                          const std::vector<double>& mean, const std::vector<double>& var,
                          double eps) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        int64_t i = (n * C + c) * S + s;
        y[i] = (x[i] - mean[c]) / std::sqrt(var[c] + eps) * scale[c] + bias[c];
      }
  return y;
}

TEST(BatchNormTest, InferenceForm) {
  for (DType t : kFloats) {
    for (auto dims : {std::vector<int64_t>{2, 3, 4, 5}, std::vector<int64_t>{6, 3}}) {
      const int64_t N = dims[0], C = 3, S = red_test::Count(dims) / (N * C);
      std::vector<double> x = Uniform(red_test::Count(dims), -2, 2, 5);
      std::vector<double> sc = {0.5, 1, 2}, bi = {0, -1, 1}, mu = {0.1, -0.2, 0.3},
                          va = {1, 0.5, 2};
      // Parameters stay fp32 while X is low precision (opset 15 allows that).
      Tensor y = red_test::Run("BatchNormalization",
                               {Make(t, dims, x), Make(DType::kF32, {3}, sc),
                                Make(DType::kF32, {3}, bi), Make(DType::kF32, {3}, mu),
                                Make(DType::kF32, {3}, va)},
                               {Attribute::Float("epsilon", 1e-5f)}, 15);
      ExpectNear(Values(y), RefBn(Rounded(t, x), N, C, S, sc, bi, mu, va, 1e-5), Tol(t),
                 Tol(t) * 2, DTypeName(t));
    }
  }
}

TEST(BatchNormTest, TrainingForms) {
  const int64_t N = 3, C = 2, S = 4;
  std::vector<double> x = Uniform(N * C * S, -2, 3, 6);
  std::vector<double> sc = {1.5, 0.5}, bi = {0.2, -0.3}, mu = {0.5, -0.5}, va = {2, 0.25};
  std::vector<double> bm(C, 0), bv(C, 0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) bm[c] += Rounded(DType::kF32, {x[(n * C + c) * S + s]})[0];
    bm[c] /= N * S;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        double d = Rounded(DType::kF32, {x[(n * C + c) * S + s]})[0] - bm[c];
        bv[c] += d * d;
      }
    bv[c] /= N * S;  // biased, as ONNX's reference
  }
  const double mom = 0.8;
  std::vector<double> want_y = RefBn(Rounded(DType::kF32, x), N, C, S, sc, bi, bm, bv, 1e-5);
  std::vector<double> want_rm(C), want_rv(C);
  for (int64_t c = 0; c < C; ++c) {
    want_rm[c] = mu[c] * mom + bm[c] * (1 - mom);
    want_rv[c] = va[c] * mom + bv[c] * (1 - mom);
  }
  std::vector<Tensor> in = {Make(DType::kF32, {N, C, S}, x), Make(DType::kF32, {C}, sc),
                            Make(DType::kF32, {C}, bi), Make(DType::kF32, {C}, mu),
                            Make(DType::kF32, {C}, va)};
  // Opset 15: training_mode=1, outputs Y, running_mean, running_var.
  auto o15 = red_test::RunAll("BatchNormalization", in,
                              {Attribute::Int("training_mode", 1), Attribute::Float("momentum", mom)},
                              15, 3);
  ASSERT_TRUE(o15.ok()) << o15.status();
  ExpectNear(Values((*o15)[0]), want_y, 1e-5, 1e-5, "opset 15 Y");
  ExpectNear(Values((*o15)[1]), want_rm, 1e-5, 1e-6, "opset 15 running_mean");
  ExpectNear(Values((*o15)[2]), want_rv, 1e-5, 1e-6, "opset 15 running_var");
  // Opset 9: no training_mode; five outputs mean training, the last two the batch statistics.
  auto o9 = red_test::RunAll("BatchNormalization", in, {Attribute::Float("momentum", mom)}, 9, 5);
  ASSERT_TRUE(o9.ok()) << o9.status();
  ExpectNear(Values((*o9)[0]), want_y, 1e-5, 1e-5, "opset 9 Y");
  ExpectNear(Values((*o9)[1]), want_rm, 1e-5, 1e-6, "opset 9 mean");
  ExpectNear(Values((*o9)[2]), want_rv, 1e-5, 1e-6, "opset 9 var");
  ExpectNear(Values((*o9)[3]), bm, 1e-5, 1e-6, "opset 9 saved_mean");
  ExpectNear(Values((*o9)[4]), bv, 1e-5, 1e-6, "opset 9 saved_var");
  // Opset 15 without training_mode is inference, even though it is the same node otherwise.
  Tensor inf = red_test::Run("BatchNormalization", in, {}, 15);
  ExpectNear(Values(inf), RefBn(Rounded(DType::kF32, x), N, C, S, sc, bi, mu, va, 1e-5), 1e-5,
             1e-5, "opset 15 inference");
}

struct LossCase {
  std::vector<int64_t> dims;  // scores [N, C, d...]
  std::string reduction;
  bool weights;
  std::optional<int64_t> ignore_index;
};

// Reference loss in double; `log_prob` receives log-softmax(scores) along C when softmax is set.
std::vector<double> RefLoss(const std::vector<double>& x, const std::vector<int64_t>& dims,
                            const std::vector<int64_t>& labels, const std::vector<double>& w,
                            const LossCase& c, bool softmax, std::vector<double>* log_prob) {
  const int64_t N = dims[0], C = dims[1], D = red_test::Count(dims) / (N * C);
  std::vector<double> lp = x;
  if (softmax) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        double m = -INFINITY, s = 0;
        for (int64_t k = 0; k < C; ++k) m = std::max(m, x[(n * C + k) * D + d]);
        for (int64_t k = 0; k < C; ++k) s += std::exp(x[(n * C + k) * D + d] - m);
        for (int64_t k = 0; k < C; ++k) lp[(n * C + k) * D + d] = x[(n * C + k) * D + d] - m - std::log(s);
      }
  }
  *log_prob = lp;
  std::vector<double> loss(N * D);
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      int64_t t = labels[n * D + d];
      if (c.ignore_index && t == *c.ignore_index) continue;
      double wt = c.weights ? w[t] : 1.0;
      loss[n * D + d] = -lp[(n * C + t) * D + d] * wt;
      sum += loss[n * D + d];
      wsum += wt;
    }
  if (c.reduction == "none") return loss;
  return {c.reduction == "sum" ? sum : sum / wsum};
}

TEST(LossTest, SceAndNllAllOptions) {
  const LossCase cases[] = {
      {{4, 5}, "mean", false, std::nullopt}, {{4, 5}, "sum", true, std::nullopt},
      {{4, 5}, "none", true, 2},             {{3, 5, 6}, "mean", true, 1},
      {{3, 5, 6}, "mean", false, -1},        {{2, 4, 3, 5}, "none", false, 0},
      {{2, 4, 3, 5}, "sum", true, 3},        {{3, 5, 2}, "mean", true, -100},
      // Long class rows (a language model's vocabulary): the vectorized row path.
      {{6, 300}, "mean", true, 7},           {{5, 1000}, "none", false, std::nullopt},
  };
  for (bool softmax : {true, false}) {
    const char* op = softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss";
    for (DType t : kFloats) {
      for (DType lt : {DType::kI64, DType::kI32}) {
        int seed = 0;
        for (const LossCase& c : cases) {
          const int64_t N = c.dims[0], C = c.dims[1], D = red_test::Count(c.dims) / (N * C);
          std::vector<double> x = Uniform(red_test::Count(c.dims), -3, 3, ++seed);
          std::vector<double> w = Uniform(C, 0.2, 2, 50 + seed);
          std::vector<int64_t> labels(N * D);
          std::vector<double> labels_d(N * D);
          for (int64_t i = 0; i < N * D; ++i) {
            labels[i] = (i * 7 + seed) % C;
            // Sprinkle the (negative) ignore index where it is out of range.
            if (c.ignore_index && *c.ignore_index < 0 && i % 3 == 0) labels[i] = *c.ignore_index;
            labels_d[i] = static_cast<double>(labels[i]);
          }
          std::vector<int64_t> label_dims = c.dims;
          label_dims.erase(label_dims.begin() + 1);
          std::vector<Tensor> in = {Make(t, c.dims, x), Make(lt, label_dims, labels_d)};
          if (c.weights) in.push_back(Make(t, {C}, w));
          std::vector<Attribute> attrs = {Attribute::String("reduction", c.reduction)};
          if (c.ignore_index) attrs.push_back(Attribute::Int("ignore_index", *c.ignore_index));
          std::vector<double> want_lp;
          std::vector<double> want =
              RefLoss(Rounded(t, x), c.dims, labels, Rounded(t, w), c, softmax, &want_lp);
          auto out = red_test::RunAll(op, in, attrs, 13, softmax ? 2 : 1);
          ASSERT_TRUE(out.ok()) << out.status();
          const std::string what = std::string(op) + " " + DTypeName(t) + " case " +
                                   std::to_string(seed);
          EXPECT_EQ((*out)[0].dtype(), t);
          if (c.reduction == "none") EXPECT_EQ((*out)[0].dims(), label_dims) << what;
          else EXPECT_EQ((*out)[0].dims(), std::vector<int64_t>{}) << what;
          ExpectNear(Values((*out)[0]), want, Tol(t), Tol(t) * 2, what);
          if (softmax) ExpectNear(Values((*out)[1]), want_lp, Tol(t), Tol(t) * 4, what + " log_prob");
        }
      }
    }
  }
}

// A NaN logit anywhere in a row makes that row's loss NaN, in the row path (D = 1) and the
// strided one (D > 1); rows without one stay finite.
TEST(LossTest, NanLogitMakesItsRowsLossNan) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{3, 100}, std::vector<int64_t>{3, 100, 2}}) {
    const int64_t D = dims.size() == 3 ? dims[2] : 1;
    std::vector<double> x = Uniform(red_test::Count(dims), -3, 3, 9);
    x[(1 * 100 + 57) * D] = NAN;  // row 1, class 57 (d = 0)
    std::vector<int64_t> label_dims = dims;
    label_dims.erase(label_dims.begin() + 1);
    std::vector<double> labels(red_test::Count(label_dims), 4.0);
    auto out = red_test::RunAll("SoftmaxCrossEntropyLoss",
                                {Make(DType::kF32, dims, x), Make(DType::kI64, label_dims, labels)},
                                {Attribute::String("reduction", "none")}, 13, 1);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<double> loss = Values((*out)[0]);
    for (int64_t i = 0; i < static_cast<int64_t>(loss.size()); ++i)
      EXPECT_EQ(std::isnan(loss[i]), i == 1 * D) << "item " << i << " of " << dims.size() << "-D scores";
  }
}

TEST(LossTest, OutOfRangeLabelIsAnError) {
  Tensor x = Make(DType::kF32, {2, 3}, Uniform(6, -1, 1, 1));
  Tensor labels = Make(DType::kI64, {2}, {0, 3});
  for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    absl::Status st = red_test::RunStatus(op, {x, labels});
    EXPECT_FALSE(st.ok()) << op;
    EXPECT_NE(st.message().find("label 3"), absl::string_view::npos) << st;
  }
  // The same label is fine when it is the ignore_index.
  EXPECT_TRUE(red_test::RunStatus("NegativeLogLikelihoodLoss", {x, labels},
                                  {Attribute::Int("ignore_index", 3)})
                  .ok());
}

}  // namespace
}  // namespace mixtrain
