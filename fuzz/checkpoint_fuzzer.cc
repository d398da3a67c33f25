// Fuzz target: the input as a checkpoint file for Trainer::LoadCheckpoint (a Trainer of
// tests/data/onnxio/tiny.onnx with the default config); a checkpoint that loads must then train a
// step. The trainer's own checkpoint, saved at start, is loaded back after every input so each
// input starts from the same state (a crash replays alone).
//
// With MIXTRAIN_FUZZ_WRITE_SEED=PATH in the environment the target writes that pristine checkpoint
// to PATH and exits: tools/fuzz/make_corpus.sh makes the seed with it.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "mixtrain/trainer.h"

namespace {

struct Fixture {
  std::unique_ptr<mixtrain::Trainer> trainer;
  mixtrain::TensorMap batch;
  std::string pristine;  // the trainer's checkpoint before any input
};

Fixture& GetFixture() {
  static Fixture* f = [] {
    auto* f = new Fixture;
    absl::StatusOr<std::unique_ptr<mixtrain::Trainer>> t =
        mixtrain::Trainer::Create(MT_SOURCE_DIR "/tests/data/onnxio/tiny.onnx");
    MT_CHECK(t.ok()) << t.status();
    f->trainer = *std::move(t);
    f->batch = mixtrain::fuzz::ZeroBatch(f->trainer->BatchInputs());
    MT_CHECK(f->trainer->Step(f->batch).ok());  // optimizer moments and step counters now set
    f->pristine = mixtrain::fuzz::ScratchPath("pristine.ckpt");
    MT_CHECK_OK(f->trainer->SaveCheckpoint(f->pristine, {.epoch = 1, .batch = 2}));
    if (const char* seed = std::getenv("MIXTRAIN_FUZZ_WRITE_SEED")) {
      MT_CHECK_OK(f->trainer->SaveCheckpoint(seed, {.epoch = 1, .batch = 2}));
      std::exit(0);
    }
    return f;
  }();
  return *f;
}

}  // namespace

// The seed is written here, before libFuzzer's loop: an exit from inside an input's run counts
// as a crash and leaves a crash-<sha1 of the empty input> file in the working directory.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::getenv("MIXTRAIN_FUZZ_WRITE_SEED") != nullptr) GetFixture();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = GetFixture();
  static const std::string path = mixtrain::fuzz::ScratchPath("input.ckpt");
  mixtrain::fuzz::WriteFileOrDie(path, std::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<mixtrain::TrainingPosition> pos = f.trainer->LoadCheckpoint(path);
  if (pos.ok()) {
    absl::StatusOr<mixtrain::StepResult> step = f.trainer->Step(f.batch);
    if (!step.ok()) {
      MT_CHECK(!step.status().message().empty()) << "a Step error without a message";
    }
  } else {
    MT_CHECK(!pos.status().message().empty()) << "a checkpoint error without a message";
  }
  MT_CHECK_OK(f.trainer->LoadCheckpoint(f.pristine).status());
  return 0;
}
