// Fuzz target: the input as a TrainConfig textproto (`mixtrain train --config`) and as a
// PrecisionPolicy textproto (`--policy`, parsed as the body of TrainConfig's `precision`, as
// tools/cmd_train.cc does). A config that parses must print and parse back to the same text, and
// build a Trainer of tests/data/onnxio/tiny.onnx and run a step, or fail with a message.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "mixtrain/trainer.h"

namespace {

void CheckConfig(const absl::StatusOr<mixtrain::TrainConfig>& c) {
  using mixtrain::TrainConfig;
  if (!c.ok()) {
    MT_CHECK(!c.status().message().empty()) << "a config error without a message";
    return;
  }
  const std::string text = c->ToTextProto();
  absl::StatusOr<TrainConfig> back = TrainConfig::FromTextProto(text);
  MT_CHECK(back.ok()) << "ToTextProto's output does not parse: " << back.status() << "\n" << text;
  MT_CHECK(back->ToTextProto() == text) << "ToTextProto -> FromTextProto changed the config:\n" << text;
  absl::StatusOr<std::unique_ptr<mixtrain::Trainer>> t =
      mixtrain::Trainer::Create(MT_SOURCE_DIR "/tests/data/onnxio/tiny.onnx", *c);
  if (!t.ok()) {
    MT_CHECK(!t.status().message().empty()) << "a Trainer::Create error without a message";
    return;
  }
  absl::StatusOr<mixtrain::StepResult> step = (*t)->Step(mixtrain::fuzz::ZeroBatch((*t)->BatchInputs()));
  if (!step.ok()) {
    MT_CHECK(!step.status().message().empty()) << "a Step error without a message";
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mixtrain::TrainConfig;
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckConfig(TrainConfig::FromTextProto(text));
  CheckConfig(TrainConfig::FromTextProto("precision {\n" + text + "\n}"));
  return 0;
}
