// Checkpoints a run can trust (runtime/trainer.h, docs/checkpoints.md):
//   frame      truncated files, flipped bits, headerless (pre-format) files are refused by name
//   fields     crafted negative counters, bad loss scales, missing/extra/misshapen state refused
//              even with a valid checksum
//   run        a checkpoint of another model (saying what differs) or another config (naming the
//              field and both values) is refused; the run's length and data location may differ
//   resume     N/2 steps + save + new Trainer + load + N/2 steps == N steps, bit for bit, in fp32,
//              bf16 and fp16 with dynamic loss scaling, under a cosine schedule whose horizon
//              comes from the checkpoint
//   kill -9    a writer killed at random 100 times leaves either no file or a loadable one, and
//              the next save leaves no orphan temp file
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "graph/external_data.h"
#include "graph/shape_inference.h"
#include "passes/training.h"
#include "tests/runtime/train_test_util.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using traintest::ExpectSameState;
using traintest::Fp32Config;
using traintest::MakeTrainer;
using Batch = std::map<std::string, Tensor>;

// x[N,in] -> Gemm(in->hidden) -> act -> Gemm(hidden->4) -> logits[N,4], weights from a fixed seed.
std::unique_ptr<Graph> Mlp(int in, int hidden, const char* act = "Relu") {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  auto weights = [&](std::vector<int64_t> dims) {
    Tensor t(DType::kF32, dims);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = nd(rng);
    return t;
  };
  Value* x = g->AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), Dim(in)}));
  g->AddInput(x);
  Node* fc1 = g->AddNode("Gemm", {x, g->AddInitializer("w1", weights({hidden, in})),
                                   g->AddInitializer("b1", weights({hidden}))}, 1, "fc1");
  fc1->SetAttr(Attribute::Int("transB", 1));
  Node* a = g->AddNode(act, {fc1->output(0)}, 1, "act");
  Value* logits = g->AddValue("logits", DType::kF32, Shape({Dim::Symbol("N"), Dim(4)}));
  Node* fc2 = g->AddNode("Gemm", {a->output(0), g->AddInitializer("w2", weights({4, hidden})),
                                  g->AddInitializer("b2", weights({4}))}, {logits}, "fc2");
  fc2->SetAttr(Attribute::Int("transB", 1));
  g->AddOutput(logits);
  EXPECT_TRUE(InferShapes(*g).ok());
  return g;
}

std::unique_ptr<Trainer> MakeMlp(const pb::TrainConfig& c, int in = 8, int hidden = 16, const char* act = "Relu") {
  auto t = Trainer::CreateFromGraph(Mlp(in, hidden, act), c);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

Batch RandomBatch(int step, int features = 8) {
  std::mt19937 rng(1000 + step);
  std::normal_distribution<float> n(0, 1);
  Tensor x(DType::kF32, {16, features});
  Tensor y(DType::kI64, {16});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = n(rng);
  for (int64_t i = 0; i < 16; ++i) y.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 4);
  return {{"x", x}, {"labels", y}};
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class Checkpoint : public testing::Test {
 protected:
  void SetUp() override {
    std::string test = testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(test.begin(), test.end(), '/', '_');  // parameterized names hold a '/'
    dir_ = fs::temp_directory_path() / ("mt_ckpt_" + test + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Loading `path` into `t` fails with a message naming the file and containing `needle`, and
  // leaves `t` as it was.
  void ExpectRefused(Trainer& t, const std::string& path, const std::string& needle) {
    SCOPED_TRACE(needle);
    auto before = t.State();
    int64_t calls = t.calls();
    ASSERT_TRUE(before.ok());
    auto r = t.LoadCheckpoint(path);
    ASSERT_FALSE(r.ok()) << "loaded, expected: " << needle;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
    EXPECT_EQ(t.calls(), calls);
    ExpectSameState(*before, *t.State());
  }

  // A checkpoint of `saver` decoded, edited by `edit`, re-encoded with a valid checksum.
  std::string Crafted(const Trainer& saver, const std::string& name,
                      const std::function<void(pb::Checkpoint&)>& edit) {
    std::string path = Path(name);
    EXPECT_TRUE(saver.SaveCheckpoint(path).ok());
    auto ck = DecodeCheckpoint(ReadBytes(path), path);
    EXPECT_TRUE(ck.ok()) << ck.status();
    if (!ck.ok()) return path;
    edit(*ck);
    auto bytes = EncodeCheckpoint(*ck);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    WriteBytes(path, *bytes);
    return path;
  }

  fs::path dir_;
};

// --- frame ---------------------------------------------------------------------------------------

TEST_F(Checkpoint, TruncatedOrBitFlippedFilesAreRefused) {
  auto t = MakeMlp(Fp32Config());
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Step(RandomBatch(0)).ok());
  const std::string good = Path("good.ckpt");
  ASSERT_TRUE(t->SaveCheckpoint(good).ok());
  const std::string bytes = ReadBytes(good);
  ASSERT_GT(bytes.size(), 1000u);
  auto fresh = MakeMlp(Fp32Config());
  ASSERT_NE(fresh, nullptr);
  const std::string bad = Path("bad.ckpt");
  for (size_t len : {size_t{0}, size_t{5}, size_t{12}, size_t{30}, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE("truncated to " + std::to_string(len));
    WriteBytes(bad, bytes.substr(0, len));
    ExpectRefused(*fresh, bad, "truncated");
  }
  // Offsets in the version, the length, the payload's start, middle and end, and the CRC.
  for (size_t at : {size_t{9}, size_t{14}, size_t{21}, size_t{40}, bytes.size() / 2, bytes.size() - 6,
                    bytes.size() - 2}) {
    for (int bit : {0, 5}) {
      SCOPED_TRACE("bit " + std::to_string(bit) + " at " + std::to_string(at));
      std::string flipped = bytes;
      flipped[at] = static_cast<char>(flipped[at] ^ (1 << bit));
      WriteBytes(bad, flipped);
      // A flipped length bit shows as a size mismatch, every other as a bad checksum.
      ExpectRefused(*fresh, bad, at >= 12 && at < 20 ? "truncated" : "checksum mismatch");
    }
  }
  std::string no_magic = bytes;
  no_magic[0] ^= 1;
  WriteBytes(bad, no_magic);
  ExpectRefused(*fresh, bad, "is not a mixtrain checkpoint");
  // A checkpoint from before the frame: the bare Checkpoint message.
  auto ck = DecodeCheckpoint(bytes, good);
  ASSERT_TRUE(ck.ok()) << ck.status();
  WriteBytes(bad, ck->SerializeAsString());
  ExpectRefused(*fresh, bad, "written before format version 1");
  // Not files at all: a folder, and a FIFO (whose read would block forever).
  ExpectRefused(*fresh, dir_.string(), "is not a regular file");
  ASSERT_EQ(mkfifo(Path("fifo").c_str(), 0600), 0);
  ExpectRefused(*fresh, Path("fifo"), "is not a regular file");
  ASSERT_TRUE(fresh->LoadCheckpoint(good).ok());  // and the intact file still loads
  EXPECT_EQ(fresh->calls(), 1);
}

TEST_F(Checkpoint, AFutureFormatVersionIsRefused) {
  auto t = MakeMlp(Fp32Config());
  ASSERT_NE(t, nullptr);
  std::string bytes = *EncodeCheckpoint(pb::Checkpoint());
  bytes[8] = 2;  // version 2, with the CRC recomputed so only the version is wrong
  bytes.resize(bytes.size() - 4);
  uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  WriteBytes(Path("v2.ckpt"), bytes);
  ExpectRefused(*t, Path("v2.ckpt"), "format version 2; this build reads version 1");
}

// --- fields --------------------------------------------------------------------------------------

TEST_F(Checkpoint, CraftedFieldsAreRefusedDespiteAValidChecksum) {
  pb::TrainConfig c = Fp32Config();
  auto t = MakeMlp(c);
  ASSERT_NE(t, nullptr);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(t->Step(RandomBatch(i)).ok());
  auto fresh = MakeMlp(c);
  ASSERT_NE(fresh, nullptr);
  // Replaces state tensor `name` by `t`.
  auto set = [](pb::Checkpoint& ck, const std::string& name, const Tensor& t) {
    for (auto& p : *ck.mutable_state())
      if (p.name() == name) {
        p.Clear();
        TensorToProto(t, &p);
        p.set_name(name);
        return;
      }
    ADD_FAILURE() << "no state " << name;
  };
  ExpectRefused(*fresh, Crafted(*t, "a", [](pb::Checkpoint& ck) { ck.set_step(-20); }), "field step is -20");
  ExpectRefused(*fresh, Crafted(*t, "b", [](pb::Checkpoint& ck) { ck.set_step(-1000000); }),
                "field step is -1000000");
  ExpectRefused(*fresh, Crafted(*t, "c", [](pb::Checkpoint& ck) { ck.set_epoch(-1); }), "field epoch is -1");
  ExpectRefused(*fresh, Crafted(*t, "d", [](pb::Checkpoint& ck) { ck.set_batch_in_epoch(-3); }),
                "field batch_in_epoch is -3");
  ExpectRefused(*fresh, Crafted(*t, "e", [](pb::Checkpoint& ck) { ck.set_planned_steps(-8); }),
                "field planned_steps is -8");
  // Past the bound of a run's steps (10^12), as TrainConfig's `steps` is (issue 33: step=2^62
  // resumed and reported 4611686018427387904 steps trained).
  ExpectRefused(*fresh, Crafted(*t, "s62", [](pb::Checkpoint& ck) { ck.set_step(int64_t{1} << 62); }),
                "field step is 4611686018427387904 (must be in [0, 1000000000000])");
  ExpectRefused(*fresh, Crafted(*t, "b9", [](pb::Checkpoint& ck) { ck.set_batch_in_epoch(int64_t{1} << 50); }),
                "field batch_in_epoch is 1125899906842624");
  ExpectRefused(*fresh, Crafted(*t, "e62", [](pb::Checkpoint& ck) { ck.set_epoch(int64_t{1} << 62); }),
                "field epoch is 4611686018427387904");
  ExpectRefused(*fresh, Crafted(*t, "p62", [](pb::Checkpoint& ck) { ck.set_planned_steps(int64_t{1} << 62); }),
                "field planned_steps is 4611686018427387904");
  ExpectRefused(*fresh, Crafted(*t, "f", [&](pb::Checkpoint& ck) {
    set(ck, kStepName, Tensor::ScalarI64(-5));
  }), "state 'step' is -5");
  ExpectRefused(*fresh, Crafted(*t, "g", [&](pb::Checkpoint& ck) {
    set(ck, kStepName, Tensor::ScalarI64(7));
  }), "state 'step' counts 7 updates in 2 steps");
  // As an auto-dtype checkpoint from a CPU where auto meant bf16.
  ExpectRefused(*fresh, Crafted(*t, "p", [](pb::Checkpoint& ck) { ck.set_precision("amp/bf16, loss scaling off"); }),
                "made with precision amp/bf16, loss scaling off, this run resolves to fp32/f32");
  ExpectRefused(*fresh, Crafted(*t, "h", [](pb::Checkpoint& ck) { ck.mutable_state()->RemoveLast(); }),
                "lacks state");
  ExpectRefused(*fresh, Crafted(*t, "i", [](pb::Checkpoint& ck) {
    *ck.add_state() = ck.state(0);
    ck.mutable_state()->rbegin()->set_name("unknown.param");
  }), "has state 'unknown.param' this trainer does not keep");
  ExpectRefused(*fresh, Crafted(*t, "j", [](pb::Checkpoint& ck) { *ck.add_state() = ck.state(0); }),
                "appears twice");
  ExpectRefused(*fresh, Crafted(*t, "k", [&](pb::Checkpoint& ck) {
    set(ck, "w1", Tensor(DType::kF32, {3, 3}));
  }), "state 'w1' is f32[3,3], this trainer's is f32[16,8]");
  ExpectRefused(*fresh, Crafted(*t, "l", [&](pb::Checkpoint& ck) {
    set(ck, "w1", Tensor(DType::kI64, {16, 8}));
  }), "state 'w1' is i64[16,8]");

  // The loss scale of an fp16 run: finite and > 0.
  pb::TrainConfig fp16 = c;
  fp16.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  fp16.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::FP16);
  fp16.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::DYNAMIC);
  auto scaled = MakeMlp(fp16);
  auto scaled_fresh = MakeMlp(fp16);
  ASSERT_NE(scaled, nullptr);
  ASSERT_NE(scaled_fresh, nullptr);
  for (float bad : {0.0f, -1.0f, INFINITY, NAN}) {
    ExpectRefused(*scaled_fresh, Crafted(*scaled, "scale", [&](pb::Checkpoint& ck) {
      set(ck, kLossScaleName, Tensor::Scalar(bad));
    }), "loss scale");
  }
  ExpectRefused(*scaled_fresh, Crafted(*scaled, "good", [&](pb::Checkpoint& ck) {
    set(ck, kGoodStepsName, Tensor::ScalarI64(-1));
  }), "state 'loss_scale.good_steps' is -1");
}

// --- run -----------------------------------------------------------------------------------------

TEST_F(Checkpoint, AnotherModelIsRefusedSayingWhatDiffers) {
  pb::TrainConfig c = Fp32Config();
  auto small = MakeMlp(c, 8, 16);
  auto wide = MakeMlp(c, 8, 32);
  auto tanh = MakeMlp(c, 8, 16, "Tanh");
  ASSERT_TRUE(small && wide && tanh);
  ASSERT_TRUE(small->SaveCheckpoint(Path("small.ckpt")).ok());
  ExpectRefused(*wide, Path("small.ckpt"),
                "made for another model: parameter 'w1' is f32[16,8] in the checkpoint's model, f32[32,8] in this one");
  // The same parameters, another graph.
  ExpectRefused(*tanh, Path("small.ckpt"), "in the checkpoint's model, Tanh in this one");
  // A model file of other parameters altogether.
  auto file_mlp = MakeTrainer("mlp.onnx", c);
  ASSERT_NE(file_mlp, nullptr);
  ExpectRefused(*file_mlp, Path("small.ckpt"), "made for another model: parameter '");
}

TEST_F(Checkpoint, AnotherConfigIsRefusedNamingTheFieldAndBothValues) {
  pb::TrainConfig adam = Fp32Config();
  adam.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  auto saver = MakeMlp(adam);
  ASSERT_NE(saver, nullptr);
  ASSERT_TRUE(saver->Step(RandomBatch(0)).ok());
  ASSERT_TRUE(saver->SaveCheckpoint(Path("adam.ckpt")).ok());
  auto refused = [&](const std::function<void(pb::TrainConfig&)>& edit, const std::string& needle) {
    pb::TrainConfig c = adam;
    edit(c);
    auto t = MakeMlp(c);
    ASSERT_NE(t, nullptr);
    ExpectRefused(*t, Path("adam.ckpt"), needle);
  };
  // Adam and AdamW keep the same state tensors: only the config tells them apart.
  refused([](pb::TrainConfig& c) { c.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAMW); },
          "optimizer.kind is ADAM in the checkpoint, ADAMW in this run");
  refused([](pb::TrainConfig& c) { c.mutable_data()->set_batch_size(32); },
          "data.batch_size is 64 in the checkpoint, 32 in this run");
  refused([](pb::TrainConfig& c) { c.mutable_optimizer()->set_lr(0.5f); },
          "optimizer.lr is 0.001 in the checkpoint, 0.5 in this run");
  refused([](pb::TrainConfig& c) { c.mutable_schedule()->set_kind(pb::ScheduleConfig::COSINE); },
          "schedule.kind is CONSTANT in the checkpoint, COSINE in this run");
  refused([](pb::TrainConfig& c) { c.mutable_loss_scaler()->set_mode(pb::LossScalerConfig::STATIC); },
          "loss_scaler.mode is AUTO in the checkpoint, STATIC in this run");
  refused([](pb::TrainConfig& c) {
    c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
    c.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::FP16);
  }, "precision.preset is FP32 in the checkpoint, AMP in this run");
  refused([](pb::TrainConfig& c) { c.set_ignore_index(-100); }, "ignore_index is 0 in the checkpoint, -100 in this run");
  refused([](pb::TrainConfig& c) { c.mutable_precision()->add_deny("Gemm"); },
          "precision.deny is [] in the checkpoint, [\"Gemm\"] in this run");

  // Where the data comes from, the run's length and the device may change.
  pb::TrainConfig longer = adam;
  longer.set_steps(1000);
  longer.set_epochs(7);
  longer.set_device("cpu");
  longer.mutable_data()->set_path("elsewhere.npz");
  // So may the CLI's run options (checkpoints, evaluation, logs), and a low dtype of AUTO matches
  // an explicit one when both resolve alike (the resolved precision is compared apart).
  longer.mutable_run()->set_save_every(50);
  longer.mutable_run()->set_log_dir("tb");
  longer.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::BF16);
  auto t = MakeMlp(longer);
  ASSERT_NE(t, nullptr);
  auto pos = t->LoadCheckpoint(Path("adam.ckpt"));
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(t->calls(), 1);
}

TEST_F(Checkpoint, ExplicitLowDtypesMustMatch) {
  pb::TrainConfig bf16 = Fp32Config();
  bf16.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
  bf16.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::BF16);
  auto saver = MakeMlp(bf16);
  ASSERT_NE(saver, nullptr);
  ASSERT_TRUE(saver->SaveCheckpoint(Path("bf16.ckpt")).ok());
  pb::TrainConfig fp16 = bf16;
  fp16.mutable_precision()->set_low_dtype(pb::PrecisionPolicy::FP16);
  auto t = MakeMlp(fp16);
  ASSERT_NE(t, nullptr);
  ExpectRefused(*t, Path("bf16.ckpt"), "precision.low_dtype is BF16 in the checkpoint, FP16 in this run");
}

TEST_F(Checkpoint, EarlyStoppingRecordRoundTrips) {
  auto t = MakeMlp(Fp32Config());
  ASSERT_NE(t, nullptr);
  CheckpointPosition saved{.epoch = 3, .batch = 1, .best_eval_loss = 0.25, .best_eval_step = 40, .evals_since_best = 2};
  ASSERT_TRUE(t->SaveCheckpoint(Path("es.ckpt"), saved).ok());
  auto pos = t->LoadCheckpointPosition(Path("es.ckpt"));
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(pos->epoch, 3);
  EXPECT_EQ(pos->batch, 1);
  ASSERT_TRUE(pos->best_eval_loss.has_value());
  EXPECT_EQ(*pos->best_eval_loss, 0.25);
  EXPECT_EQ(pos->best_eval_step, 40);
  EXPECT_EQ(pos->evals_since_best, 2);
  ASSERT_TRUE(t->SaveCheckpoint(Path("none.ckpt"), 1, 0).ok());
  EXPECT_FALSE(t->LoadCheckpointPosition(Path("none.ckpt"))->best_eval_loss.has_value());
}

// --- resume --------------------------------------------------------------------------------------

struct ResumeCase {
  const char* name;
  pb::PrecisionPolicy::Preset preset;
  pb::PrecisionPolicy::LowType low;
  pb::LossScalerConfig::Mode scaling;
};

void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.name; }

class CheckpointResume : public Checkpoint, public testing::WithParamInterface<ResumeCase> {};

TEST_P(CheckpointResume, HalfAndHalfEqualsStraightBitForBitWithTheSavedHorizon) {
  constexpr int kPlanned = 8;
  pb::TrainConfig c = Fp32Config();
  c.mutable_precision()->set_preset(GetParam().preset);
  c.mutable_precision()->set_low_dtype(GetParam().low);
  c.mutable_loss_scaler()->set_mode(GetParam().scaling);
  c.mutable_loss_scaler()->set_growth_interval(2);  // the scale moves within the run
  c.mutable_optimizer()->set_lr(0.01f);
  c.mutable_schedule()->set_kind(pb::ScheduleConfig::COSINE);
  c.mutable_schedule()->set_warmup_steps(2);
  c.set_steps(kPlanned);
  auto straight = MakeMlp(c);
  auto first = MakeMlp(c);
  ASSERT_TRUE(straight && first);
  if (GetParam().low != pb::PrecisionPolicy::AUTO) {
    EXPECT_EQ(straight->precision().low, GetParam().low == pb::PrecisionPolicy::BF16 ? DType::kBF16 : DType::kF16);
  }
  std::vector<StepResult> want;
  for (int s = 0; s < kPlanned; ++s) {
    auto r = straight->Step(RandomBatch(s));
    ASSERT_TRUE(r.ok()) << r.status();
    want.push_back(*r);
  }
  for (int s = 0; s < kPlanned / 2; ++s) ASSERT_TRUE(first->Step(RandomBatch(s)).ok());
  ASSERT_TRUE(first->SaveCheckpoint(Path("half.ckpt"), 0, kPlanned / 2).ok());
  first.reset();

  // The resumed run is started as a CLI run would be, with another length (--steps=3) and its own
  // total set before loading: the checkpoint's horizon must win.
  pb::TrainConfig again = c;
  again.set_steps(3);
  auto resumed = MakeMlp(again);
  ASSERT_NE(resumed, nullptr);
  resumed->set_total_steps(3);
  auto pos = resumed->LoadCheckpoint(Path("half.ckpt"));
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(pos->second, kPlanned / 2);
  EXPECT_EQ(resumed->calls(), kPlanned / 2);
  EXPECT_EQ(resumed->total_steps(), kPlanned);
  for (int s = kPlanned / 2; s < kPlanned; ++s) {
    auto r = resumed->Step(RandomBatch(s));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(SameBits(r->lr, want[s].lr)) << "step " << s << ": lr " << r->lr << " vs " << want[s].lr;
    EXPECT_TRUE(SameBits(r->loss, want[s].loss)) << "step " << s << ": loss " << r->loss << " vs " << want[s].loss;
    EXPECT_TRUE(SameBits(r->loss_scale, want[s].loss_scale)) << "step " << s;
    EXPECT_EQ(r->skipped, want[s].skipped) << "step " << s;
  }
  ExpectSameState(*straight->State(), *resumed->State());
  if (GetParam().scaling == pb::LossScalerConfig::DYNAMIC) {
    EXPECT_NE(want.front().loss_scale, want.back().loss_scale) << "the scale never moved: a weak test";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, CheckpointResume,
    testing::Values(ResumeCase{"fp32", pb::PrecisionPolicy::FP32, pb::PrecisionPolicy::AUTO, pb::LossScalerConfig::OFF},
                    ResumeCase{"bf16", pb::PrecisionPolicy::AMP, pb::PrecisionPolicy::BF16, pb::LossScalerConfig::OFF},
                    ResumeCase{"fp16_dynamic", pb::PrecisionPolicy::AMP, pb::PrecisionPolicy::FP16,
                               pb::LossScalerConfig::DYNAMIC}),
    [](const testing::TestParamInfo<ResumeCase>& i) { return std::string(i.param.name); });

// --- kill -9 -------------------------------------------------------------------------------------

TEST_F(Checkpoint, AWriterKilledAtRandomLeavesNoFileOrALoadableOne) {
  // ~1.2 MB per checkpoint (w1 is 384 x 256 floats, with Adam's two moments), so a kill often
  // lands mid-write.
  // On tmpfs where there is one: a save there takes a few ms (no disk behind fsync), so 100 kills
  // fit in a second or two; rename's atomicity does not depend on the file system.
  fs::path dir = dir_;
  if (access("/dev/shm", W_OK) == 0) {
    dir = fs::path("/dev/shm") / ("mt_ckpt_kill_" + std::to_string(getpid()));
    fs::remove_all(dir);
    ASSERT_TRUE(fs::create_directories(dir));
  }
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  pb::TrainConfig c = Fp32Config();
  auto writer = MakeMlp(c, 256, 384);
  auto reader = MakeMlp(c, 256, 384);
  ASSERT_TRUE(writer && reader);
  ASSERT_TRUE(writer->Step(RandomBatch(0, 256)).ok());
  auto written = writer->State();
  ASSERT_TRUE(written.ok());
  const std::string path = (dir / "run.ckpt").string();
  // The reader holds the writer's state, so every complete file, whoever saved it, holds it too;
  // the batch position tells the writer's saves (1) from the reader's (2).
  ASSERT_TRUE(writer->SaveCheckpoint(path).ok());
  ASSERT_TRUE(reader->LoadCheckpoint(path).ok());
  fs::remove(path);
  auto entries = [&] {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    return out;
  };
  // Kills spread over 0 .. 2.5 saves after the fork.
  double save_us = INFINITY;
  for (int i = 0; i < 4; ++i) {
    auto s0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(reader->SaveCheckpoint(path, 0, 2).ok());
    save_us = std::min(save_us, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s0).count());
  }
  fs::remove(path);
  std::mt19937 rng(42);
  // The window grows by 5% after each kill that found nothing written (the forked writer had not
  // reached its first write: a fork can outlast a save on a loaded machine).
  double window_us = 2.5 * save_us;
  int orphans_seen = 0, saved_before_kill = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // At least 100 kills, and more (up to 2000) until some landed mid-write and some after a whole
  // save: on a loaded machine (a sanitizer build beside other jobs in CI) the first 100 once
  // all missed the write.
  int kill_no = 0;
  for (; kill_no < 2000 && (kill_no < 100 || orphans_seen == 0 || saved_before_kill == 0); ++kill_no) {
    SCOPED_TRACE("kill " + std::to_string(kill_no));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the writer: saves until killed; only async-signal-safe exits from here
      for (;;)
        if (!writer->SaveCheckpoint(path, 0, 1).ok()) _exit(3);
    }
    std::uniform_int_distribution<int> wait_us(0, static_cast<int>(window_us));
    std::this_thread::sleep_for(std::chrono::microseconds(wait_us(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself (a failed save?): " << status;
    // LLVM's libomp (the sanitizer build's OpenMP) registers a forked child on its first parallel
    // region in /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>; a kill leaves the file, and one that
    // lands between its creation and its sizing leaves it empty, which kills the next process
    // given this pid with SIGBUS inside libomp (tools/ci/clean_stale_omp_shm.sh). The writer is
    // dead and reaped, so its file is garbage.
    std::error_code ignored;
    fs::remove("/dev/shm/__KMP_REGISTERED_LIB_" + std::to_string(pid) + "_" + std::to_string(getuid()), ignored);

    bool found_any = false;
    for (const std::string& e : entries()) {
      if (e == "run.ckpt") continue;
      ASSERT_EQ(e.rfind(".run.ckpt.tmp." + std::to_string(pid) + ".", 0), 0u) << "unexpected file " << e;
      ++orphans_seen;
      found_any = true;
    }
    if (fs::exists(path)) {
      auto pos = reader->LoadCheckpoint(path);
      ASSERT_TRUE(pos.ok()) << pos.status();
      saved_before_kill += pos->second == 1;
      found_any |= pos->second == 1;
      ExpectSameState(*written, *reader->State());
    }
    if (!found_any) window_us = std::min(window_us * 1.05, 200000.0);
    // The next save, by another process than the dead one, removes its orphan.
    ASSERT_TRUE(reader->SaveCheckpoint(path, 0, 2).ok());
    EXPECT_EQ(entries(), std::vector<std::string>{"run.ckpt"});
    if (kill_no % 10 == 0) fs::remove(path);  // sometimes start over: absent must stay absent
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The test proves something only if kills landed both mid-write and after whole saves.
  EXPECT_GT(orphans_seen, 0);
  EXPECT_GT(saved_before_kill, 0);
  RecordProperty("orphans", orphans_seen);
  RecordProperty("seconds", std::to_string(secs));
  std::printf("kill -9 x%d in %s: %d kills mid-write, %d after a complete save, %.0f us a save, %.1f s\n",
              kill_no, dir.c_str(), orphans_seen, saved_before_kill, save_us, secs);
}

}  // namespace
}  // namespace mixtrain
