// Helpers shared by the Trainer tests (optimizer parity, AMP mechanism, smoke runs): the fixtures
// under tests/data/optim/ (written by tests/data/make_optim_fixtures.py), config loading and
// tensor comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "google/protobuf/text_format.h"
#include "graph/tensor.h"
#include "proto/mixtrain_pb.h"
#include "runtime/npy.h"
#include "runtime/trainer.h"

namespace mixtrain::traintest {

inline std::string OptimDir() { return std::string(MT_SOURCE_DIR) + "/tests/data/optim/"; }

// A TrainConfig textproto from tests/data/optim/.
inline pb::TrainConfig LoadConfig(const std::string& name) {
  std::ifstream f(OptimDir() + name);
  EXPECT_TRUE(f.good()) << "cannot open " << OptimDir() + name;
  std::stringstream ss;
  ss << f.rdbuf();
  pb::TrainConfig c;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(ss.str(), &c)) << name;
  return c;
}

inline std::map<std::string, Tensor> LoadNpz(const std::string& name) {
  auto r = ReadNpz(OptimDir() + name);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::map<std::string, Tensor>{};
}

inline std::unique_ptr<Trainer> MakeTrainer(const std::string& model, const pb::TrainConfig& c) {
  auto t = Trainer::Create(OptimDir() + model, c);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// A config for the MLP fixtures: fp32 preset, cross-entropy, batches in order.
inline pb::TrainConfig Fp32Config() {
  pb::TrainConfig c;
  c.set_loss("cross_entropy");
  c.mutable_precision()->set_preset(pb::PrecisionPolicy::FP32);
  c.mutable_data()->set_shuffle(false);
  return c;
}

// Largest |got - want| / (atol + rtol * |want|) over the elements; <= 1 means within tolerance.
inline double WorstRatio(const Tensor& got, const Tensor& want, double rtol, double atol) {
  EXPECT_EQ(got.dims(), want.dims());
  if (got.dims() != want.dims()) return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double a = got.GetDouble(i), b = want.GetDouble(i);
    double r = std::fabs(a - b) / (atol + rtol * std::fabs(b));
    if (!(r <= worst)) worst = std::isnan(r) ? INFINITY : r;
  }
  return worst;
}

// Every state tensor bit-identical (names, dtypes, dims, bytes).
inline void ExpectSameState(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b,
                            const std::string& except = "") {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    if (name == except) continue;
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    EXPECT_TRUE(t.Identical(it->second)) << "state '" << name << "' differs";
  }
}

inline Tensor Slice0(const Tensor& t, int64_t begin, int64_t end) {
  std::vector<int64_t> dims = t.dims();
  int64_t row = t.numel() / dims[0];
  dims[0] = end - begin;
  Tensor out(t.dtype(), dims);
  size_t bytes = static_cast<size_t>(row) * DTypeSize(t.dtype());
  std::memcpy(out.data(), static_cast<const char*>(t.data()) + begin * bytes, (end - begin) * bytes);
  return out;
}

}  // namespace mixtrain::traintest
