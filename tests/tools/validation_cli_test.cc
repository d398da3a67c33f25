// The reproducers of issue 33 through the built `mixtrain` binary, each a clean error (a
// "mixtrain CMD:" line, a non-zero exit, no signal) where the probe saw a destroyed input, an
// abort or a silent accept: outputs naming an input (by path, symbolic or hard link), empty
// names, allocation failure, contradictory flags, run lengths that train nothing, checkpoint
// positions past the data, numbers a float flushes to 0, unknown op names, and invalid models
// in every command (docs/validation.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <random>

#include "onnx/onnx_pb.h"
#include "runtime/npy.h"
#include "runtime/trainer.h"
#include "tests/tools/cli_test_util.h"

// Built with AddressSanitizer (the asan preset): gcc and clang say so differently.
#if defined(__SANITIZE_ADDRESS__)
#define MT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MT_ASAN 1
#endif
#endif

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;
const std::string kMlp = std::string(MT_SOURCE_DIR) + "/tests/data/optim/mlp.onnx";

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

class ValidationCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_validation_cli");
    // 64 examples of the MLP's input (8 features, 4 classes); a copy of the model to overwrite.
    std::mt19937 rng(5);
    std::normal_distribution<float> n(0, 1);
    Tensor x(DType::kF32, {64, 8}), y(DType::kI64, {64});
    for (int64_t i = 0; i < 64; ++i) {
      float* row = x.data_as<float>() + i * 8;
      for (int j = 0; j < 8; ++j) row[j] = n(rng);
      y.data_as<int64_t>()[i] = (row[0] > 0) + 2 * (row[1] > 0);
    }
    ASSERT_TRUE(WriteNpz(Path("data.npz"), {{"x", x}, {"labels", y}}).ok());
    fs::copy_file(kMlp, Path("model.onnx"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  Result Run(const std::string& args) { return cli_test::RunShell("timeout 120 " + kBinary + " " + args, dir_); }
  std::string Train(int steps) const {
    return "train " + Path("model.onnx") + " --data=" + Path("data.npz") + " --batch-size=16 --steps=" +
           std::to_string(steps) + " --no-shuffle";
  }

  // One error line "mixtrain CMD: ..." holding every needle; a non-zero exit, not a signal.
  void ExpectError(const std::string& args, std::initializer_list<std::string> needles) {
    SCOPED_TRACE(args);
    Result r = Run(args);
    EXPECT_TRUE(r.code == 1 || r.code == 2) << "exit " << r.code << ": " << r.err;
    EXPECT_EQ(r.err.rfind("mixtrain ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << r.err;
  }

  // A copy of the MLP with `edit` applied, at `name`.
  std::string Mutated(const std::string& name, const std::function<void(onnx::ModelProto&)>& edit) {
    onnx::ModelProto m;
    EXPECT_TRUE(m.ParseFromString(ReadAll(kMlp)));
    edit(m);
    std::ofstream(Path(name), std::ios::binary) << m.SerializeAsString();
    return Path(name);
  }

  // A checkpoint of the tiny run (`steps` steps), with `edit` applied to its fields and the CRC
  // made valid again.
  std::string CraftedCheckpoint(const std::string& name, int steps, const std::function<void(pb::Checkpoint&)>& edit) {
    EXPECT_EQ(Run(Train(steps) + " --save=" + Path("good.ckpt")).code, 0);
    absl::StatusOr<pb::Checkpoint> ck = DecodeCheckpoint(ReadAll(Path("good.ckpt")), "good.ckpt");
    EXPECT_TRUE(ck.ok()) << ck.status();
    edit(*ck);
    std::ofstream(Path(name), std::ios::binary) << *EncodeCheckpoint(*ck);
    return Path(name);
  }

  fs::path dir_;
};

// --- outputs never destroy inputs ------------------------------------------------------------------

TEST_F(ValidationCli, AnOutputNamingAnInputIsRefusedAndTheInputKept) {
  const std::string data = ReadAll(Path("data.npz")), model = ReadAll(Path("model.onnx"));
  ASSERT_EQ(::symlink(Path("data.npz").c_str(), Path("data_link.npz").c_str()), 0);
  ASSERT_EQ(::link(Path("data.npz").c_str(), Path("data_hard.npz").c_str()), 0);
  fs::create_directories(dir_ / "sub");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --save=" + Path("data.npz"), "--save=" + Path("data.npz") + " and --data=" + Path("data.npz")},
      {" --log-json=" + Path("data.npz"), "--log-json="},
      {" --export=" + Path("data.npz"), "--export="},
      {" --save=" + Path("model.onnx"), "and MODEL.onnx="},
      {" --export=" + Path("sub/../model.onnx"), "and MODEL.onnx="},  // the same file by another path
      {" --save=" + Path("data_hard.npz"), "and --data="},              // a hard link to it
  };
  for (const auto& [flag, needle] : cases) {
    ExpectError(Train(2) + flag, {needle, "are the same file", "would destroy the input"});
    EXPECT_EQ(ReadAll(Path("data.npz")), data);
    EXPECT_EQ(ReadAll(Path("model.onnx")), model);
  }
  // The data given through a symbolic link, the output by its real name.
  ExpectError("train " + Path("model.onnx") + " --data=" + Path("data_link.npz") + " --steps=2 --batch-size=16 --save=" +
                  Path("data.npz"),
              {"are the same file"});
  // Two outputs naming one file.
  ExpectError(Train(2) + " --save=" + Path("a.out") + " --export=" + Path("sub/../a.out"),
              {"--save=", "--export=", "one output would replace the other"});
  EXPECT_EQ(ReadAll(Path("data.npz")), data);
  EXPECT_FALSE(fs::exists(Path("a.out")));
}

TEST_F(ValidationCli, EveryCommandKeepsItsInputs) {
  ASSERT_EQ(Run(Train(2) + " --debug-precision-out=" + Path("stats.json")).code, 0);
  ASSERT_TRUE(WriteNpz(Path("inputs.npz"), {{"x", Tensor(DType::kF32, {2, 8})}}).ok());
  std::ofstream(Path("log.svg")) << "{\"step\": 1, \"loss\": 1.0}\n";
  const std::vector<std::string> cases = {
      "dump " + Path("model.onnx") + " --format=onnx --out=" + Path("model.onnx"),
      "grad " + Path("model.onnx") + " --data=" + Path("data.npz") + " --out=" + Path("data.npz"),
      "run " + Path("model.onnx") + " --inputs=" + Path("inputs.npz") + " --out=" + Path("inputs.npz"),
      "suggest-policy " + Path("stats.json") + " --out=" + Path("stats.json"),
      "plot " + Path("log.svg") + " --out=" + Path("log.svg"),
      "dump " + Path("model.onnx") + " --stats=" + Path("stats.json") + " --out=" + Path("stats.json"),
  };
  for (const std::string& args : cases) {
    std::map<std::string, std::string> before;
    for (const char* f : {"model.onnx", "data.npz", "inputs.npz", "stats.json", "log.svg"}) before[f] = ReadAll(Path(f));
    ExpectError(args, {"are the same file"});
    for (const auto& [f, bytes] : before) EXPECT_EQ(ReadAll(Path(f)), bytes) << f << " changed: " << args;
  }
}

// The one pair allowed: --save continuing the --resume checkpoint (read in full, replaced atomically).
TEST_F(ValidationCli, SaveMayContinueTheResumedCheckpoint) {
  ASSERT_EQ(Run(Train(2) + " --save=" + Path("run.ckpt")).code, 0);
  Result r = Run(Train(4) + " --resume=" + Path("run.ckpt") + " --save=" + Path("run.ckpt"));
  ASSERT_EQ(r.code, 0) << r.err;
  Result again = Run(Train(6) + " --resume=" + Path("run.ckpt"));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("resumed from " + Path("run.ckpt") + " at step 4"), std::string::npos) << again.err;
}

// --- no abort from input -------------------------------------------------------------------------

TEST_F(ValidationCli, EmptyNamesAreRefused) {
  ExpectError(Train(2) + " --labels=", {"flag --labels needs a value"});
  ExpectError(Train(2) + " --data=", {"flag --data needs a value"});
  std::ofstream(Path("empty_labels.textproto")) << "data { labels_key: \"\" }\n";
  ExpectError(Train(2) + " --config=" + Path("empty_labels.textproto"), {"data.labels_key is empty"});
}

// Names the training step gives its own values (found by the `api` fuzz target: labels named
// "loss" aborted in the loss pass; a model value or labels named "lr", "step", ... in the optimizer).
TEST_F(ValidationCli, NamesTheTrainingStepReservesAreRefused) {
  ExpectError(Train(2) + " --labels=loss", {"the labels may not be named 'loss'"});
  ExpectError(Train(2) + " --labels=step", {"the labels may not be named 'step'", "the update counter"});
  const std::string lr = Mutated("lr.onnx", [](onnx::ModelProto& m) {
    const std::string old = m.graph().node(0).output(0);
    for (auto& n : *m.mutable_graph()->mutable_node())
      for (auto& in : *n.mutable_input())
        if (in == old) in = "lr";
    m.mutable_graph()->mutable_node(0)->set_output(0, "lr");
  });
  ExpectError("train " + lr + " --data=" + Path("data.npz") + " --steps=1 --batch-size=16",
              {"the model's value 'lr' has a name the training step gives the learning rate input"});
  Result check = Run("check " + lr);
  EXPECT_EQ(check.code, 1) << check.err;  // does not train, and says why
  EXPECT_NE(check.out.find("the model's value 'lr'"), std::string::npos) << check.out;
}

// A batch too large for the memory the process may use fails with an error line, not
// std::bad_alloc's abort (issue 33: `bench --train --batch-size=3000000` under a memory limit).
// The limit lets bench's random batch (200000 x 784 floats, 627 MB) be made but not copied, the
// copy `bench` makes outside the library; one OpenMP thread and two malloc arenas keep the
// process's own address space small (each thread's arena reserves 64 MB).
TEST_F(ValidationCli, AllocationFailureIsACleanError) {
#ifdef MT_ASAN
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: ulimit -v cannot limit it";
#endif
  Result r = cli_test::RunShell("ulimit -v 1000000; OMP_NUM_THREADS=1 MALLOC_ARENA_MAX=2 timeout 300 " + kBinary +
                                    " bench " + MT_SOURCE_DIR +
                                    "/models/fashion_cnn.onnx --train --batch-size=200000 --warmup=0 --iters=1",
                                dir_);
  EXPECT_EQ(r.code, 1) << r.err;  // before: 134 (SIGABRT)
  EXPECT_NE(r.err.find("mixtrain bench: out of memory"), std::string::npos) << r.err;
}

// --- contradictions and runs that would train nothing --------------------------------------------

TEST_F(ValidationCli, ContradictoryFlagsAreRefused) {
  ExpectError(Train(2) + " --precision=fp32 --dtype=fp16", {"--dtype=fp16 contradicts --precision=fp32"});
  ExpectError(Train(2) + " --precision=fp32 --loss-scale=100", {"--loss-scale=100 contradicts --precision=fp32"});
  ExpectError(Train(2) + " --precision=fp32 --loss-scale=dynamic", {"--loss-scale=dynamic contradicts"});
  std::ofstream(Path("fp32.textproto")) << "precision { preset: FP32 low_dtype: BF16 }\n";
  ExpectError(Train(2) + " --config=" + Path("fp32.textproto"), {"precision.low_dtype (--config) contradicts"});
}

TEST_F(ValidationCli, AccumulationThatReachesNoUpdateIsRefused) {
  ExpectError(Train(2) + " --accumulate=100 --export=" + Path("m.onnx"),
              {"--accumulate=100", "reach no update", "nothing would be trained"});
  EXPECT_FALSE(fs::exists(Path("m.onnx")));
  // Updates happen, the micro-batches after the last are said to be dropped.
  Result r = Run(Train(5) + " --accumulate=2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("the last 1 of 5 steps reach no update"), std::string::npos) << r.err;
}

TEST_F(ValidationCli, CheckpointPositionsAreCheckedAgainstTheData) {
  ExpectError(Train(4) + " --resume=" + CraftedCheckpoint("step.ckpt", 2, [](pb::Checkpoint& ck) {
                ck.set_step(int64_t{1} << 62);
              }),
              {"field step is 4611686018427387904"});
  // Within the bound of any field (10^12), past this run's steps.
  ExpectError(Train(4) + " --resume=" + CraftedCheckpoint("batch.ckpt", 2, [](pb::Checkpoint& ck) {
                ck.set_batch_in_epoch(1000000000);
              }),
              {"(epoch 0, batch 1000000000) is past its step 2"});
  // Within the bounds, past this data: 64 examples in batches of 16 make 4 batches an epoch.
  ExpectError(Train(8) + " --resume=" + CraftedCheckpoint("batch4.ckpt", 5, [](pb::Checkpoint& ck) {
                ck.set_epoch(0);
                ck.set_batch_in_epoch(5);
              }),
              {"stopped at batch 5 of its epoch", "has 4 batches"});
  ExpectError(Train(8) + " --resume=" + CraftedCheckpoint("epoch.ckpt", 2, [](pb::Checkpoint& ck) {
                ck.set_epoch(3);
              }),
              {"(epoch 3, batch 2) is past its step 2"});
  // A finished run resumed would train nothing.
  ExpectError(Train(2) + " --resume=" + CraftedCheckpoint("done.ckpt", 2, [](pb::Checkpoint&) {}),
              {"trained 2 steps already", "nothing is left to train"});
}

// --- numbers and names ----------------------------------------------------------------------------

TEST_F(ValidationCli, FloatsThatWouldBecomeZeroAreRefused) {
  for (const char* flag : {"weight-decay", "momentum", "beta1", "beta2", "clip-grad-norm", "lr"})
    ExpectError(Train(2) + " --" + flag + "=1e-50",
                {std::string("--") + flag + "=1e-50: must be", "this one would become 0"});
  std::ofstream(Path("tiny.textproto")) << "optimizer {\n  weight_decay: 1e-50  # flushes to 0\n}\n";
  ExpectError(Train(2) + " --config=" + Path("tiny.textproto"), {"optimizer.weight_decay=1e-50: must be"});
}

TEST_F(ValidationCli, UnknownOpNamesAreRefusedNamingTheNearest) {
  ExpectError(Train(2) + " --allow=Gemmm", {"precision.allow: 'Gemmm'", "the nearest is 'Gemm'"});
  ExpectError(Train(2) + " --deny=FooOp", {"precision.deny: 'FooOp'", "the nearest is"});
  std::ofstream(Path("policy.textproto")) << "deny: \"Softmx\"\n";
  ExpectError(Train(2) + " --policy=" + Path("policy.textproto"), {"'Softmx'", "the nearest is 'Softmax'"});
  ExpectError("dump " + Path("model.onnx") + " --passes=train --allow=Relux", {"'Relux'", "the nearest is 'Relu'"});
}

// --- invalid models in every command ----------------------------------------------------------------

TEST_F(ValidationCli, InvalidAttributesAreRefusedByEveryCommand) {
  const std::string nan_alpha = Mutated("nan_alpha.onnx", [](onnx::ModelProto& m) {
    for (auto& a : *m.mutable_graph()->mutable_node(0)->mutable_attribute())
      if (a.name() == "alpha") a.set_f(std::numeric_limits<float>::quiet_NaN());
  });
  for (const std::string& cmd : {"check " + nan_alpha, "dump " + nan_alpha + " --passes=train",
                                 "grad " + nan_alpha + " --data=" + Path("data.npz") + " --out=" + Path("g.npz"),
                                 "train " + nan_alpha + " --data=" + Path("data.npz") + " --steps=1 --batch-size=16"})
    ExpectError(cmd, {"nan_alpha.onnx", "attribute 'alpha' is nan", "a finite number"});
  EXPECT_FALSE(fs::exists(Path("g.npz")));
  // check reports what the verifier reports: the node, the attribute and the rule (exit 2: a bad model).
  const std::string axis = Mutated("axis.onnx", [](onnx::ModelProto& m) {
    onnx::NodeProto* sm = m.mutable_graph()->add_node();
    sm->set_op_type("Softmax");
    sm->set_name("sm");
    sm->add_input("logits");
    sm->add_output("probs");
    onnx::AttributeProto* a = sm->add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(int64_t{1} << 40);
    m.mutable_graph()->add_output()->set_name("probs");
  });
  Result r = Run("check " + axis);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("node 'sm' (Softmax) attribute 'axis' holds 1099511627776"), std::string::npos) << r.err;
}

TEST_F(ValidationCli, UnknownOpsAndDomainsAreRefusedByDump) {
  const std::string typo = Mutated("typo.onnx", [](onnx::ModelProto& m) {
    for (auto& n : *m.mutable_graph()->mutable_node())
      if (n.op_type() == "Relu") n.set_op_type("Reluu");
  });
  ExpectError("dump " + typo + " --passes=train", {"(Reluu): no ONNX op", "nearest is 'Relu'"});
  EXPECT_EQ(Run("dump " + typo).code, 0);  // shown as it is without passes
  const std::string domain = Mutated("domain.onnx", [](onnx::ModelProto& m) {
    onnx::OperatorSetIdProto* op = m.add_opset_import();
    op->set_domain("com.example");
    op->set_version(1);
    for (auto& n : *m.mutable_graph()->mutable_node())
      if (n.op_type() == "Relu") n.set_domain("com.example");
  });
  ExpectError("dump " + domain + " --passes=train", {"(com.example.Relu): no op mixtrain runs"});
  // As train refuses it.
  Result t = Run("train " + domain + " --data=" + Path("data.npz") + " --steps=1 --batch-size=16");
  EXPECT_EQ(t.code, 1) << t.err;
}

}  // namespace
}  // namespace mixtrain
