// The plain driver of a fuzz target (no libFuzzer): runs LLVMFuzzerTestOneInput on every file
// named, or under a folder named (recursively, sorted, hidden files skipped), and prints each name
// first so a crash names its input. The `fuzz_replay_<target>` tests run it on the seed corpus and
// tests/data/crashers/<target>/ in every build, so a crash once found stays fixed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else if (fs::is_directory(p, ec)) {
      for (const fs::directory_entry& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') inputs.push_back(e.path());
    } else {
      std::fprintf(stderr, "replay: '%s' is neither a file nor a folder\n", argv[i]);
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& p : inputs) {
    std::fprintf(stderr, "replay: %s\n", p.c_str());
    std::ifstream f(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) {
      std::fprintf(stderr, "replay: cannot read '%s'\n", p.c_str());
      return 2;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  // A corpus that is gone or empty would make the replay pass without running anything.
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs under the paths given\n");
    return 1;
  }
  std::fprintf(stderr, "replay: %zu inputs, no crash\n", inputs.size());
  return 0;
}
