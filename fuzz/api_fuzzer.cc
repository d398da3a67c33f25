// Fuzz target: the public C++ API as an embedding service drives it. The input is a program of
// actions on two Trainer slots and one InferenceSession slot over small models of tests/data:
// Create (with a fuzzed TrainConfig: numbers, enums out of range, names, op lists), Step,
// StepAsync, Evaluate, Run (with fuzzed tensors: right or wrong element types, ranks and
// dimensions, NaN and infinities, labels out of range, missing and extra entries), SaveCheckpoint,
// LoadCheckpoint (of either trainer's files, or of fuzzed bytes), ExportInferenceModel and a
// session of the export, SetTotalSteps, Get/SetParameter. Every call must return; an error must
// carry a message; Step must count itself and LoadCheckpoint must restore the saved step.
//
// Encoding: each action is one byte (its index below, modulo the count) followed by the bytes
// its arguments read; an exhausted input reads zeros. tools/fuzz/make_api_seeds.py writes the
// committed seeds (fuzz/corpus/api/) in this encoding.
// MIXTRAIN_FUZZ_TRACE=1 prints each call and its outcome.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "mixtrain/mixtrain.h"

namespace {

using namespace mixtrain;

// Small models with different ops: Gemm, BatchNorm, LayerNorm + Gelu, Conv1d, a Keras export,
// and torch.nn's mix of them.
const char* const kModels[] = {
    MT_SOURCE_DIR "/tests/data/onnxio/tiny.onnx",       MT_SOURCE_DIR "/tests/data/optim/mlp_bn.onnx",
    MT_SOURCE_DIR "/tests/data/grad/ln_gelu_mlp.onnx",  MT_SOURCE_DIR "/tests/data/grad/conv1d_net.onnx",
    MT_SOURCE_DIR "/tests/data/zoo/keras_mlp.onnx",     MT_SOURCE_DIR "/tests/data/zoo/nn_mix.onnx",
};
constexpr int kNumModels = sizeof(kModels) / sizeof(kModels[0]);

// The program's bytes, read front to back; zeros once exhausted.
class Program {
 public:
  Program(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  size_t pos() const { return pos_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  int Below(int n) { return Byte() % n; }
  bool Bit() { return Byte() & 1; }
  // A number a config field or a dimension might be given: edges of every rule, or raw bits.
  double Number() {
    static const double kValues[] = {0, -0.0, 1, -1, 0.5, 2, 3, 1e-3, 0.9, 0.999, 1e-50, 1e-45, 1e39, 2.5,
                                     std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                     -std::numeric_limits<double>::infinity(), 4611686018427387904.0, 1e12, 1e12 + 1,
                                     2147483647, 2147483648.0, -9.3e18, 64, -64, 100, 65504, 1e-8};
    const uint8_t b = Byte();
    if (b < 224) return kValues[b % (sizeof(kValues) / sizeof(kValues[0]))];
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = bits << 8 | Byte();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  // A name: one a model or config uses, an empty one, or a few fuzzed characters.
  std::string Name() {
    // Includes names the training step gives its own values ("loss", "lr", "step").
    static const char* const kNames[] = {"labels", "", "x", "y", "input", "output", "loss", "Gemm", "lr",
                                         "Softmax", "FooOp", "step", "(", "a*", ".*", "labels "};
    const uint8_t b = Byte();
    if (b < 200) return kNames[b % (sizeof(kNames) / sizeof(kNames[0]))];
    std::string s(Below(6), 'a');
    for (char& c : s) c = static_cast<char>(Byte());
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

// MIXTRAIN_FUZZ_TRACE=1 prints every call and its outcome (to see what a seed exercises).
bool Trace() {
  static const bool on = std::getenv("MIXTRAIN_FUZZ_TRACE") != nullptr;
  return on;
}

void ExpectMessage(const absl::Status& s, const char* what) {
  if (Trace()) std::fprintf(stderr, "  %s: %s\n", what, s.ok() ? "ok" : std::string(s.message()).c_str());
  if (!s.ok()) MT_CHECK(!s.message().empty()) << what << " failed without a message";
}

TrainConfig FuzzConfig(Program& p) {
  TrainConfig c;
  c.device = "cpu";
  static const char* const kNumeric[] = {"optimizer.lr", "optimizer.weight_decay", "optimizer.momentum",
                                         "optimizer.beta1", "optimizer.beta2", "optimizer.clip_grad_norm",
                                         "schedule.warmup_steps", "schedule.gamma", "loss_scaler.init_scale",
                                         "loss_scaler.growth_interval", "accumulate", "class_axis",
                                         "debug_precision", "steps", "data.batch_size", "loss_scaler.max_scale"};
  for (int n = p.Below(4); n > 0; --n) {
    const char* field = kNumeric[p.Below(sizeof(kNumeric) / sizeof(kNumeric[0]))];
    ExpectMessage(c.SetNumber(field, p.Number()), "SetNumber");
  }
  if (p.Byte() < 16) c.optimizer.lr = static_cast<float>(p.Number());  // unchecked: Create must refuse
  c.optimizer.kind = static_cast<TrainConfig::Optimizer::Kind>(p.Below(5));
  c.schedule.kind = static_cast<TrainConfig::Schedule::Kind>(p.Below(4));
  c.precision.preset = static_cast<TrainConfig::Precision::Preset>(p.Below(4));
  c.precision.low_dtype = static_cast<TrainConfig::Precision::LowType>(p.Below(4));
  c.loss_scaler.mode = static_cast<TrainConfig::LossScaler::Mode>(p.Below(5));
  static const char* const kLosses[] = {"cross_entropy", "mse", "l1", "bce_with_logits", "output:", "output:loss", "hinge"};
  c.loss = kLosses[p.Below(sizeof(kLosses) / sizeof(kLosses[0]))];
  if (p.Byte() < 32) c.data.labels_key = p.Name();
  if (p.Byte() < 32) c.output = p.Name();
  if (p.Byte() < 32) c.precision.allow.push_back(p.Name());
  if (p.Byte() < 32) c.precision.deny.push_back(p.Name());
  if (p.Byte() < 16) c.precision.fp32_nodes.push_back(p.Name());
  if (p.Byte() < 16) c.freeze = p.Name();
  return c;
}

// A batch for `inputs`, each entry right or wrong in a fuzzed way, at most 4096 elements each.
TensorMap FuzzBatch(Program& p, const std::vector<TensorInfo>& inputs) {
  TensorMap batch;
  const int64_t symbolic = 1 + p.Below(4);  // every symbolic dimension (the batch)
  for (const TensorInfo& in : inputs) {
    const int mode = p.Below(8);
    if (mode == 6) continue;  // missing
    ElementType type = in.type;
    std::vector<int64_t> shape = in.shape;
    for (int64_t& d : shape)
      if (d < 0) d = symbolic;
    if (mode == 4) type = static_cast<ElementType>(p.Below(9));
    if (mode == 5) {
      shape.resize(p.Below(5));
      for (int64_t& d : shape) d = p.Below(6);
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (n > 4096) continue;
    // f16 and bf16 are filled as f32 and converted (NaN and infinities stay what they are).
    const bool low = type == ElementType::kFloat16 || type == ElementType::kBFloat16;
    absl::StatusOr<HostTensor> t = HostTensor::Zeros(low ? ElementType::kFloat32 : type, shape);
    MT_CHECK(t.ok()) << t.status();
    // Values: zeros (labels of class 0), one number everywhere, or one number per element (NaN,
    // infinities and huge ones included).
    const int fill = p.Below(3);
    const double everywhere = fill == 1 ? p.Number() : 0;
    for (int64_t i = 0; fill != 0 && i < n; ++i) {
      const double v = fill == 1 ? everywhere : p.Number();
      const bool fits = std::isfinite(v) && std::fabs(v) < 2e9;
      switch (t->type()) {
        case ElementType::kFloat32: t->data<float>()[i] = static_cast<float>(v); break;
        case ElementType::kFloat64: t->data<double>()[i] = v; break;
        case ElementType::kInt64: t->data<int64_t>()[i] = std::isfinite(v) && std::fabs(v) < 9e18 ? static_cast<int64_t>(v) : -1; break;
        case ElementType::kInt32: t->data<int32_t>()[i] = fits ? static_cast<int32_t>(v) : -1; break;
        default:  // one-byte types: i8, u8, bool (any byte, 2 included)
          static_cast<uint8_t*>(t->raw_data())[i] = fits ? static_cast<uint8_t>(static_cast<int64_t>(v)) : 0xff;
          break;
      }
      if (fill == 2 && p.done()) break;
    }
    if (low) t = t->ConvertedTo(type);
    MT_CHECK(t.ok()) << t.status();
    batch.emplace(mode == 7 ? p.Name() : in.name, *std::move(t));
  }
  return batch;
}

struct State {
  std::unique_ptr<Trainer> trainers[2];
  std::unique_ptr<InferenceSession> session;
  std::map<std::string, int64_t> saved_step;  // checkpoint file -> the step saved in it
};

// Two checkpoint files and an exported model, removed before each input so it replays alone.
const std::string kFiles[] = {fuzz::ScratchPath("a.ckpt"), fuzz::ScratchPath("b.ckpt"), fuzz::ScratchPath("export.onnx")};

void RunAction(Program& p, State& s) {
  const size_t at = p.pos();
  const int action = p.Below(14);
  if (Trace()) std::fprintf(stderr, " action %d (byte %zu)\n", action, at);
  std::unique_ptr<Trainer>& t = s.trainers[p.Bit()];
  switch (action) {
    case 0: {  // Create
      const char* model = kModels[p.Below(kNumModels)];
      absl::StatusOr<std::unique_ptr<Trainer>> made = Trainer::Create(model, FuzzConfig(p));
      ExpectMessage(made.status(), "Trainer::Create");
      if (made.ok()) t = *std::move(made);
      return;
    }
    case 1:
    case 2: {  // Step, StepAsync
      if (t == nullptr) return;
      const int64_t before = t->steps_taken();
      const TensorMap batch = FuzzBatch(p, t->BatchInputs());
      const StepOptions options{.read_loss = p.Bit()};
      absl::StatusOr<StepResult> r = action == 1 ? t->Step(batch, options) : t->StepAsync(batch, options).get();
      ExpectMessage(r.status(), "Trainer::Step");
      if (r.ok()) MT_CHECK(t->steps_taken() == before + 1) << "a step that succeeded did not count";
      return;
    }
    case 3: {  // Evaluate
      if (t == nullptr) return;
      ExpectMessage(t->Evaluate(FuzzBatch(p, t->BatchInputs())).status(), "Trainer::Evaluate");
      return;
    }
    case 4: {  // InferenceSession::Create
      InferenceOptions options;
      static const ElementType kTypes[] = {ElementType::kFloat32, ElementType::kBFloat16, ElementType::kFloat16,
                                           ElementType::kInt64};
      options.compute_type = kTypes[p.Below(4)];
      options.optimize = p.Bit();
      options.device = "cpu";
      const bool exported = p.Byte() < 64;
      absl::StatusOr<std::unique_ptr<InferenceSession>> made =
          InferenceSession::Create(exported ? kFiles[2] : kModels[p.Below(kNumModels)], options);
      ExpectMessage(made.status(), "InferenceSession::Create");
      if (made.ok()) s.session = *std::move(made);
      return;
    }
    case 5: {  // Run
      if (s.session == nullptr) return;
      std::vector<std::string> fetch;
      if (p.Byte() < 64) fetch.push_back(p.Name());
      ExpectMessage(s.session->Run(FuzzBatch(p, s.session->Inputs()), fetch).status(), "InferenceSession::Run");
      return;
    }
    case 6: {  // SaveCheckpoint, at any position (negative ones are refused)
      if (t == nullptr) return;
      const TrainingPosition pos{.epoch = static_cast<int64_t>(p.Below(4)) - 1, .batch = static_cast<int64_t>(p.Below(4)) - 1};
      const std::string& file = kFiles[p.Bit()];
      const absl::Status saved = t->SaveCheckpoint(file, pos);
      ExpectMessage(saved, "Trainer::SaveCheckpoint");
      if (saved.ok()) s.saved_step[file] = t->steps_taken();
      return;
    }
    case 7: {  // LoadCheckpoint: this trainer's, the other's (another model or config), or garbage
      if (t == nullptr) return;
      const std::string& file = kFiles[p.Below(3)];
      absl::StatusOr<TrainingPosition> pos = t->LoadCheckpoint(file);
      ExpectMessage(pos.status(), "Trainer::LoadCheckpoint");
      if (pos.ok() && s.saved_step.contains(file))
        MT_CHECK(t->steps_taken() == s.saved_step[file]) << "LoadCheckpoint did not restore the saved step";
      return;
    }
    case 8: {  // a checkpoint file of fuzzed bytes (a prefix of a saved one, then the program's bytes)
      std::string bytes;
      for (int n = p.Below(64); n > 0; --n) bytes.push_back(static_cast<char>(p.Byte()));
      const std::string& file = kFiles[p.Bit()];
      fuzz::WriteFileOrDie(file, bytes);
      s.saved_step.erase(file);
      return;
    }
    case 9: {  // ExportInferenceModel
      if (t == nullptr) return;
      static const ElementType kTypes[] = {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16,
                                           ElementType::kInt8};
      ExpectMessage(t->ExportInferenceModel(kFiles[2], kTypes[p.Below(4)]), "Trainer::ExportInferenceModel");
      return;
    }
    case 10: {  // SetTotalSteps, any value
      if (t == nullptr) return;
      t->SetTotalSteps(static_cast<int64_t>(p.Below(8)) - 2);
      return;
    }
    case 11: {  // GetParameter / SetParameter, by a right or wrong name, with a right or wrong tensor
      if (t == nullptr) return;
      const std::vector<std::string> names = t->ParameterNames();
      const std::string name = names.empty() || p.Byte() < 32 ? p.Name() : names[p.Below(static_cast<int>(names.size()))];
      absl::StatusOr<HostTensor> value = t->GetParameter(name);
      ExpectMessage(value.status(), "Trainer::GetParameter");
      if (!value.ok()) return;
      const TensorMap batch = FuzzBatch(p, {TensorInfo{name, value->type(), value->shape(), {}}});
      if (auto it = batch.begin(); it != batch.end())
        ExpectMessage(t->SetParameter(name, it->second), "Trainer::SetParameter");
      return;
    }
    case 12: {  // the run's counters and statistics
      if (t == nullptr) return;
      ExpectMessage(t->skipped_steps().status(), "Trainer::skipped_steps");
      ExpectMessage(t->PrecisionStats().status(), "Trainer::PrecisionStats");
      return;
    }
    case 13: {  // destroy a slot (the other keeps running)
      if (p.Bit()) t.reset();
      else s.session.reset();
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const std::string& f : kFiles) std::remove(f.c_str());
  Program p(data, size);
  State s;
  // At most 64 actions: an input is a short session, so each run stays fast.
  for (int i = 0; i < 64 && !p.done(); ++i) RunAction(p, s);
  return 0;
}
