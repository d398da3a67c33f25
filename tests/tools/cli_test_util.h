// Running the built `mixtrain` binary from CLI tests: exit code, stdout and stderr apart.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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

}  // namespace mixtrain::cli_test
