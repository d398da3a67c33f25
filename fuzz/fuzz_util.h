// Helpers shared by the fuzz targets (fuzz/*_fuzzer.cc): scratch files for the entry points that
// read a path, and a batch of zeros for a Trainer. Properties a target checks abort through
// MT_CHECK (file and line), which libFuzzer and the replay driver both report as a crash.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "graph/check.h"
#include "mixtrain/tensor.h"

namespace mixtrain::fuzz {

// A folder of this process's own (under /dev/shm when there is one: no disk writes per input),
// made on first use. Paths in it are stable, so a crashing input is replayed the same way.
// Never destroyed: the atexit handler that removes the folder runs after static destructors.
// A process that crashes cannot remove its folder, and in libFuzzer's fork mode every crash is a
// process: tools/fuzz/run.sh names a parent folder of its own in MIXTRAIN_FUZZ_SCRATCH and
// removes it, with whatever the crashed jobs left, when the run ends.
inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    const char* parent = std::getenv("MIXTRAIN_FUZZ_SCRATCH");
    auto* tmpl = new std::string(parent != nullptr && *parent != '\0' ? parent
                                 : access("/dev/shm", W_OK) == 0   ? "/dev/shm"
                                                                   : "/tmp");
    *tmpl += "/mixtrain_fuzz_XXXXXX";
    MT_CHECK(mkdtemp(tmpl->data()) != nullptr) << "cannot make a scratch folder " << *tmpl;
    // Removed at a normal exit; libFuzzer's crash exits leave it (it holds only the last input).
    std::atexit([] { (void)!std::system(("rm -rf '" + ScratchDir() + "'").c_str()); });
    return tmpl;
  }();
  return *dir;
}

inline std::string ScratchPath(std::string_view name) { return ScratchDir() + "/" + std::string(name); }

// Writes `bytes` to `path` (replacing it); any failure is the harness's, so it aborts.
inline void WriteFileOrDie(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  MT_CHECK(f != nullptr) << "cannot write " << path;
  MT_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size()) << "short write " << path;
  MT_CHECK(std::fclose(f) == 0) << "cannot close " << path;
}

// Zeros for every entry a Trainer's batch needs (symbolic dimensions set to 2), labels of class 0.
inline TensorMap ZeroBatch(const std::vector<TensorInfo>& inputs) {
  TensorMap batch;
  for (const TensorInfo& in : inputs) {
    std::vector<int64_t> shape = in.shape;
    for (int64_t& d : shape)
      if (d < 0) d = 2;
    absl::StatusOr<HostTensor> t = HostTensor::Zeros(in.type, shape);
    if (t.ok()) batch.emplace(in.name, *std::move(t));
  }
  return batch;
}

}  // namespace mixtrain::fuzz
