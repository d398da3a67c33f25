// Checking before training (docs/validation.md): the numeric rules shared by TrainConfig and the
// command line (NumberRule, ParseNumber, TrainConfig::Validate/SetNumber), CheckTrainingData on
// every kind of bad data, and reads that refuse a FIFO without blocking.
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "mixtrain/mixtrain.h"

namespace {

using mixtrain::CheckTrainingData;
using mixtrain::DataCheckOptions;
using mixtrain::ElementType;
using mixtrain::HostTensor;
using mixtrain::NumberRule;
using mixtrain::TensorMap;
using mixtrain::TrainConfig;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The message of a status that must be an error.
std::string ErrorOf(const absl::Status& s) {
  EXPECT_FALSE(s.ok());
  return std::string(s.message());
}
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& s) {
  return ErrorOf(s.status());
}

TEST(NumberRuleTest, DescribesItself) {
  EXPECT_EQ(TrainConfig::NumberRuleOf("optimizer.lr")->Describe(), "a finite number > 0");
  EXPECT_EQ(TrainConfig::NumberRuleOf("optimizer.beta2")->Describe(), "a finite number in [0, 1)");
  EXPECT_EQ(TrainConfig::NumberRuleOf("optimizer.weight_decay")->Describe(), "a finite number >= 0");
  EXPECT_EQ(TrainConfig::NumberRuleOf("loss_scaler.backoff_factor")->Describe(), "a finite number in (0, 1)");
  EXPECT_EQ(TrainConfig::NumberRuleOf("steps")->Describe(), "an integer in [0, 1000000000000]");
  EXPECT_EQ(TrainConfig::NumberRuleOf("data.batch_size")->Describe(), "an integer in [1, 2147483647]");
  EXPECT_EQ(TrainConfig::NumberRuleOf("optimizer.no_such_field"), nullptr);
  EXPECT_EQ(TrainConfig::NumberRuleOf("model"), nullptr);  // a string
}

TEST(NumberRuleTest, RefusesNonFiniteFractionalAndOutOfRange) {
  const NumberRule& lr = *TrainConfig::NumberRuleOf("optimizer.lr");
  EXPECT_TRUE(lr.Accepts(1e-3));
  for (double bad : {0.0, -1.0, kNaN, kInf, -kInf, 1e39, 1e-50}) EXPECT_FALSE(lr.Accepts(bad)) << bad;
  const NumberRule& steps = *TrainConfig::NumberRuleOf("steps");
  EXPECT_TRUE(steps.Accepts(0));
  EXPECT_TRUE(steps.Accepts(1e12));
  for (double bad : {-1.0, 2.5, kNaN, kInf, 1e12 + 1, 9.3e18, 1e30}) EXPECT_FALSE(steps.Accepts(bad)) << bad;
  const NumberRule& axis = *TrainConfig::NumberRuleOf("class_axis");
  EXPECT_TRUE(axis.Accepts(-1));
  EXPECT_FALSE(axis.Accepts(64));
}

TEST(NumberRuleTest, ParseNumberNamesTheValueAndTheRule) {
  const NumberRule& lr = *TrainConfig::NumberRuleOf("optimizer.lr");
  const NumberRule& steps = *TrainConfig::NumberRuleOf("steps");
  EXPECT_EQ(*mixtrain::ParseNumber("--lr", "0.5", lr), 0.5);
  EXPECT_EQ(*mixtrain::ParseNumber("--steps", "1e3", steps), 1000);  // integral exponent form
  EXPECT_EQ(ErrorOf(mixtrain::ParseNumber("--lr", "-1", lr)), "--lr=-1: must be a finite number > 0");
  EXPECT_EQ(ErrorOf(mixtrain::ParseNumber("--lr", "nan", lr)), "--lr=nan: must be a finite number > 0");
  EXPECT_EQ(ErrorOf(mixtrain::ParseNumber("--lr", "fast", lr)), "--lr=fast: must be a finite number > 0");
  EXPECT_EQ(ErrorOf(mixtrain::ParseNumber("--lr", "1e39", lr)),
            "--lr=1e39: must be a finite number > 0 (a float32: at most 3.40282e+38 in magnitude)");
  EXPECT_EQ(ErrorOf(mixtrain::ParseNumber("--steps", "9.3e18", steps)),
            "--steps=9.3e18: must be an integer in [0, 1000000000000]");
  EXPECT_EQ(ErrorOf(mixtrain::ParseNumber("--steps", "2.5", steps)),
            "--steps=2.5: must be an integer in [0, 1000000000000]");
  // A float32 field gets the value it will hold.
  EXPECT_EQ(*mixtrain::ParseNumber("--lr", "0.1", lr), static_cast<double>(0.1f));
}

// Issue 33: 1e-50 became 0 in --weight-decay and the others (a float's smallest is 1.4e-45).
TEST(NumberRuleTest, RefusesWhatAFloatWouldFlushToZero) {
  for (const char* field : {"optimizer.weight_decay", "optimizer.momentum", "optimizer.beta1", "optimizer.beta2",
                            "optimizer.clip_grad_norm", "schedule.min_lr"}) {
    SCOPED_TRACE(field);
    const NumberRule& rule = *TrainConfig::NumberRuleOf(field);
    EXPECT_TRUE(rule.Accepts(0));
    EXPECT_TRUE(rule.Accepts(1e-40));  // subnormal, not zero
    EXPECT_FALSE(rule.Accepts(1e-50));
    EXPECT_EQ(ErrorOf(mixtrain::ParseNumber("--x", "1e-50", rule)),
              "--x=1e-50: must be " + rule.Describe() +
                  " (a float32 holds no nonzero value below 1.4013e-45 in magnitude: this one would become 0)");
  }
}

// A config file's literal is checked as written: the text parser would round 1e-50 to 0 first.
TEST(TrainConfigValidateTest, ConfigFloatsAreCheckedAsWritten) {
  const std::string e = ErrorOf(TrainConfig::FromTextProto("optimizer { weight_decay: 1e-50 }"));
  EXPECT_EQ(e.rfind("optimizer.weight_decay=1e-50: must be a finite number >= 0", 0), 0u) << e;
  EXPECT_EQ(ErrorOf(TrainConfig::FromTextProto("optimizer {\n\tmomentum:\t-1e-50  # tab and comment\n}"))
                .rfind("optimizer.momentum=-1e-50: must be", 0),
            0u);
  EXPECT_EQ(ErrorOf(TrainConfig::FromTextProto("schedule { gamma: inf }")).rfind("schedule.gamma=inf: must be", 0), 0u);
  absl::StatusOr<TrainConfig> ok = TrainConfig::FromTextProto("optimizer { lr: 0.5f momentum: 0 }\nsteps: 3");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->optimizer.lr, 0.5f);
}

TEST(TrainConfigValidateTest, NamesAndOpListsAreChecked) {
  struct Case {
    void (*set)(TrainConfig&);
    const char* error;
  };
  const Case cases[] = {
      {[](TrainConfig& c) { c.data.labels_key = ""; }, "data.labels_key is empty"},
      {[](TrainConfig& c) { c.loss = "output:"; }, "loss='output:' names no model value"},
      {[](TrainConfig& c) { c.precision.allow = {"Gemmm"}; },
       "precision.allow: 'Gemmm' is not an op type mixtrain knows (the nearest is 'Gemm')"},
      {[](TrainConfig& c) { c.precision.deny = {"softmax"}; }, "precision.deny: 'softmax' is not an op type"},
      {[](TrainConfig& c) { c.precision.infer = {""}; }, "precision.infer holds an empty op type"},
      {[](TrainConfig& c) { c.precision.clear = {"FooOp"}; }, "precision.clear: 'FooOp'"},
  };
  for (const Case& k : cases) {
    TrainConfig c;
    k.set(c);
    const std::string e = ErrorOf(c.Validate());
    EXPECT_EQ(e.rfind(k.error, 0), 0u) << e << "\nwanted: " << k.error;
  }
  // ONNX ops of any opset (Mish: 18, newer than the ONNX library) and mixtrain's own fused ops.
  TrainConfig c;
  c.precision.allow = {"Gemm", "Mish", "MaskedSoftmax", "FusedMatMul"};
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

// An empty labels key through the C++ gradient API is an error, not an abort in the graph.
TEST(TrainConfigValidateTest, EmptyLabelsNameIsAnErrorInComputeGradients) {
  std::vector<float> x(2 * 8, 0.5f);
  TensorMap batch = {{"x", *HostTensor::FromVector<float>({2, 8}, x)},
                     {"labels", *HostTensor::FromVector<int64_t>({2}, {0, 1})}};
  mixtrain::GradientOptions o;
  o.labels = "";
  EXPECT_NE(ErrorOf(mixtrain::ComputeGradients(MT_SOURCE_DIR "/tests/data/optim/mlp.onnx", batch, o))
                .find("the labels have no name"),
            std::string::npos);
}

TEST(TrainConfigValidateTest, NamesTheField) {
  EXPECT_TRUE(TrainConfig{}.Validate().ok());
  struct Case {
    void (*set)(TrainConfig&);
    const char* error;
  };
  const Case cases[] = {
      {[](TrainConfig& c) { c.optimizer.lr = -1; }, "optimizer.lr=-1: must be a finite number > 0"},
      {[](TrainConfig& c) { c.optimizer.lr = NAN; }, "optimizer.lr=nan: must be a finite number > 0"},
      {[](TrainConfig& c) { c.optimizer.beta1 = 1; }, "optimizer.beta1=1: must be a finite number in [0, 1)"},
      {[](TrainConfig& c) { c.optimizer.epsilon = 0.0f; }, "optimizer.epsilon=0: must be a finite number > 0"},
      {[](TrainConfig& c) { c.optimizer.weight_decay = -0.5f; }, "optimizer.weight_decay=-0.5"},
      {[](TrainConfig& c) { c.schedule.step_size = 0; }, "schedule.step_size=0: must be an integer in [1, 2147483647]"},
      {[](TrainConfig& c) { c.loss_scaler.init_scale = INFINITY; }, "loss_scaler.init_scale=inf"},
      {[](TrainConfig& c) { c.loss_scaler.growth_factor = 1; }, "loss_scaler.growth_factor=1: must be a finite number > 1"},
      {[](TrainConfig& c) { c.data.batch_size = 0; }, "data.batch_size=0"},
      {[](TrainConfig& c) { c.steps = -1; }, "steps=-1: must be an integer in [0, 1000000000000]"},
      {[](TrainConfig& c) { c.steps = int64_t{9300000000000000000u >> 1}; }, "steps=4.65e+18"},
      {[](TrainConfig& c) { c.accumulate = 0; }, "accumulate=0"},
      {[](TrainConfig& c) { c.class_axis = 64; }, "class_axis=64: must be an integer in [-64, 63]"},
      {[](TrainConfig& c) { c.optimizer.kind = static_cast<TrainConfig::Optimizer::Kind>(9); },
       "optimizer.kind=9: not one of the enum's 4 values"},
  };
  for (const Case& k : cases) {
    TrainConfig c;
    k.set(c);
    const std::string e = ErrorOf(c.Validate());
    EXPECT_EQ(e.rfind(k.error, 0), 0u) << e << "\nwanted: " << k.error;
  }
  // An unset optional field is not checked; data.seed takes any value.
  TrainConfig c;
  c.data.seed = ~uint64_t{0};
  EXPECT_TRUE(c.Validate().ok());
}

TEST(TrainConfigValidateTest, SetNumberChecksAndSets) {
  TrainConfig c;
  ASSERT_TRUE(c.SetNumber("optimizer.weight_decay", 0.25).ok());
  ASSERT_TRUE(c.optimizer.weight_decay.has_value());
  EXPECT_EQ(*c.optimizer.weight_decay, 0.25f);
  ASSERT_TRUE(c.SetNumber("schedule.warmup_steps", 10).ok());
  EXPECT_EQ(c.schedule.warmup_steps, 10);
  EXPECT_EQ(ErrorOf(c.SetNumber("schedule.warmup_steps", 2.5)),
            "schedule.warmup_steps=2.5: must be an integer in [0, 2147483647]");
  EXPECT_EQ(c.schedule.warmup_steps, 10);  // unchanged
  EXPECT_FALSE(c.SetNumber("optimizer.lrr", 1).ok());
}

TensorMap Data(int64_t n) {
  std::vector<float> x(n * 3, 0.5f);
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = i % 4;
  return {{"x", *HostTensor::FromVector<float>({n, 3}, x)}, {"labels", *HostTensor::FromVector<int64_t>({n}, y)}};
}

DataCheckOptions ModelOptions() {
  DataCheckOptions o;
  o.inputs = {{"x", ElementType::kFloat32, {-1, 3}, {"batch", ""}},
              {"labels", ElementType::kInt64, {-1}, {"batch"}}};
  o.num_classes = 4;
  return o;
}

TEST(CheckTrainingDataTest, GoodDataPasses) {
  EXPECT_TRUE(CheckTrainingData(Data(8), "d.npz", ModelOptions()).ok());
  EXPECT_TRUE(CheckTrainingData(Data(8), "d.npz", {}).ok());  // nothing known of the model
}

TEST(CheckTrainingDataTest, NonFiniteInputsNameTheFirstIndex) {
  TensorMap d = Data(8);
  d["x"].data<float>()[5 * 3 + 2] = NAN;
  d["x"].data<float>()[6 * 3 + 0] = -INFINITY;
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "d.npz", ModelOptions())), "d.npz: array 'x' holds NaN at [5, 2]");
  DataCheckOptions allow = ModelOptions();
  allow.allow_nonfinite_inputs = true;
  EXPECT_TRUE(CheckTrainingData(d, "d.npz", allow).ok());
  d["x"].data<float>()[5 * 3 + 2] = 0;
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "d.npz", ModelOptions())), "d.npz: array 'x' holds -inf at [6, 0]");
}

TEST(CheckTrainingDataTest, NonFiniteInEveryFloatType) {
  // Past the first 4096-element block, so the blocked scan's second block is the one that finds it.
  const int64_t n = 5000;
  for (ElementType type : {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16, ElementType::kFloat64}) {
    SCOPED_TRACE(mixtrain::ElementTypeName(type));
    std::vector<float> v(n, 1.0f);
    v[4321] = INFINITY;
    HostTensor f32 = *HostTensor::FromVector<float>({n}, v);
    HostTensor t;
    if (type == ElementType::kFloat64) {
      std::vector<double> d(v.begin(), v.end());
      t = *HostTensor::FromVector<double>({n}, d);
    } else {
      t = *f32.ConvertedTo(type);
    }
    EXPECT_EQ(ErrorOf(CheckTrainingData({{"x", t}}, "d", {})), "d: array 'x' holds +inf at [4321]");
  }
}

TEST(CheckTrainingDataTest, LabelsOutsideTheClasses) {
  TensorMap d = Data(8);
  d["labels"].data<int64_t>()[6] = 4;
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "d.npz", ModelOptions())),
            "d.npz: array 'labels' holds label 4 at [6], outside the model's 4 classes [0, 4)");
  d["labels"].data<int64_t>()[6] = 0;
  d["labels"].data<int64_t>()[3] = -100;
  EXPECT_NE(ErrorOf(CheckTrainingData(d, "d.npz", ModelOptions())).find("label -100 at [3]"), std::string::npos);
  DataCheckOptions ignore = ModelOptions();
  ignore.ignore_index = -100;  // an explicit ignore index passes
  EXPECT_TRUE(CheckTrainingData(d, "d.npz", ignore).ok());
  // Non-finite labels are refused even when inputs may be non-finite.
  TensorMap f = {{"y", *HostTensor::FromVector<float>({2}, {1.0f, NAN})}};
  DataCheckOptions allow;
  allow.labels_key = "y";
  allow.allow_nonfinite_inputs = true;
  EXPECT_EQ(ErrorOf(CheckTrainingData(f, "f", allow)), "f: array 'y' holds NaN at [1]");
}

TEST(CheckTrainingDataTest, ShapesTypesAndMissingArrays) {
  EXPECT_EQ(ErrorOf(CheckTrainingData({}, "e.npz", {})), "e.npz: holds no arrays");
  TensorMap d = Data(8);
  d["labels"] = *HostTensor::Zeros(ElementType::kInt64, {7});
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "d.npz", {})), "d.npz: array 'x' has 8 examples, array 'labels' has 7");
  d = Data(8);
  d["x"] = *HostTensor::Zeros(ElementType::kFloat32, {8, 0});
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "d.npz", {})), "d.npz: array 'x' is empty (shape [8, 0])");
  d = Data(8);
  d["labels"] = *HostTensor::Zeros(ElementType::kInt32, {8});
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "d.npz", ModelOptions())),
            "d.npz: array 'labels' is i32, the model's input 'labels' is i64");
  d = Data(8);
  d["x"] = *HostTensor::Zeros(ElementType::kFloat32, {8, 4});
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "d.npz", ModelOptions())),
            "d.npz: array 'x' has shape [8, 4], the model's input 'x' is [batch, 3] (the first dimension counts "
            "examples)");
  d = Data(8);
  d.erase("x");
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "d.npz", ModelOptions())),
            "d.npz: no array 'x' for the model's input 'x' (arrays: labels)");
  // One batch (mixtrain grad): arrays of different lengths are fine, an empty one is not.
  DataCheckOptions batch;
  batch.shared_example_dim = false;
  d = Data(8);
  d["mask"] = *HostTensor::Zeros(ElementType::kBool, {3, 3});
  EXPECT_TRUE(CheckTrainingData(d, "b.npz", batch).ok());
  d["mask"] = *HostTensor::Zeros(ElementType::kBool, {0});
  EXPECT_EQ(ErrorOf(CheckTrainingData(d, "b.npz", batch)), "b.npz: array 'mask' is empty (shape [0])");
}

TEST(CheckTrainingDataTest, ReadNpzRefusesAFifoWithoutBlocking) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / "validation_test_fifo";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fifo = (dir / "data.npz").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = mixtrain::ReadNpz(fifo);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(ErrorOf(r), fifo + ": is a FIFO, not a regular file");
  EXPECT_EQ(ErrorOf(mixtrain::ReadNpz(dir.string())), dir.string() + ": is a directory, not a regular file");
  EXPECT_NE(ErrorOf(mixtrain::LoadFashionMnist(dir.string())).find("train-images"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
