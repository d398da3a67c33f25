// WriteFileAtomically (graph/atomic_file.h), the writer of checkpoints, exports, .npz files and
// transform outputs: special files and symbolic links are refused (or a link followed on request),
// the mode is what a plain open would give, a dead writer's temp is removed by the next write to
// the same target while a live writer's is kept, and no error leaves a temp behind.
#include "graph/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mt_atomic_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  // `.<name>.tmp.<pid>.<12 alnum>`: the temp name the writer uses.
  std::string TempName(const std::string& name, pid_t pid) const {
    return "." + name + ".tmp." + std::to_string(pid) + ".AbCdEf123456";
  }
  void Touch(const std::string& name) { std::ofstream(Path(name)) << "partial"; }

  fs::path dir_;
};

// A pid no process has: a child that exited and was reaped (pids are not reused this quickly).
pid_t DeadPid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST_F(AtomicFile, WritesAndReplacesWithThePlainOpenMode) {
  mode_t old = umask(027);
  ASSERT_TRUE(WriteFileAtomically(Path("out"), "one").ok());
  EXPECT_EQ(ModeOf(Path("out")), 0640u);  // 0666 & ~umask, as open(O_CREAT, 0666)
  umask(022);
  ASSERT_TRUE(WriteFileAtomically(Path("fresh"), "x").ok());
  EXPECT_EQ(ModeOf(Path("fresh")), 0644u);
  chmod(Path("out").c_str(), 0600);
  ASSERT_TRUE(WriteFileAtomically(Path("out"), "two").ok());
  umask(old);
  EXPECT_EQ(Read(Path("out")), "two");
  EXPECT_EQ(ModeOf(Path("out")), 0600u);  // a replaced file keeps its permissions
  EXPECT_EQ(Entries(), (std::vector<std::string>{"fresh", "out"}));
}

TEST_F(AtomicFile, RefusesASymlinkLeavingLinkAndTargetUnchanged) {
  std::ofstream(Path("real")) << "old";
  fs::create_symlink("real", Path("link"));
  absl::Status s = WriteFileAtomically(Path("link"), "new");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(Path("link")), std::string::npos) << s;
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s;
  EXPECT_TRUE(fs::is_symlink(Path("link")));
  EXPECT_EQ(fs::read_symlink(Path("link")), "real");
  EXPECT_EQ(Read(Path("real")), "old");
  // A dangling link too: writing would replace the link, not create what it names.
  fs::create_symlink("nowhere", Path("dangling"));
  EXPECT_FALSE(WriteFileAtomically(Path("dangling"), "new").ok());
  EXPECT_TRUE(fs::is_symlink(Path("dangling")));
  EXPECT_EQ(Entries(), (std::vector<std::string>{"dangling", "link", "real"}));
}

TEST_F(AtomicFile, FollowSymlinksWritesThroughToTheResolvedFile) {
  fs::create_directories(dir_ / "sub");
  std::ofstream(Path("sub/real")) << "old";
  fs::create_symlink("sub/real", Path("link"));
  fs::create_symlink("link", Path("link2"));  // a chain, relative at each step
  AtomicWriteOptions follow{.follow_symlinks = true};
  ASSERT_TRUE(WriteFileAtomically(Path("link2"), "new", follow).ok());
  EXPECT_EQ(Read(Path("sub/real")), "new");
  EXPECT_TRUE(fs::is_symlink(Path("link")));
  EXPECT_TRUE(fs::is_symlink(Path("link2")));
  // A dangling link gets its target created.
  fs::create_symlink("sub/made", Path("dangling"));
  ASSERT_TRUE(WriteFileAtomically(Path("dangling"), "made", follow).ok());
  EXPECT_EQ(Read(Path("sub/made")), "made");
  EXPECT_TRUE(fs::is_symlink(Path("dangling")));
  // Following ends at what the link names: a special file there is still refused.
  fs::create_symlink(dir_ / "sub", Path("to_dir"));
  absl::Status s = WriteFileAtomically(Path("to_dir"), "x", follow);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a directory"), std::string::npos) << s;
  EXPECT_EQ(Entries(), (std::vector<std::string>{"dangling", "link", "link2", "sub", "to_dir"}));
}

TEST_F(AtomicFile, RefusesADirectoryAndAFifo) {
  fs::create_directories(dir_ / "d");
  absl::Status s = WriteFileAtomically(Path("d"), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(Path("d")), std::string::npos) << s;
  EXPECT_NE(s.message().find("a directory"), std::string::npos) << s;
  EXPECT_TRUE(fs::is_directory(Path("d")));

  ASSERT_EQ(mkfifo(Path("fifo").c_str(), 0644), 0);
  s = WriteFileAtomically(Path("fifo"), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(Path("fifo")), std::string::npos) << s;
  EXPECT_NE(s.message().find("a FIFO"), std::string::npos) << s;
  EXPECT_TRUE(fs::is_fifo(Path("fifo")));
  EXPECT_EQ(Entries(), (std::vector<std::string>{"d", "fifo"}));
}

TEST_F(AtomicFile, RefusesACharacterDevice) {
  // The type check comes before a temp file is even created, so /dev/null is never at risk.
  ASSERT_TRUE(fs::is_character_file("/dev/null"));
  absl::Status s = WriteFileAtomically("/dev/null", "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'/dev/null'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("a character device"), std::string::npos) << s;
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(AtomicFile, NextWriteRemovesTheTempsOfDeadWritersOnly) {
  pid_t dead = DeadPid();
  pid_t live = fork();  // a live process other than this one
  if (live == 0) {
    pause();
    _exit(0);
  }
  Touch(TempName("out", dead));
  Touch(TempName("out", live));
  Touch(TempName("out", getpid()));   // maybe another thread of ours, mid-write
  Touch(TempName("other", dead));     // another target's: not this write's business
  Touch(".out.tmp." + std::to_string(dead) + ".Ab1Cd2");  // mkstemp's: a dead writer's too
  Touch(".out.tmp." + std::to_string(dead) + ".short");   // not a temp name
  ASSERT_TRUE(WriteFileAtomically(Path("out"), "data").ok());
  kill(live, SIGKILL);
  waitpid(live, nullptr, 0);
  std::vector<std::string> want = {TempName("other", dead), ".out.tmp." + std::to_string(dead) + ".short",
                                   TempName("out", live), TempName("out", getpid()), "out"};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Entries(), want);
  // Now `live` is gone too: the next write removes its temp.
  ASSERT_TRUE(WriteFileAtomically(Path("out"), "data").ok());
  want.erase(std::find(want.begin(), want.end(), TempName("out", live)));
  EXPECT_EQ(Entries(), want);
  EXPECT_EQ(Read(Path("out")), "data");
}

TEST_F(AtomicFile, AFailedWriteLeavesNoTempAndTheOldFile) {
  std::ofstream(Path("out")) << "old";
  // In a child (the limit and the signal disposition are per process): a 1 KiB file-size limit
  // makes write() fail with EFBIG half way.
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{1024, 1024};
    setrlimit(RLIMIT_FSIZE, &lim);
    absl::Status s = WriteFileAtomically(Path("out"), std::string(1 << 20, 'x'));
    bool named = s.message().find(Path("out")) != std::string::npos;
    _exit(!s.ok() && named ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the write did not fail naming the file";
  EXPECT_EQ(Read(Path("out")), "old");
  EXPECT_EQ(Entries(), (std::vector<std::string>{"out"}));

  absl::Status s = WriteFileAtomically(Path("no/such/dir/out"), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(Path("no/such/dir/out")), std::string::npos) << s;
  EXPECT_FALSE(WriteFileAtomically(Path("dir/"), "x").ok());  // no file name
}

TEST_F(AtomicFile, ConcurrentWritersLeaveOneWholeFile) {
  const std::string a(1 << 20, 'a'), b(1 << 20, 'b');
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 5; ++k) EXPECT_TRUE(WriteFileAtomically(Path("out"), i % 2 ? a : b).ok());
    });
  for (std::thread& t : threads) t.join();
  std::string got = Read(Path("out"));
  EXPECT_TRUE(got == a || got == b);
  EXPECT_EQ(Entries(), (std::vector<std::string>{"out"}));
}

}  // namespace
}  // namespace mixtrain
