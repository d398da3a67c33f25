// Data-parallel training (TrainConfig::data_parallel) on MPI. ctest runs this binary as
// `mpiexec -n 2` (CMakeLists.txt); every rank runs every test, and each test also trains a
// one-process reference Trainer in the same process to compare with:
//   - deterministic: bit for bit the weights of one process accumulating the K shards as
//     micro-batches (the same additions in the same order);
//   - MPI_Allreduce: within fp32 reassociation error of one process on the whole batch;
//   - an overflow on one rank skips the step on every rank; mismatched configs or models fail on
//     every rank naming the difference; checkpoints are written once and resume exactly.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mixtrain/communicator.h"
#include "mixtrain/trainer.h"

namespace mixtrain {
namespace {

using Kind = TrainConfig::Optimizer::Kind;

std::shared_ptr<Communicator> World() {
  static std::shared_ptr<Communicator> w = [] {
    auto c = Communicator::MpiWorld();
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }();
  return w;
}

struct Case {
  const char* name;
  const char* model;  // under the source tree
  int64_t classes;
};

// Exported by us (mlp), by tf2onnx from Keras (keras_mlp) and by torch.onnx from
// nn.TransformerEncoder layers (tfm_encoder_dyn, dynamic batch).
const Case kCases[] = {
    {"mlp", "models/mlp.onnx", 10},
    {"keras_mlp", "tests/data/zoo/keras_mlp.onnx", 5},
    {"tfm_encoder_dyn", "tests/data/zoo/tfm_encoder_dyn.onnx", 5},
};

std::string SourcePath(const char* rel) { return std::string(MT_SOURCE_DIR) + "/" + rel; }

// A global batch of `n` examples drawn from `seed`, the same on every rank.
TensorMap GlobalBatch(const Trainer& t, int64_t n, uint64_t seed, int64_t classes) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  TensorMap batch;
  for (const TensorInfo& info : t.BatchInputs()) {
    std::vector<int64_t> shape = info.shape;
    shape[0] = n;
    HostTensor x = *HostTensor::Zeros(info.type, shape);
    const int64_t m = x.num_elements();
    if (info.type == ElementType::kFloat32) {
      for (int64_t i = 0; i < m; ++i) x.data<float>()[i] = normal(rng);
    } else {
      for (int64_t i = 0; i < m; ++i) x.data<int64_t>()[i] = static_cast<int64_t>(rng() % classes);
    }
    batch.emplace(info.name, std::move(x));
  }
  return batch;
}

// Examples [begin, end) of every array.
TensorMap Slice(const TensorMap& batch, int64_t begin, int64_t end) {
  TensorMap out;
  for (const auto& [name, t] : batch) {
    std::vector<int64_t> shape = t.shape();
    const size_t row = t.num_bytes() / static_cast<size_t>(shape[0]);
    shape[0] = end - begin;
    auto part = HostTensor::FromBytes(t.type(), shape, static_cast<const char*>(t.raw_data()) + begin * row,
                                      row * static_cast<size_t>(end - begin));
    EXPECT_TRUE(part.ok()) << part.status();
    out.emplace(name, *part);
  }
  return out;
}

std::map<std::string, HostTensor> Params(const Trainer& t) {
  std::map<std::string, HostTensor> out;
  for (const std::string& p : t.ParameterNames()) out.emplace(p, *t.GetParameter(p));
  return out;
}

TrainConfig Config(bool data_parallel, bool deterministic, Kind kind) {
  TrainConfig c;
  c.precision.preset = TrainConfig::Precision::Preset::kFp32;
  c.optimizer.kind = kind;
  c.optimizer.lr = kind == Kind::kSgd ? 0.05f : 1e-3f;
  c.data_parallel = data_parallel;
  c.deterministic = deterministic;
  return c;
}

std::unique_ptr<Trainer> Make(const std::string& model, const TrainConfig& c) {
  auto t = Trainer::Create(model, c);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// Whether every rank holds the same bytes (an FNV-1a of `bytes` gathered from all).
bool SameOnEveryRank(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : bytes) h = (h ^ ch) * 0x100000001b3ull;
  std::vector<uint64_t> all(World()->size());
  EXPECT_TRUE(World()->AllGather(&h, sizeof h, all.data()).ok());
  return std::all_of(all.begin(), all.end(), [&](uint64_t x) { return x == h; });
}

std::string ParamBytes(const Trainer& t) {
  std::string out;
  for (const auto& [name, p] : Params(t)) out.append(static_cast<const char*>(p.raw_data()), p.num_bytes());
  return out;
}

constexpr int64_t kGlobalBatch = 8;
constexpr int kSteps = 5;

class DataParallel : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ASSERT_NE(World(), nullptr);
    ASSERT_EQ(World()->size(), 2) << "run as mpiexec -n 2 (ctest does)";
  }
  int rank() const { return World()->rank(); }
  int k() const { return World()->size(); }
  int64_t shard() const { return kGlobalBatch / k(); }
};

// deterministic: 0 + g_0 + g_1 in rank order, times 1/K: the additions one process makes
// accumulating the two shards as micro-batches (accumulate = K), so the weights agree bit for bit.
TEST_P(DataParallel, DeterministicEqualsOneProcessAccumulatingTheShards) {
  const Case& c = GetParam();
  const std::string model = SourcePath(c.model);
  auto dp = Make(model, Config(true, true, Kind::kAdam));
  TrainConfig ref_config = Config(false, false, Kind::kAdam);
  ref_config.accumulate = k();
  auto ref = Make(model, ref_config);
  ASSERT_TRUE(dp && ref);
  EXPECT_EQ(dp->rank(), rank());
  EXPECT_EQ(dp->world_size(), k());
  for (int s = 0; s < kSteps; ++s) {
    const TensorMap global = GlobalBatch(*ref, kGlobalBatch, 100 + s, c.classes);
    auto r = dp->Step(Slice(global, rank() * shard(), (rank() + 1) * shard()));
    ASSERT_TRUE(r.ok()) << r.status();
    double ref_loss = 0;
    for (int m = 0; m < k(); ++m) {
      auto rr = ref->Step(Slice(global, m * shard(), (m + 1) * shard()));
      ASSERT_TRUE(rr.ok()) << rr.status();
      ref_loss += *rr->loss / k();
    }
    // The reported loss is the ranks' mean (each rank's shard loss, summed in rank order).
    EXPECT_NEAR(*r->loss, ref_loss, 1e-6 * std::abs(ref_loss)) << "step " << s;
  }
  const auto got = Params(*dp), want = Params(*ref);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    const HostTensor& g = got.at(name);
    ASSERT_EQ(g.num_bytes(), w.num_bytes()) << name;
    EXPECT_EQ(std::memcmp(g.raw_data(), w.raw_data(), w.num_bytes()), 0) << name << " differs in its bits";
  }
  EXPECT_TRUE(SameOnEveryRank(ParamBytes(*dp)));
}

// MPI_Allreduce (any order) against one process on the whole global batch, plain SGD. The
// gradient is the same mean of 8 per-example terms grouped differently: (a+b+c+d)/4 and
// (e+f+g+h)/4 averaged, against (a+...+h)/8, each within a few ulps (fp32 eps = 2^-23 ~ 1.2e-7)
// of the exact mean times the terms' magnitude. Over 5 steps of lr 0.05 the weights may differ
// by at most 5 * 0.05 * |g| * 64 eps; the bound tested is 64 eps * (1 + |w|) per weight, loose
// enough for every reassociation, tight enough that a missing 1/K or a lost shard fails it.
TEST_P(DataParallel, AllreduceWithinReassociationErrorOfOneProcess) {
  const Case& c = GetParam();
  const std::string model = SourcePath(c.model);
  auto dp = Make(model, Config(true, false, Kind::kSgd));
  auto ref = Make(model, Config(false, false, Kind::kSgd));
  ASSERT_TRUE(dp && ref);
  const double eps = std::ldexp(1.0, -23);
  for (int s = 0; s < kSteps; ++s) {
    const TensorMap global = GlobalBatch(*ref, kGlobalBatch, 200 + s, c.classes);
    auto r = dp->Step(Slice(global, rank() * shard(), (rank() + 1) * shard()));
    auto rr = ref->Step(global);
    ASSERT_TRUE(r.ok() && rr.ok()) << r.status() << rr.status();
    EXPECT_NEAR(*r->loss, *rr->loss, 64 * eps * (1 + std::abs(*rr->loss))) << "step " << s;
  }
  double worst = 0;
  std::string where;
  const auto got = Params(*dp), want = Params(*ref);
  for (const auto& [name, w] : want) {
    const std::vector<float> a = got.at(name).ToFloats(), b = w.ToFloats();
    for (size_t i = 0; i < b.size(); ++i) {
      const double rel = std::abs(static_cast<double>(a[i]) - b[i]) / (1 + std::abs(b[i]));
      if (rel > worst) worst = rel, where = name;
    }
  }
  EXPECT_LE(worst, 64 * eps) << "worst at " << where;
  std::printf("[rank %d] %s: largest |w_dp - w_one| / (1 + |w|) after %d steps = %.3g (%.2f eps)\n", rank(), c.name,
              kSteps, worst, worst / eps);
  EXPECT_TRUE(SameOnEveryRank(ParamBytes(*dp)));
}

INSTANTIATE_TEST_SUITE_P(Models, DataParallel, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// An inf in one rank's shard: its gradients overflow, the reduced ones are inf everywhere, the
// ANDed flag says so on every rank, and every rank skips the same step with the same loss scale.
TEST(DataParallelSteps, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  ASSERT_NE(World(), nullptr);
  TrainConfig c = Config(true, false, Kind::kAdam);
  c.precision.preset = TrainConfig::Precision::Preset::kAmp;
  c.precision.low_dtype = TrainConfig::Precision::LowType::kFp16;
  c.loss_scaler.mode = TrainConfig::LossScaler::Mode::kDynamic;
  auto dp = Make(SourcePath("models/mlp.onnx"), c);
  ASSERT_TRUE(dp);
  const int64_t shard = kGlobalBatch / World()->size();
  for (int s = 0; s < 4; ++s) {
    TensorMap global = GlobalBatch(*dp, kGlobalBatch, 300 + s, 10);
    if (s == 2) global.at("input").data<float>()[(World()->size() - 1) * shard * 784] = 1e30f;  // last rank only
    auto r = dp->Step(Slice(global, World()->rank() * shard, (World()->rank() + 1) * shard));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->skipped, s == 2) << "step " << s;
    std::string flags = std::to_string(r->skipped) + "/" + std::to_string(r->loss_scale);
    EXPECT_TRUE(SameOnEveryRank(flags)) << "step " << s << ": " << flags;
  }
  EXPECT_TRUE(SameOnEveryRank(ParamBytes(*dp)));
}

// Every rank must build the same step: a config or model that differs on one rank fails
// Trainer::Create on every rank (no rank waits forever in a collective), naming the difference.
TEST(DataParallelSteps, MismatchedConfigOrModelFailsOnEveryRank) {
  ASSERT_NE(World(), nullptr);
  const bool last = World()->rank() == World()->size() - 1;
  TrainConfig c = Config(true, false, Kind::kAdam);
  if (last) c.optimizer.lr = 0.002f;
  auto t = Trainer::Create(SourcePath("models/mlp.onnx"), c);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("optimizer.lr is 0.001 on rank 0, 0.002 on rank 1"), std::string::npos)
      << t.status();

  const char* model = last ? "tests/data/zoo/keras_mlp.onnx" : "models/mlp.onnx";
  auto m = Trainer::Create(SourcePath(model), Config(true, false, Kind::kAdam));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("rank 1's model differs from rank 0's"), std::string::npos) << m.status();
}

// Rank 0 writes the checkpoint (every rank calls SaveCheckpoint); every rank resumes from it and
// continues bit for bit; a run with another rank count is refused.
TEST(DataParallelSteps, CheckpointWrittenOnceResumesWithTheSameRanks) {
  ASSERT_NE(World(), nullptr);
  const int rank = World()->rank(), k = World()->size();
  const int64_t shard = kGlobalBatch / k;
  int64_t pid0 = getpid();
  std::vector<int64_t> pids(k);
  ASSERT_TRUE(World()->AllGather(&pid0, sizeof pid0, pids.data()).ok());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mt_dp_ckpt_" + std::to_string(pids[0]));
  if (rank == 0) std::filesystem::create_directories(dir);
  const std::string path = (dir / "run.ckpt").string();
  const std::string model = SourcePath("models/mlp.onnx");
  const TrainConfig c = Config(true, true, Kind::kAdam);
  auto step = [&](Trainer& t, int s) {
    const TensorMap global = GlobalBatch(t, kGlobalBatch, 400 + s, 10);
    auto r = t.Step(Slice(global, rank * shard, (rank + 1) * shard));
    ASSERT_TRUE(r.ok()) << r.status();
  };
  auto a = Make(model, c);
  ASSERT_TRUE(a);
  for (int s = 0; s < 3; ++s) step(*a, s);
  ASSERT_TRUE(a->SaveCheckpoint(path, {.epoch = 0, .batch = 3}).ok());
  EXPECT_TRUE(std::filesystem::exists(path));  // written by rank 0 before any rank returned
  for (int s = 3; s < 5; ++s) step(*a, s);

  auto b = Make(model, c);
  ASSERT_TRUE(b);
  auto pos = b->LoadCheckpoint(path);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(pos->batch, 3);
  for (int s = 3; s < 5; ++s) step(*b, s);
  EXPECT_EQ(ParamBytes(*a), ParamBytes(*b));

  auto one = Make(model, Config(false, true, Kind::kAdam));
  ASSERT_TRUE(one);
  auto refused = one->LoadCheckpoint(path);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("2 data-parallel rank(s), this run has 1"), std::string::npos)
      << refused.status();
  ASSERT_TRUE(World()->AllGather(&pid0, sizeof pid0, pids.data()).ok());  // all done reading
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mixtrain
