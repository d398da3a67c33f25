// OpenTrainingData (mixtrain/data.h): a folder of .npy files read through memory maps batches
// exactly like the same arrays in memory; f64 / i32 / u8 arrays are served as the model's f32 /
// i64; bad folders fail with one error naming the file. The valid folder was written by NumPy
// (tests/data/npy/make_fixtures.py); the bad ones are written here.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

namespace fs = std::filesystem;
using mixtrain::DataCheckOptions;
using mixtrain::Dataset;
using mixtrain::ElementType;
using mixtrain::HostTensor;
using mixtrain::TensorMap;

const std::string kFolder = std::string(MT_SOURCE_DIR) + "/tests/data/npy/folder";

// A model reading x: f32 [N, 2] and labels: i64 [N] over 3 classes.
DataCheckOptions Options() {
  DataCheckOptions o;
  o.inputs = {{.name = "x", .type = ElementType::kFloat32, .shape = {-1, 2}},
              {.name = "labels", .type = ElementType::kInt64, .shape = {-1}}};
  o.num_classes = 3;
  return o;
}

fs::path Scratch() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::temp_directory_path() / absl::StrCat("training_data_", info->name(), "_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A .npy file as NumPy writes it (format 1.0, header padded to 64 bytes), from raw bytes.
void WriteNpy(const fs::path& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
              size_t bytes) {
  std::string dict = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (",
                                  absl::StrJoin(shape, ", "), shape.size() == 1 ? ",), }" : "), }");
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::ofstream f(path, std::ios::binary);
  f << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(dict.size() & 0xff) << static_cast<char>(dict.size() >> 8)
    << dict;
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

template <typename T>
void WriteNpy(const fs::path& path, const std::string& descr, const std::vector<int64_t>& shape,
              const std::vector<T>& v) {
  WriteNpy(path, descr, shape, v.data(), v.size() * sizeof(T));
}

// A valid folder of n examples: x f32 [n, 2] = i + j / 10, labels i64 = i % 3.
void WriteValidFolder(const fs::path& dir, int64_t n) {
  std::vector<float> x(n * 2);
  for (int64_t i = 0; i < n * 2; ++i) x[i] = static_cast<float>(i / 2) + static_cast<float>(i % 2) / 10;
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = i % 3;
  WriteNpy(dir / "x.npy", "<f4", {n, 2}, x);
  WriteNpy(dir / "labels.npy", "<i8", {n}, y);
}

std::string ErrorOf(const fs::path& dir) {
  auto data = mixtrain::OpenTrainingData(dir.string(), Options());
  EXPECT_FALSE(data.ok()) << dir;
  return std::string(data.status().message());
}

TEST(TrainingDataTest, NumpyFolderIsConvertedToTheModelsTypes) {
  auto data = mixtrain::OpenTrainingData(kFolder, Options());
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->train.size(), 7);
  ASSERT_TRUE(data->test.has_value());
  ASSERT_EQ(data->test->size(), 4);
  // One note names every conversion (the train set's i32 labels, the test set's u8 ones).
  std::string notes = absl::StrJoin(data->notes, "\n");
  EXPECT_NE(notes.find("'x' f64 to f32"), std::string::npos) << notes;
  EXPECT_NE(notes.find("'labels' i32 to i64"), std::string::npos) << notes;
  EXPECT_NE(notes.find("'labels' u8 to i64"), std::string::npos) << notes;
  for (const Dataset* d : {&data->train, &*data->test}) {
    const std::vector<int64_t> order = d->Order(true, 5, 0);
    auto batch = d->Gather(order, 1, 4);
    ASSERT_TRUE(batch.ok()) << batch.status();
    const HostTensor& x = batch->at("x");
    const HostTensor& y = batch->at("labels");
    ASSERT_EQ(x.type(), ElementType::kFloat32);
    ASSERT_EQ(y.type(), ElementType::kInt64);
    ASSERT_EQ(x.shape(), (std::vector<int64_t>{3, 2}));
    for (int64_t b = 0; b < 3; ++b) {
      const int64_t i = order[1 + b];
      EXPECT_EQ(y.data<int64_t>()[b], i % 3);
      for (int64_t j = 0; j < 2; ++j)
        EXPECT_EQ(x.data<float>()[b * 2 + j], static_cast<float>((2.0 * i + j) / 3.0)) << i << "," << j;
    }
  }
}

TEST(TrainingDataTest, NpzInNumpysDefaultTypesIsConvertedToo) {
  const fs::path dir = Scratch();
  TensorMap arrays;
  std::vector<double> x = {0.5, 1.5, 2.5, 3.5};
  arrays.emplace("x", *HostTensor::FromVector<double>({2, 2}, x));
  arrays.emplace("labels", *HostTensor::FromVector<int32_t>({2}, {2, 1}));
  ASSERT_TRUE(mixtrain::WriteNpz((dir / "d.npz").string(), arrays).ok());
  auto data = mixtrain::OpenTrainingData((dir / "d.npz").string(), Options());
  ASSERT_TRUE(data.ok()) << data.status();
  auto batch = data->train.Gather({1, 0}, 0, 2);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->at("x").ToFloats(), (std::vector<float>{2.5f, 3.5f, 0.5f, 1.5f}));
  EXPECT_EQ(batch->at("labels").data<int64_t>()[0], 1);
  EXPECT_EQ(batch->at("labels").data<int64_t>()[1], 2);
  fs::remove_all(dir);
}

// The read-ahead guesses the next range; whatever the caller asks for, it gets exactly what the
// in-memory data set returns, and the shuffled order is the in-memory one (resume stays exact).
TEST(TrainingDataTest, FolderBatchesEqualInMemoryBatchesInAnyRequestPattern) {
  const fs::path dir = Scratch();
  constexpr int64_t n = 103;
  WriteValidFolder(dir, n);
  auto folder = mixtrain::OpenTrainingData(dir.string(), Options());
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_FALSE(folder->test.has_value());
  std::vector<float> x(n * 2);
  for (int64_t i = 0; i < n * 2; ++i) x[i] = static_cast<float>(i / 2) + static_cast<float>(i % 2) / 10;
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = i % 3;
  auto memory = Dataset::Create({{"x", *HostTensor::FromVector<float>({n, 2}, x)},
                                 {"labels", *HostTensor::FromVector<int64_t>({n}, y)}},
                                "memory");
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_EQ(folder->train.Order(true, 11, 3), memory->Order(true, 11, 3));
  struct Range {
    int64_t begin, end;
  };
  // Sequential batches, one rank's shards of global batches (stride 16, shard 8), a jump back,
  // a repeat, a batch of another size, the last partial batch.
  const std::vector<Range> requests = {{0, 16}, {16, 32}, {32, 48}, {8, 16}, {24, 32}, {40, 48}, {0, 16},
                                       {0, 16}, {48, 53}, {53, 90}, {96, 103}, {90, 96}};
  for (int epoch = 0; epoch < 2; ++epoch) {
    const std::vector<int64_t> order = memory->Order(true, 11, epoch);
    for (const Range& r : requests) {
      auto a = folder->train.Gather(order, r.begin, r.end);
      auto b = memory->Gather(order, r.begin, r.end);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(*a, *b) << "epoch " << epoch << " [" << r.begin << ", " << r.end << ")";
    }
  }
  auto head = folder->train.Head(10).Gather(memory->Order(false, 0, 0), 0, 10);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(*head, *memory->Gather(memory->Order(false, 0, 0), 0, 10));
  EXPECT_FALSE(folder->train.Head(10).Gather(memory->Order(false, 0, 0), 5, 11).ok());  // example 10 of 10
  fs::remove_all(dir);
}

TEST(TrainingDataTest, ArraysOfDifferentLengthsNameTheFiles) {
  const fs::path dir = Scratch();
  WriteValidFolder(dir, 12);
  WriteNpy(dir / "labels.npy", "<i8", {10}, std::vector<int64_t>(10, 1));
  const std::string e = ErrorOf(dir);
  EXPECT_NE(e.find(dir.string() + ": x.npy has 12 examples, labels.npy has 10"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(TrainingDataTest, TestSubfolderOfDifferentLengthsNamesIt) {
  const fs::path dir = Scratch();
  WriteValidFolder(dir, 12);
  fs::create_directories(dir / "test");
  WriteValidFolder(dir / "test", 5);
  WriteNpy(dir / "test" / "x.npy", "<f4", {4, 2}, std::vector<float>(8, 0.f));
  const std::string e = ErrorOf(dir);
  EXPECT_NE(e.find((dir / "test").string()), std::string::npos) << e;
  EXPECT_NE(e.find("x.npy has 4 examples"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(TrainingDataTest, PickledObjectArrayNamesTheFile) {
  const fs::path dir = Scratch();
  WriteValidFolder(dir, 2);
  fs::copy_file(std::string(MT_SOURCE_DIR) + "/tests/data/npy/object.npy", dir / "x.npy",
                fs::copy_options::overwrite_existing);  // np.save(allow_pickle=True) of a ragged list
  const std::string e = ErrorOf(dir);
  EXPECT_NE(e.find((dir / "x.npy").string()), std::string::npos) << e;
  EXPECT_NE(e.find("pickled"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(TrainingDataTest, TruncatedFileNamesTheFile) {
  const fs::path dir = Scratch();
  WriteValidFolder(dir, 50);
  fs::resize_file(dir / "x.npy", fs::file_size(dir / "x.npy") - 100);
  const std::string e = ErrorOf(dir);
  EXPECT_NE(e.find((dir / "x.npy").string()), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  fs::resize_file(dir / "x.npy", 20);  // not even a whole header
  EXPECT_NE(ErrorOf(dir).find((dir / "x.npy").string()), std::string::npos);
  fs::remove_all(dir);
}

TEST(TrainingDataTest, MissingArrayNamesTheFile) {
  const fs::path dir = Scratch();
  WriteValidFolder(dir, 4);
  fs::remove(dir / "labels.npy");
  const std::string e = ErrorOf(dir);
  EXPECT_NE(e.find((dir / "labels.npy").string()), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  EXPECT_NE(e.find("x.npy"), std::string::npos) << e;  // what the folder holds
  fs::create_directories(dir / "test");
  WriteValidFolder(dir, 4);
  WriteValidFolder(dir / "test", 4);
  fs::remove(dir / "test" / "x.npy");
  EXPECT_NE(ErrorOf(dir).find((dir / "test" / "x.npy").string()), std::string::npos);
  fs::remove_all(dir);
}

// The values are checked a chunk at a time: a NaN and a bad label far into a file larger than
// one chunk (16 MiB) are reported at their own index, not the chunk's.
TEST(TrainingDataTest, ValuesAreCheckedAcrossChunksAtTheirIndex) {
  const fs::path dir = Scratch();
  constexpr int64_t n = 70000, w = 64;  // 17.9 MB of f32
  std::vector<float> x(n * w, 0.5f);
  x[69001 * w + 5] = NAN;
  std::vector<int64_t> y(n, 1);
  WriteNpy(dir / "x.npy", "<f4", {n, w}, x);
  WriteNpy(dir / "labels.npy", "<i8", {n}, y);
  DataCheckOptions o = Options();
  o.inputs[0].shape = {-1, w};
  auto data = mixtrain::OpenTrainingData(dir.string(), o);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("array 'x' holds NaN at [69001, 5]"), std::string::npos) << data.status();
  x[69001 * w + 5] = 0.f;
  y[68000] = 3;
  WriteNpy(dir / "x.npy", "<f4", {n, w}, x);
  std::vector<uint8_t> y8(y.begin(), y.end());
  WriteNpy(dir / "labels.npy", "|u1", {n}, y8);  // converted to i64, then checked
  data = mixtrain::OpenTrainingData(dir.string(), o);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("holds label 3 at [68000]"), std::string::npos) << data.status();
  fs::remove_all(dir);
}

}  // namespace
