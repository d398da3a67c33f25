// SummaryWriter (mixtrain/summary_writer.h): the event files TensorBoard reads. The records are
// read back here with their framing and CRCs checked by an independent bitwise CRC-32C (checked
// itself against the standard check value), and each Event parsed with the proto TensorFlow's
// field numbers define.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"
#include "proto/tensorboard.pb.h"

namespace {

namespace fs = std::filesystem;

// CRC-32C one bit at a time (reflected polynomial 0x82F63B78): slow and obviously right.
uint32_t BitwiseCrc32c(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char ch : s) {
    crc ^= ch;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t Masked(const std::string& s) {
  const uint32_t crc = BitwiseCrc32c(s);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint64_t Le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// Every event of a file; fails the test on a bad length, CRC or message.
std::vector<mixtrain::tb::Event> ReadEvents(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<mixtrain::tb::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size()) << "torn header at " << at;
    if (at + 12 > bytes.size()) break;
    const uint64_t len = Le(bytes, at, 8);
    EXPECT_EQ(Le(bytes, at + 8, 4), Masked(bytes.substr(at, 8))) << "length CRC at " << at;
    EXPECT_LE(at + 12 + len + 4, bytes.size()) << "torn record at " << at;
    if (at + 12 + len + 4 > bytes.size()) break;
    const std::string data = bytes.substr(at + 12, len);
    EXPECT_EQ(Le(bytes, at + 12 + len, 4), Masked(data)) << "data CRC at " << at;
    mixtrain::tb::Event e;
    EXPECT_TRUE(e.ParseFromString(data));
    events.push_back(e);
    at += 12 + len + 4;
  }
  return events;
}

class SummaryWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(MT_BINARY_DIR) / ("summary_writer_test_" + std::string(
        ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(SummaryWriterTest, TheBitwiseReferenceIsCrc32c) {
  EXPECT_EQ(BitwiseCrc32c("123456789"), 0xE3069283u);  // the standard check value of CRC-32C
}

TEST_F(SummaryWriterTest, WritesScalarsTensorBoardCanRead) {
  auto w = mixtrain::SummaryWriter::Create((dir_ / "run1").string());  // parents created
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string path = (*w)->path();
  EXPECT_EQ(fs::path(path).parent_path(), dir_ / "run1");
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  ASSERT_TRUE((*w)->AddScalars(10, {{"train/loss", 2.5}, {"train/lr", 1e-3}}).ok());
  ASSERT_TRUE((*w)->AddScalar("eval/top1", 20, 0.875).ok());
  // Written at once: readable before the writer is gone.
  std::vector<mixtrain::tb::Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GT(events[0].wall_time(), 1.6e9);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].step(), 10);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 2.5f);
  EXPECT_EQ(events[1].summary().value(1).simple_value(), 1e-3f);
  EXPECT_EQ(events[2].step(), 20);
  EXPECT_EQ(events[2].summary().value(0).tag(), "eval/top1");
  EXPECT_GE(events[2].wall_time(), events[1].wall_time());
}

TEST_F(SummaryWriterTest, TwoWritersNeverShareAFile) {
  auto a = mixtrain::SummaryWriter::Create(dir_.string());
  auto b = mixtrain::SummaryWriter::Create(dir_.string());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  ASSERT_TRUE((*a)->AddScalar("x", 1, 1.0).ok());
  EXPECT_EQ(ReadEvents((*a)->path()).size(), 2u);
  EXPECT_EQ(ReadEvents((*b)->path()).size(), 1u);
}

TEST_F(SummaryWriterTest, ThreadsWriteWholeRecords) {
  auto w = mixtrain::SummaryWriter::Create(dir_.string());
  ASSERT_TRUE(w.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const std::string tag = absl::StrCat("t", t);
      for (int i = 0; i < 200; ++i) ASSERT_TRUE((*w)->AddScalar(tag, i, i).ok());
    });
  for (std::thread& t : threads) t.join();
  std::vector<mixtrain::tb::Event> events = ReadEvents((*w)->path());
  ASSERT_EQ(events.size(), 801u);
  std::vector<int> per_thread(4, 0);
  for (size_t i = 1; i < events.size(); ++i) {
    const std::string& tag = events[i].summary().value(0).tag();
    const int t = tag[1] - '0';
    EXPECT_EQ(events[i].step(), per_thread[t]) << tag;  // each thread's events in its order
    EXPECT_EQ(events[i].summary().value(0).simple_value(), static_cast<float>(per_thread[t]));
    ++per_thread[t];
  }
}

TEST_F(SummaryWriterTest, RefusesBadDirectoriesAndTags) {
  fs::create_directories(dir_);
  const std::string file = (dir_ / "plain_file").string();
  std::ofstream(file) << "x";
  auto bad = mixtrain::SummaryWriter::Create(file);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("plain_file"), std::string::npos) << bad.status();
  EXPECT_FALSE(mixtrain::SummaryWriter::Create("").ok());

  auto w = mixtrain::SummaryWriter::Create((dir_ / "ok").string());
  ASSERT_TRUE(w.ok());
  absl::Status empty = (*w)->AddScalar("", 1, 1.0);
  EXPECT_FALSE(empty.ok());
  absl::Status twice = (*w)->AddScalars(1, {{"loss", 1.0}, {"loss", 2.0}});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("loss"), std::string::npos);
  EXPECT_EQ(ReadEvents((*w)->path()).size(), 1u);  // nothing written by the refused calls
}

}  // namespace
