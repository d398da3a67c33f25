// Helpers shared by the inference-pass tests (fuse_conv, fuse_eltwise, fuse_matmul): counting and
// finding ops, random feeds for a graph's inputs, running a graph, comparing two runs, and running
// one pass and checking that the graph still computes the same.
#pragma once

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/graph.h"
#include "graph/shape_inference.h"
#include "graph/verifier.h"
#include "passes/pass_registry.h"
#include "passes/low_precision.h"
#include "runtime/session.h"

namespace mixtrain::inference_test {

inline int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type() == op;
  return n;
}

inline Node* Find(const Graph& g, const std::string& op) {
  for (const auto& node : g.nodes())
    if (node->op_type() == op) return node.get();
  return nullptr;
}

// Random feeds for every graph input, symbolic dims set to `batch`: floats uniform in [lo, hi)
// (rounded to the input's float type), bools half true, int64 tokens in [0, 256).
inline std::map<std::string, Tensor> Feeds(const Graph& g, int64_t batch, float lo = -1, float hi = 1,
                                           uint32_t seed = 7) {
  std::map<std::string, Tensor> feeds;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (const Value* in : g.inputs()) {
    std::vector<int64_t> dims;
    for (const Dim& d : in->shape.dims) dims.push_back(d.known() ? d.value : batch);
    if (in->dtype == DType::kI64) {
      Tensor t(DType::kI64, dims);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int64_t>()[i] = rng() % 256;
      feeds[in->name] = t;
    } else if (in->dtype == DType::kBool) {
      Tensor t(DType::kBool, dims);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint8_t>()[i] = rng() % 2;
      feeds[in->name] = t;
    } else {
      Tensor f32(DType::kF32, dims);
      for (int64_t i = 0; i < f32.numel(); ++i) f32.data_as<float>()[i] = u(rng);
      feeds[in->name] = ConvertFloat(f32, in->dtype);
    }
  }
  return feeds;
}

inline std::vector<Tensor> RunGraph(const Graph& g, const std::map<std::string, Tensor>& feeds) {
  auto s = Session::Create(g);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  auto out = (*s)->Run(feeds);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Tensor>{};
}

// |got - want| <= tol * (1 + |want|) elementwise, outputs compared in fp32; an infinite or NaN
// expected value must be matched exactly (the same infinity, or NaN).
inline void ExpectClose(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    ASSERT_EQ(got[o].dims(), want[o].dims());
    for (int64_t i = 0; i < want[o].numel(); ++i) {
      double w = want[o].GetDouble(i), v = got[o].GetDouble(i);
      if (!std::isfinite(w)) {
        EXPECT_TRUE(std::isnan(w) ? std::isnan(v) : v == w) << "output " << o << " element " << i;
        continue;
      }
      ASSERT_NEAR(v, w, tol * (1 + std::fabs(w))) << "output " << o << " element " << i;
    }
  }
}

// Runs pass `pass_name` (then cleanup) on a copy of g (g lowered to `dtype` first); checks the copy
// verifies and computes g's outputs within `tol` on Feeds(g, 3, lo, hi, seed). Returns the copy.
inline std::unique_ptr<Graph> PassAndCompare(Graph& g, const char* pass_name, DType dtype = DType::kF32,
                                             double tol = 1e-5, float lo = -1, float hi = 1,
                                             uint32_t seed = 7) {
  EXPECT_TRUE(InferShapes(g).ok());
  if (dtype != DType::kF32) {
    EXPECT_TRUE(LowerFloatModel(g, dtype).ok());
  }
  std::unique_ptr<Graph> out = g.Clone();
  auto pass = CreatePassByName(pass_name);
  EXPECT_TRUE(pass.ok()) << pass.status();
  if (!pass.ok()) return out;
  auto changed = (*pass)->Run(*out);
  EXPECT_TRUE(changed.ok()) << changed.status();
  auto cleanup = CreatePassByName("cleanup");
  EXPECT_TRUE((*cleanup)->Run(*out).ok());
  absl::Status v = Verify(*out);
  EXPECT_TRUE(v.ok()) << v;
  auto feeds = Feeds(g, 3, lo, hi, seed);
  ExpectClose(RunGraph(*out, feeds), RunGraph(g, feeds), tol);
  return out;
}

}  // namespace mixtrain::inference_test
