// IDX reader: the real Fashion-MNIST test set (Debian's dataset-fashion-mnist), generated files of
// other element types, and broken files (truncated, bad magic, dims not matching the data).
#include "runtime/idx.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

const std::string kDir = kFashionMnistDir;

std::string TempDir() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(testing::TempDir()) / (std::string("idx_test_") + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// An IDX header: zero, zero, type, rank, big-endian dims.
std::string IdxHeader(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0}) h.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  return h;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()), int(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void WritePlain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string ReadPlain(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(IdxTest, ReadsFashionMnistTestSet) {
  auto images = ReadIdxImages(kDir + "/t10k-images-idx3-ubyte.gz");
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->dtype(), DType::kU8);
  EXPECT_EQ(images->dims(), (std::vector<int64_t>{10000, 28, 28}));
  // Real images: the pixels span the full byte range and most are background.
  int64_t zeros = 0, max_pixel = 0;
  for (int64_t i = 0; i < images->numel(); ++i) {
    zeros += images->data_as<uint8_t>()[i] == 0;
    max_pixel = std::max<int64_t>(max_pixel, images->data_as<uint8_t>()[i]);
  }
  EXPECT_EQ(max_pixel, 255);
  EXPECT_GT(zeros, images->numel() / 3);
  EXPECT_LT(zeros, images->numel());

  auto labels = ReadIdxLabels(kDir + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(labels.ok()) << labels.status();
  ASSERT_EQ(labels->dims(), (std::vector<int64_t>{10000}));
  std::vector<int> histogram(256, 0);
  for (int64_t i = 0; i < labels->numel(); ++i) ++histogram[labels->data_as<uint8_t>()[i]];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 1000) << "class " << c;
}

TEST(IdxTest, ConvertsForTraining) {
  auto images = ReadIdxImages(kDir + "/t10k-images-idx3-ubyte.gz");
  auto labels = ReadIdxLabels(kDir + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(images.ok() && labels.ok());
  Tensor x = ImagesToFloat(*images);
  Tensor y = LabelsToInt64(*labels);
  EXPECT_EQ(x.dtype(), DType::kF32);
  EXPECT_EQ(x.dims(), (std::vector<int64_t>{10000, 1, 28, 28}));
  for (int64_t i : {int64_t{0}, int64_t{12345}, x.numel() - 1}) {
    EXPECT_FLOAT_EQ(x.data_as<float>()[i], images->data_as<uint8_t>()[i] / 255.0f);
  }
  EXPECT_EQ(y.dtype(), DType::kI64);
  EXPECT_EQ(y.data_as<int64_t>()[17], labels->data_as<uint8_t>()[17]);
}

TEST(IdxTest, LoadFashionMnistChecksTheSet) {
  // A copy of the set whose training labels are one short must be refused, naming the file.
  const std::string dir = TempDir();
  for (const char* f : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
                        "train-images-idx3-ubyte.gz"}) {
    fs::copy_file(kDir + "/" + f, dir + "/" + f);
  }
  std::string labels = IdxHeader(0x08, {59999}) + std::string(59999, 3);
  WriteGz(dir + "/train-labels-idx1-ubyte.gz", labels);
  auto ds = LoadFashionMnist(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("train-labels-idx1-ubyte.gz"), std::string::npos)
      << ds.status();
  EXPECT_NE(ds.status().message().find("59999 labels for 60000 images"), std::string::npos)
      << ds.status();

  labels = IdxHeader(0x08, {60000}) + std::string(60000, 10);
  WriteGz(dir + "/train-labels-idx1-ubyte.gz", labels);
  ds = LoadFashionMnist(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("label 10 at index 0"), std::string::npos) << ds.status();

  EXPECT_FALSE(LoadFashionMnist(dir + "/nowhere").ok());
}

TEST(IdxTest, ReadsOtherElementTypesPlainAndGzipped) {
  const std::string dir = TempDir();
  // f32 2x3 holding -1.5 + i, big-endian on disk.
  std::string data = IdxHeader(0x0D, {2, 3});
  for (int i = 0; i < 6; ++i) {
    float v = -1.5f + i;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int shift : {24, 16, 8, 0}) data.push_back(static_cast<char>((bits >> shift) & 0xff));
  }
  WritePlain(dir + "/f.idx", data);
  WriteGz(dir + "/f.idx.gz", data);
  for (const char* name : {"/f.idx", "/f.idx.gz"}) {
    auto t = ReadIdx(dir + name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->dtype(), DType::kF32);
    EXPECT_EQ(t->dims(), (std::vector<int64_t>{2, 3}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(t->data_as<float>()[i], -1.5f + i);
  }
  // Not images: rank 2 is refused by ReadIdxImages, with the reason.
  auto as_images = ReadIdxImages(dir + "/f.idx");
  ASSERT_FALSE(as_images.ok());
  EXPECT_NE(as_images.status().message().find("rank 3"), std::string::npos);
}

TEST(IdxTest, BrokenFilesFailCleanlyNamingTheFile) {
  const std::string dir = TempDir();
  const std::string good = IdxHeader(0x08, {3, 2, 2}) + std::string(12, 7);
  const std::string real_gz = ReadPlain(kDir + "/t10k-labels-idx1-ubyte.gz");
  std::string flipped_gz = real_gz;
  flipped_gz[real_gz.size() / 2] ^= 0x10;  // the deflate stream or the CRC catches it
  struct Case {
    std::string name, bytes, what;
    bool gzip;
  };
  const std::vector<Case> cases = {
      {"empty", "", "truncated", true},
      {"bad_magic", "\x08\x03" + good.substr(2), "bad magic", true},
      {"bad_type", IdxHeader(0x0B, {3}) + std::string(6, 0), "unsupported IDX element type 0xb",
       true},
      {"short_header", good.substr(0, 9), "truncated", true},
      {"short_data", good.substr(0, good.size() - 1), "truncated", true},
      {"long_data", good + "x", "longer than dims 3x2x2", true},
      {"huge_dims", IdxHeader(0x08, {0xffffffff, 0xffffffff, 16}), "implausibly large", true},
      {"cut_gzip", real_gz.substr(0, real_gz.size() / 2), "truncated", false},
      {"flipped_gzip", flipped_gz, "corrupt file", false},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/" + c.name + ".gz";
    if (c.gzip) {
      WriteGz(path, c.bytes);
    } else {
      WritePlain(path, c.bytes);
    }
    auto t = ReadIdx(path);
    ASSERT_FALSE(t.ok()) << c.name;
    const std::string msg(t.status().message());
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.what), std::string::npos) << msg;
  }
  // A FIFO is refused at once (an ordinary open would wait for a writer), a directory too.
  const std::string fifo = dir + "/fifo.gz";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, dir}) {
    auto t = ReadIdx(path);
    ASSERT_FALSE(t.ok()) << path;
    EXPECT_NE(t.status().message().find(path + ": is a"), std::string::npos) << t.status();
    EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos) << t.status();
  }
  auto missing = ReadIdx(dir + "/missing.gz");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.gz"), std::string::npos);
}

}  // namespace
}  // namespace mixtrain
