// The public data API (mixtrain/data.h): .npz round trips, Dataset batching and its checks,
// HostTensor reshapes and element-type names.
#include <cstdio>
#include <algorithm>
#include <numeric>
#include <string>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::Dataset;
using mixtrain::ElementType;
using mixtrain::HostTensor;
using mixtrain::TensorMap;

TensorMap Arrays(int64_t n) {
  std::vector<float> x(n * 3);
  std::iota(x.begin(), x.end(), 0.0f);
  std::vector<int64_t> y(n);
  std::iota(y.begin(), y.end(), 100);
  return {{"x", *HostTensor::FromVector<float>({n, 3}, x)}, {"y", *HostTensor::FromVector<int64_t>({n}, y)}};
}

TEST(DataApiTest, NpzRoundTrip) {
  const std::string path = std::string(MT_BINARY_DIR) + "/data_api_test.npz";
  TensorMap a = Arrays(5);
  for (bool compress : {false, true}) {
    ASSERT_TRUE(mixtrain::WriteNpz(path, a, compress).ok());
    auto back = mixtrain::ReadNpz(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, a);
  }
  std::remove(path.c_str());
  auto missing = mixtrain::ReadNpz("/no/such/file.npz");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/no/such/file.npz"), absl::string_view::npos);
}

TEST(DataApiTest, DatasetBatchesInASeededOrder) {
  auto d = Dataset::Create(Arrays(10), "test arrays");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 10);
  EXPECT_EQ(d->NumBatches(4, /*drop_last=*/true), 2);
  EXPECT_EQ(d->NumBatches(4, /*drop_last=*/false), 3);
  std::vector<int64_t> order = d->Order(true, 7, 1);
  EXPECT_EQ(order, d->Order(true, 7, 1));  // depends only on (seed, epoch)
  EXPECT_NE(order, d->Order(true, 7, 2));
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, d->Order(false, 0, 0));
  auto b = d->Gather(order, 2, 5);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->at("y").shape(), std::vector<int64_t>{3});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b->at("y").data<int64_t>()[i], 100 + order[2 + i]);
  EXPECT_EQ(d->Head(4).size(), 4);
  EXPECT_EQ(d->Head(40).size(), 10);

  EXPECT_FALSE(d->Gather(order, 8, 11).ok());
  EXPECT_FALSE(d->Gather({0, 10}, 0, 2).ok());
  EXPECT_FALSE(d->Gather({-1}, 0, 1).ok());
  TensorMap ragged = Arrays(4);
  ragged["y"] = *HostTensor::Zeros(ElementType::kInt64, {3});
  auto bad = Dataset::Create(ragged, "ragged arrays");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "ragged arrays: array 'y' has 3 examples, array 'x' has 4");
  TensorMap empty = Arrays(4);
  empty["x"] = *HostTensor::Zeros(ElementType::kFloat32, {4, 0});
  bad = Dataset::Create(empty, "empty arrays");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "empty arrays: array 'x' is empty (shape [4, 0])");
  bad = Dataset::Create({}, "no arrays");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "no arrays: holds no arrays");
}

// Labels of a model that flattens its logits (N x T tokens to N*T rows): k rows per example,
// gathered with their example, checked against the inputs' example count.
TEST(DataApiTest, LabelsWithKRowsPerExample) {
  constexpr int64_t kRows = 3;
  std::vector<int64_t> y(4 * kRows);
  std::iota(y.begin(), y.end(), 0);
  TensorMap a = {{"x", *HostTensor::FromVector<float>({4, 2}, std::vector<float>(8, 1.0f))},
                 {"labels", *HostTensor::FromVector<int64_t>({4 * kRows}, y)}};
  auto d = Dataset::Create(a, "flat", {{"labels", kRows}});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 4);
  auto b = d->Gather({2, 0, 3, 1}, 0, 2);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->at("x").shape(), (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(b->at("labels").shape(), std::vector<int64_t>{2 * kRows});
  const std::vector<int64_t> want = {6, 7, 8, 0, 1, 2};  // example 2's rows, then example 0's
  EXPECT_EQ(std::vector<int64_t>(b->at("labels").data<int64_t>(), b->at("labels").data<int64_t>() + 6), want);
  EXPECT_EQ(d->Head(1).size(), 1);

  // Without the rows per example, or with the wrong k, the counts disagree; the data check says so.
  auto plain = Dataset::Create(a, "flat");
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("flat: array 'x' has 4 examples, array 'labels' has 12"),
            absl::string_view::npos) << plain.status();
  mixtrain::DataCheckOptions check;
  check.label_rows_per_example = 2;
  absl::Status st = mixtrain::CheckTrainingData(a, "flat", check);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("flat: array 'labels' has 12 rows for the 4 examples of array 'x' (2 rows per "
                              "example: 8 expected)"),
            absl::string_view::npos) << st;
  check.label_rows_per_example = kRows;
  EXPECT_TRUE(mixtrain::CheckTrainingData(a, "flat", check).ok());
}

TEST(DataApiTest, FashionMnistFromAMissingFolderIsAnError) {
  auto fm = mixtrain::LoadFashionMnist("/no/such/folder");
  EXPECT_FALSE(fm.ok());
}

TEST(DataApiTest, ReshapeAndTypeNames) {
  HostTensor t = Arrays(4).at("x");
  auto r = t.Reshaped({2, 6});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(r->ToFloats(), t.ToFloats());
  EXPECT_FALSE(t.Reshaped({5}).ok());
  EXPECT_EQ(*mixtrain::ParseElementType("fp16"), ElementType::kFloat16);
  EXPECT_EQ(*mixtrain::ParseElementType("bfloat16"), ElementType::kBFloat16);
  EXPECT_EQ(*mixtrain::ParseElementType("f32"), ElementType::kFloat32);
  EXPECT_FALSE(mixtrain::ParseElementType("complex64").ok());
  EXPECT_FALSE(mixtrain::ParseElementType("string").ok());
}

}  // namespace
