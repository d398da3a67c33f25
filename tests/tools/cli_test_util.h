// Running the built `mixtrain` binary from CLI tests: exit code, stdout and stderr apart.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace mixtrain::cli_test {

inline const std::string kBinary = std::string(MT_BINARY_DIR) + "/mixtrain";

struct Result {
  int code = -1;  // exit status; 128 when killed by a signal
  std::string out, err;
};

// Runs a shell command line; stdout and stderr go through files in `scratch_dir`.
inline Result RunShell(const std::string& cmdline, const std::filesystem::path& scratch_dir) {
  std::string out = (scratch_dir / "stdout").string(), err = (scratch_dir / "stderr").string();
  int status = std::system((cmdline + " >" + out + " 2>" + err).c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream o(out), e(err);
  r.out.assign(std::istreambuf_iterator<char>(o), {});
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

// A fresh scratch folder for the running test: "<tmp>/<prefix>_<test>_<pid>", so the same suite
// run from two build folders at once never shares one.
inline std::filesystem::path ScratchDir(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              (prefix + "_" + info->name() + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A whole file's text ("" when it cannot be read).
inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), {}};
}

// A fixture (over ::testing::Test or ::testing::TestWithParam<P>) that needs the built binary
// and runs it in a scratch folder of its own, `dir_`, removed after the test.
template <typename Base = ::testing::Test>
class ScratchCliTest : public Base {
 protected:
  explicit ScratchCliTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = ScratchDir(prefix_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Result Run(const std::string& args) { return RunShell(kBinary + " " + args, dir_); }
  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace mixtrain::cli_test
