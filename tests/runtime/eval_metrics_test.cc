// Evaluation metrics (runtime/eval_metrics.h) against a reference written differently: each
// position's logits gathered into a vector and ranked by a stable descending sort (argmax's
// first-of-equals rule), errors summed directly.
#include "runtime/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mixtrain {
namespace {

// Rank of `label` among `v` in a stable descending sort: 0 = top-1.
int64_t Rank(const std::vector<float>& v, int64_t label) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  return std::find(idx.begin(), idx.end(), label) - idx.begin();
}

struct Case {
  std::vector<int64_t> dims;
  int64_t class_axis;
};

TEST(EvalMetricsTest, TopKOverEveryPositionOfAnyLayout) {
  std::mt19937 rng(7);
  // Integer-valued logits from a small range, so ties happen and the first-of-equals rule counts.
  std::uniform_int_distribution<int> value(-3, 3);
  for (const Case& c : {Case{{6, 12}, 1}, Case{{3, 5, 11}, -1}, Case{{2, 10, 3, 4}, 1}, Case{{4, 3, 13}, 2}}) {
    Tensor logits(DType::kF32, c.dims);
    for (int64_t i = 0; i < logits.numel(); ++i) logits.data_as<float>()[i] = static_cast<float>(value(rng));
    const int64_t rank = static_cast<int64_t>(c.dims.size());
    const int64_t axis = c.class_axis < 0 ? c.class_axis + rank : c.class_axis;
    std::vector<int64_t> label_dims;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis) label_dims.push_back(c.dims[d]);
    const int64_t classes = c.dims[axis];
    Tensor labels(DType::kI64, label_dims);
    std::uniform_int_distribution<int64_t> pick(0, classes - 1);
    for (int64_t i = 0; i < labels.numel(); ++i) labels.data_as<int64_t>()[i] = pick(rng);

    // Reference: walk the label tensor's positions, gather the logits along the class axis.
    int64_t want1 = 0, want5 = 0;
    std::vector<int64_t> stride(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * c.dims[d + 1];
    for (int64_t p = 0; p < labels.numel(); ++p) {
      // Unflatten p over label_dims, then insert the class axis.
      std::vector<int64_t> pos(label_dims.size());
      for (int64_t r = p, d = static_cast<int64_t>(label_dims.size()) - 1; d >= 0; --d) {
        pos[d] = r % label_dims[d];
        r /= label_dims[d];
      }
      int64_t base = 0;
      for (int64_t d = 0, k = 0; d < rank; ++d)
        if (d != axis) base += pos[k++] * stride[d];
      std::vector<float> row(classes);
      for (int64_t j = 0; j < classes; ++j) row[j] = logits.data_as<float>()[base + j * stride[axis]];
      const int64_t r = Rank(row, labels.data_as<int64_t>()[p]);
      want1 += r == 0;
      want5 += r < 5;
    }
    EvalCounts got;
    ASSERT_TRUE(AccumulateEvalCounts({EvalTask::kClassification, c.class_axis, {}}, logits, labels, got).ok());
    EXPECT_EQ(got.positions, labels.numel());
    EXPECT_EQ(got.correct, want1) << "rank " << rank << " axis " << axis;
    EXPECT_EQ(got.correct_top5, want5) << "rank " << rank << " axis " << axis;
    EXPECT_GT(want5, want1);  // the case distinguishes the two
  }
}

TEST(EvalMetricsTest, IgnoredLabelsAndNaNLogits) {
  // 4 positions of 3 classes: a hit, an ignored label, a NaN row, a hit; then the same in bf16.
  Tensor logits = Tensor::FromVector<float>(DType::kF32, {4, 3},
                                            {0, 5, 1, 9, 0, 0, 1, NAN, 0, 3, 2, 1});
  Tensor labels = Tensor::FromVector<int64_t>(DType::kI64, {4}, {1, -100, 0, 0});
  EvalCounts c;
  ASSERT_TRUE(AccumulateEvalCounts({EvalTask::kClassification, 1, -100}, logits, labels, c).ok());
  EXPECT_EQ(c.positions, 3);  // the ignored one is not counted
  EXPECT_EQ(c.correct, 2);    // the NaN row is a miss
  EvalCounts wide;
  ASSERT_TRUE(AccumulateEvalCounts({EvalTask::kClassification, 1, -100}, ConvertFloat(logits, DType::kBF16),
                                   labels, wide).ok());
  EXPECT_EQ(wide.correct, c.correct);
}

TEST(EvalMetricsTest, RegressionErrors) {
  Tensor y = Tensor::FromVector<float>(DType::kF32, {2, 2}, {1, 2, 3, 4});
  Tensor t = Tensor::FromVector<float>(DType::kF32, {4}, {1, 0, 4, 7});
  EvalCounts c;
  ASSERT_TRUE(AccumulateEvalCounts({EvalTask::kRegression}, y, t, c).ok());
  EXPECT_EQ(c.positions, 4);
  EXPECT_DOUBLE_EQ(c.abs_error_sum, 0 + 2 + 1 + 3);
  EXPECT_DOUBLE_EQ(c.squared_error_sum, 0 + 4 + 1 + 9);
}

TEST(EvalMetricsTest, MismatchedShapesAreErrors) {
  Tensor logits(DType::kF32, {4, 5, 6});
  EvalCounts c;
  absl::Status s = AccumulateEvalCounts({EvalTask::kClassification, -1}, logits, Tensor(DType::kI64, {4, 6}), c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("[4, 6]"), std::string::npos) << s;
  EXPECT_FALSE(AccumulateEvalCounts({EvalTask::kClassification, 3}, logits, Tensor(DType::kI64, {4, 5}), c).ok());
  EXPECT_FALSE(AccumulateEvalCounts({EvalTask::kRegression}, logits, Tensor(DType::kF32, {4}), c).ok());
  EXPECT_EQ(c.positions, 0);
}

}  // namespace
}  // namespace mixtrain
