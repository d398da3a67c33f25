// .npy / .npz: NumPy-written fixtures (tests/data/npy/make_fixtures.py) read back exactly,
// round trips for every dtype, and corrupt input that must fail cleanly, naming the file.
#include "runtime/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>

#include "graph/half.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(MT_SOURCE_DIR) + "/tests/data/npy/" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A fresh empty folder per test.
std::string TempDir() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(testing::TempDir()) / (std::string("npy_test_") + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// The fixture of each dtype: its file, dtype, dims, and element i as the script computes it.
struct DTypeCase {
  const char* file;
  DType dtype;
  std::vector<int64_t> dims;
  std::function<double(int)> value;
};

std::vector<DTypeCase> DTypeCases() {
  return {
      {"f4", DType::kF32, {3, 4}, [](int i) { return (i - 5) * 0.25; }},
      {"f2", DType::kF16, {3, 4}, [](int i) { return (i - 5) * 0.25; }},
      {"f8", DType::kF64, {2, 6}, [](int i) { return (i - 5) / 3.0; }},
      {"i8", DType::kI64, {2, 3, 2}, [](int i) { return (i - 5) * 1e12; }},
      {"i4", DType::kI32, {12}, [](int i) { return (i - 5) * 100000.0; }},
      {"i1", DType::kI8, {4, 3}, [](int i) { return i * 20 - 100; }},
      {"u1", DType::kU8, {12}, [](int i) { return i * 20; }},
      {"b1", DType::kBool, {3, 4}, [](int i) { return i % 3 == 0 ? 1 : 0; }},
      {"bf16", DType::kBF16, {3, 4}, [](int i) { return (i - 5) * 0.25; }},
  };
}

void ExpectMatchesCase(const Tensor& t, const DTypeCase& c, const std::string& where) {
  ASSERT_EQ(t.dtype(), c.dtype) << where;
  ASSERT_EQ(t.dims(), c.dims) << where;
  for (int i = 0; i < t.numel(); ++i) EXPECT_EQ(t.GetDouble(i), c.value(i)) << where << " at " << i;
}

TEST(NpyTest, ReadsEveryDTypeNumPyWrote) {
  for (const DTypeCase& c : DTypeCases()) {
    auto t = ReadNpy(Fixture(std::string(c.file) + ".npy"));
    ASSERT_TRUE(t.ok()) << t.status();
    ExpectMatchesCase(*t, c, c.file);
  }
}

TEST(NpyTest, WritesTheBytesNumPyWrites) {
  // np.save writes version 1.0 headers padded to 64 bytes; ours must be byte-identical.
  for (const DTypeCase& c : DTypeCases()) {
    const std::string path = Fixture(std::string(c.file) + ".npy");
    auto t = ReadNpy(path);
    ASSERT_TRUE(t.ok()) << t.status();
    auto bytes = SerializeNpy(*t);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, ReadBytes(path)) << c.file;
  }
}

TEST(NpyTest, HeaderVersionsScalarsAndEmptyArrays) {
  for (const char* name : {"v2_f4.npy", "v3_f4.npy"}) {
    auto t = ReadNpy(Fixture(name));
    ASSERT_TRUE(t.ok()) << t.status();
    ExpectMatchesCase(*t, DTypeCases()[0], name);
  }
  auto scalar = ReadNpy(Fixture("scalar_f4.npy"));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->rank(), 0);
  EXPECT_EQ(scalar->GetDouble(0), 3.5);
  auto empty = ReadNpy(Fixture("empty_f4.npy"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->dims(), (std::vector<int64_t>{0, 3}));
}

TEST(NpyTest, RoundTripsEveryDTypeAndShape) {
  const std::string dir = TempDir();
  std::mt19937 rng(7);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64, DType::kI32,
                   DType::kI8, DType::kU8, DType::kBool}) {
    for (const std::vector<int64_t>& dims :
         {std::vector<int64_t>{}, {0}, {5}, {2, 3, 4}, {1, 1, 1, 1, 7}}) {
      Tensor t(dt, dims);
      auto* bytes = static_cast<uint8_t*>(t.data());
      for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = dt == DType::kBool ? rng() % 2 : rng();
      const std::string path = dir + "/t.npy";
      ASSERT_TRUE(WriteNpy(path, t).ok());
      auto back = ReadNpy(path);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_TRUE(back->Identical(t)) << DTypeName(dt) << " rank " << dims.size();
    }
  }
  // Rank beyond NumPy's 64 cannot be written.
  EXPECT_FALSE(SerializeNpy(Tensor(DType::kF32, std::vector<int64_t>(65, 1))).ok());
}

TEST(NpyTest, ReadsNumPyArchivesStoredAndDeflated) {
  auto stored = ReadNpz(Fixture("stored.npz"));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->size(), 4u);
  auto deflated = ReadNpz(Fixture("deflated.npz"));
  ASSERT_TRUE(deflated.ok()) << deflated.status();
  ASSERT_EQ(deflated->size(), DTypeCases().size());
  for (const DTypeCase& c : DTypeCases()) {
    ASSERT_TRUE(deflated->count(c.file)) << c.file;
    ExpectMatchesCase(deflated->at(c.file), c, std::string("deflated.npz:") + c.file);
    if (stored->count(c.file)) {
      EXPECT_TRUE(stored->at(c.file).Identical(deflated->at(c.file)));
    }
  }
}

TEST(NpyTest, NpzRoundTripsStoredAndCompressed) {
  const std::string dir = TempDir();
  auto all = ReadNpz(Fixture("deflated.npz"));
  ASSERT_TRUE(all.ok()) << all.status();
  (*all)["big"] = Tensor(DType::kF32, {300, 300});  // compressible zeros, > one read chunk
  for (bool compress : {false, true}) {
    const std::string path = dir + (compress ? "/c.npz" : "/s.npz");
    ASSERT_TRUE(WriteNpz(path, *all, compress).ok());
    auto back = ReadNpz(path);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->size(), all->size());
    for (const auto& [key, t] : *all) EXPECT_TRUE(back->at(key).Identical(t)) << key;
    // Writing over an existing archive replaces it.
    ASSERT_TRUE(WriteNpz(path, {{"only", Tensor::Scalar(1.0f)}}, compress).ok());
    EXPECT_EQ(ReadNpz(path)->size(), 1u);
  }
  EXPECT_LT(fs::file_size(dir + "/c.npz"), fs::file_size(dir + "/s.npz"));
  ASSERT_TRUE(WriteNpz(dir + "/empty.npz", {}).ok());
  auto empty = ReadNpz(dir + "/empty.npz");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
  // No temporary files are left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 3);
}

// The error must name the file and say what is wrong.
void ExpectError(const absl::Status& s, const std::string& file, const std::string& what) {
  ASSERT_FALSE(s.ok()) << file;
  const std::string msg(s.message());
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(NpyTest, RefusesWhatItCannotRepresent) {
  ExpectError(ReadNpy(Fixture("fortran_f4.npy")).status(), "fortran_f4.npy", "fortran_order");
  ExpectError(ReadNpy(Fixture("bigendian_f4.npy")).status(), "bigendian_f4.npy", "big-endian");
  ExpectError(ReadNpy(Fixture("u2.npy")).status(), "u2.npy", "unsupported dtype '<u2'");
  ExpectError(ReadNpy(Fixture("structured.npy")).status(), "structured.npy", "structured");
  ExpectError(ReadNpy(Fixture("no_such_file.npy")).status(), "no_such_file.npy", "cannot open");
  const std::string dir = TempDir();
  ExpectError(WriteNpy(dir + "/s.npy", Tensor(DType::kString, {1})), "s.npy", "string");
  ExpectError(WriteNpy(dir + "/missing_dir/x.npy", Tensor::Scalar(1)), "x.npy", "cannot");
  EXPECT_FALSE(fs::exists(dir + "/s.npy"));
}

TEST(NpyTest, CorruptNpyFailsCleanly) {
  const std::string good = ReadBytes(Fixture("f4.npy"));
  struct Case {
    std::string bytes, what;
  };
  std::string bad_version = good, bad_header = good, bad_shape = good, bad_bool =
                                                                          ReadBytes(Fixture("b1.npy"));
  bad_version[6] = 9;
  bad_header[12] = '[';  // {'descr': ... becomes {'[escr': ...
  bad_shape.replace(bad_shape.find("(3, 4)"), 6, "(3, x)");
  bad_bool[bad_bool.size() - 1] = 2;
  const std::vector<Case> cases = {
      {"", "bad magic"},
      {"hello world, not numpy", "bad magic"},
      {good.substr(0, 9), "bad magic"},
      {good.substr(0, 40), "truncated .npy header"},
      {good.substr(0, good.size() - 1), "truncated"},
      {good + "x", "the file has 49"},
      {bad_version, "unsupported .npy version 9"},
      {bad_header, "bad .npy header"},
      {bad_shape, "non-integer"},
      {bad_bool, "not 0/1"},
  };
  const std::string dir = TempDir();
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir + "/case" + std::to_string(i) + ".npy";
    WriteBytes(path, cases[i].bytes);
    ExpectError(ReadNpy(path).status(), path, cases[i].what);
  }
  // A shape far larger than the data must not allocate or overflow.
  std::string huge = good;
  huge.replace(huge.find("(3, 4)"), 6, "(999999, 999999, 999)");
  ExpectError(ParseNpy(huge, "huge").status(), "huge", "needs more than");
  std::string too_big = good;
  too_big.replace(too_big.find("(3, 4)"), 6, "(99999999999, 99999999999, 99999999999)");
  ExpectError(ParseNpy(too_big, "too_big").status(), "too_big", "is too big");
  // An empty array whose other dimensions multiply past int64 is refused as numpy refuses it
  // ("array is too big"), not left to overflow the element count (the npz fuzzer found this).
  std::string empty_huge = good;
  empty_huge.replace(empty_huge.find("(3, 4)"), 6, "(0, 9999999999999, 9999999999999)");
  ExpectError(ParseNpy(empty_huge, "empty_huge").status(), "empty_huge", "is too big");
}

TEST(NpyTest, CorruptNpzFailsCleanly) {
  const std::string dir = TempDir();
  const std::string stored = ReadBytes(Fixture("stored.npz"));
  const std::string deflated = ReadBytes(Fixture("deflated.npz"));
  // Just before the second entry's local header: the tail of the first entry's deflate stream.
  std::string flipped = deflated;
  const size_t second = deflated.find("PK\x03\x04", 4);
  ASSERT_NE(second, std::string::npos);
  flipped[second - 10] ^= 0x5a;
  std::string stored_flipped = stored;
  stored_flipped[stored.find("NUMPY") + 100] ^= 0x01;  // array data: only the CRC notices
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty file"},
      {"PK\x03\x04 garbage that is not a zip", "not a readable .npz"},
      {stored.substr(0, stored.size() / 2), "not a readable .npz"},
      {flipped, "corrupt entry"},
      {stored_flipped, "corrupt entry"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir + "/case" + std::to_string(i) + ".npz";
    WriteBytes(path, cases[i].first);
    ExpectError(ReadNpz(path).status(), path, cases[i].second);
  }
  ExpectError(ReadNpz(dir + "/none.npz").status(), "none.npz", "cannot open");
  // An .npy inside the archive that is itself broken is named by archive and key.
  ASSERT_TRUE(WriteNpz(dir + "/ok.npz", {{"x", Tensor::Scalar(2)}}).ok());
  std::string raw = ReadBytes(dir + "/ok.npz");
  raw[raw.find("NUMPY") + 2] = 'X';  // breaks the magic; the CRC check runs first
  WriteBytes(dir + "/bad_entry.npz", raw);
  ExpectError(ReadNpz(dir + "/bad_entry.npz").status(), "bad_entry.npz", "corrupt entry");
}

// A FIFO would block an ordinary open until a writer came; a directory or device is no input.
TEST(NpyTest, ReadsOnlyRegularFilesAndNeverBlocks) {
  const std::string dir = TempDir();
  const std::string fifo = dir + "/fifo.npz";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  ExpectError(ReadNpz(fifo).status(), fifo, "is a FIFO, not a regular file");
  ExpectError(ReadNpy(fifo).status(), fifo, "is a FIFO, not a regular file");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ExpectError(ReadNpz(dir).status(), dir, "is a directory, not a regular file");
  ExpectError(ReadNpy("/dev/null").status(), "/dev/null", "is a device, not a regular file");
  auto fd = OpenRegularFile(fifo);
  EXPECT_FALSE(fd.ok());
}

TEST(NpyTest, RandomMutationsNeverCrash) {
  const std::string good = ReadBytes(Fixture("f4.npy"));
  const std::string zip = ReadBytes(Fixture("deflated.npz"));
  const std::string dir = TempDir();
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::string npy = good, npz = zip;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
      npy[rng() % npy.size()] = static_cast<char>(rng());
      npz[rng() % npz.size()] = static_cast<char>(rng());
    }
    (void)ParseNpy(npy, "mutated");  // ok or a clean error; a crash fails the test binary
    WriteBytes(dir + "/m.npz", npz);
    (void)ReadNpz(dir + "/m.npz");
  }
}

}  // namespace
}  // namespace mixtrain
