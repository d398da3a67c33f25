// A small service embedding mixtrain through its public API only: trains a classifier on
// synthetic batches (reading the loss back only every few steps), evaluates, checkpoints, exports
// the inference model and serves it with an InferenceSession. Every error is a Status the service
// reports; nothing in the library exits the process.
//
//   train_service MODEL.onnx WORK_DIR [--steps=N]
// The model takes one float input whose trailing dims are fixed (e.g. models/mlp.onnx, N x 784)
// and is trained with cross-entropy over 10 classes.
#include <cstdio>
#include <random>
#include <string>

#include "mixtrain/mixtrain.h"

namespace {

constexpr int64_t kBatch = 32;
constexpr int64_t kClasses = 10;

// A batch for the trainer's inputs: N(0,1) floats and labels in [0, kClasses).
absl::StatusOr<mixtrain::TensorMap> MakeBatch(const mixtrain::Trainer& t, std::mt19937& rng) {
  mixtrain::TensorMap batch;
  for (const mixtrain::TensorInfo& in : t.BatchInputs()) {
    std::vector<int64_t> shape = in.shape;
    for (int64_t& d : shape) d = d < 0 ? kBatch : d;
    absl::StatusOr<mixtrain::HostTensor> x = mixtrain::HostTensor::Zeros(in.type, shape);
    if (!x.ok()) return x.status();
    if (float* f = x->data<float>()) {
      std::normal_distribution<float> n;
      for (int64_t i = 0; i < x->num_elements(); ++i) f[i] = n(rng);
    } else if (int64_t* l = x->data<int64_t>()) {
      for (int64_t i = 0; i < x->num_elements(); ++i) l[i] = rng() % kClasses;
    } else {
      return absl::InvalidArgumentError("train_service: input '" + in.name + "' is neither f32 nor i64");
    }
    batch.emplace(in.name, *std::move(x));
  }
  return batch;
}

absl::Status Serve(const std::string& model, const std::string& dir, int steps) {
  mixtrain::TrainConfig config;
  config.optimizer.lr = 1e-3f;
  config.precision.preset = mixtrain::TrainConfig::Precision::Preset::kAmp;  // bf16 on the CPU
  absl::StatusOr<std::unique_ptr<mixtrain::Trainer>> trainer = mixtrain::Trainer::Create(model, config);
  if (!trainer.ok()) return trainer.status();
  mixtrain::Trainer& t = **trainer;
  std::printf("mixtrain %s: %zu parameter tensors, precision %s/%s\n", mixtrain::Version(),
              t.ParameterNames().size(), t.precision().preset.c_str(),
              mixtrain::ElementTypeName(t.precision().low_type));

  std::mt19937 rng(7);
  absl::StatusOr<mixtrain::TensorMap> batch = MakeBatch(t, rng);  // one batch, learned by heart
  if (!batch.ok()) return batch.status();
  for (int i = 1; i <= steps; ++i) {
    bool log = i % 5 == 0 || i == 1;
    absl::StatusOr<mixtrain::StepResult> r = t.Step(*batch, {.read_loss = log});
    if (!r.ok()) return r.status();
    if (log) std::printf("step %lld loss %.4f\n", static_cast<long long>(r->step), *r->loss);
  }
  absl::StatusOr<mixtrain::EvalResult> e = t.Evaluate(*batch);
  if (!e.ok()) return e.status();
  std::printf("eval: loss %.4f accuracy %.2f\n", e->loss_sum / e->examples,
              static_cast<double>(e->correct) / e->examples);

  if (absl::Status s = t.SaveCheckpoint(dir + "/service.ckpt", {.epoch = 1}); !s.ok()) return s;
  const std::string exported = dir + "/service.onnx";
  if (absl::Status s = t.ExportInferenceModel(exported); !s.ok()) return s;

  absl::StatusOr<std::unique_ptr<mixtrain::InferenceSession>> session =
      mixtrain::InferenceSession::Create(exported);
  if (!session.ok()) return session.status();
  mixtrain::TensorMap feeds;
  for (const mixtrain::TensorInfo& in : (*session)->Inputs()) feeds.emplace(in.name, batch->at(in.name));
  absl::StatusOr<mixtrain::TensorMap> out = (*session)->Run(feeds);
  if (!out.ok()) return out.status();
  for (const auto& [name, tensor] : *out)
    std::printf("served '%s': %lld values\n", name.c_str(), static_cast<long long>(tensor.num_elements()));

  // A caller's mistake is a Status, not a crash.
  absl::Status bad = t.Step({}).status();
  std::printf("empty batch -> %s\n", bad.ToString().c_str());
  return bad.ok() ? absl::InternalError("an empty batch was accepted") : absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: train_service MODEL.onnx WORK_DIR [--steps=N]\n");
    return 2;
  }
  int steps = 20;
  if (argc > 3 && std::sscanf(argv[3], "--steps=%d", &steps) != 1) {
    std::fprintf(stderr, "train_service: bad argument '%s'\n", argv[3]);
    return 2;
  }
  absl::Status s = Serve(argv[1], argv[2], steps);
  if (!s.ok()) {
    std::fprintf(stderr, "train_service: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("train_service: ok\n");
  return 0;
}
