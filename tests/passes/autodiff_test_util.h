// Finite-difference gradient checks for the autodiff tests. A check builds a small graph whose
// float parameters are initializers, appends loss = sum_i sum(Y_i * R_i) (R_i fixed random
// weights, so every output element matters differently), runs the autodiff pass, and compares each
// "grad/<param>" with a central difference of the loss.
//
// Why fp32 and not fp64: our kernels are fp32/fp16/bf16 only (as the runtime's). In fp32 a central
// difference with step h = 1e-2 on O(1) inputs has truncation error O(h^2 f''') ~ 1e-4 and
// rounding error ~ 1e-7 * |loss| / h ~ 1e-5, so a tolerance of 5e-3 of the gradient's scale
// separates numerical noise from a wrong rule (a wrong rule is off by O(1)). Inputs are drawn away
// from kinks (|x| >= 0.1 for Relu/Abs, distinct values for Max/MaxPool), so h never crosses one.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/graph.h"
#include "graph/onnx_export.h"
#include "graph/shape_inference.h"
#include "graph/verifier.h"
#include "passes/parameters.h"
#include "passes/passes.h"
#include "runtime/session.h"

namespace mixtrain::gradcheck {

// Random values: uniform in [lo, hi], or (away_from_zero) magnitude in [0.1, 1] with random sign.
inline std::vector<float> Random(int64_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}
inline std::vector<float> AwayFromZero(int64_t n, uint32_t seed) {
  std::vector<float> v = Random(n, seed, 0.1f, 1.0f);
  std::vector<float> s = Random(n, seed + 7, -1, 1);
  for (int64_t i = 0; i < n; ++i) v[i] = s[i] < 0 ? -v[i] : v[i];
  return v;
}
// A shuffled ramp: all values distinct, 0.05 apart (for max-like ops).
inline std::vector<float> Distinct(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = -1.0f + 0.05f * static_cast<float>(i);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

// How many nodes of op type `op` the graph has.
inline int CountOps(const Graph& g, const std::string& op) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(),
                                        [&](const auto& n) { return n->op_type() == op; }));
}

// Builds test graphs tersely.
class G {
 public:
  explicit G(int64_t opset = 17) { g_.opset_imports[""] = opset; }
  Graph& graph() { return g_; }
  Value* Param(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    return g_.AddInitializer(name, Tensor::FromVector<float>(DType::kF32, std::move(dims), v));
  }
  Value* Param(const std::string& name, std::vector<int64_t> dims, uint32_t seed) {
    return Param(name, dims, Random(NumElements(dims), seed));
  }
  // Float constants are named "c_*", which the checks freeze.
  Value* ConstF(std::vector<int64_t> dims, std::vector<float> v) {
    return Param(g_.UniqueName("c_f"), std::move(dims), std::move(v));
  }
  Value* Ints(std::vector<int64_t> v) {
    return g_.AddInitializer(g_.UniqueName("c_i"),
                             Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(v.size())}, v));
  }
  Value* IntsShaped(std::vector<int64_t> dims, std::vector<int64_t> v) {
    return g_.AddInitializer(g_.UniqueName("c_i"), Tensor::FromVector<int64_t>(DType::kI64, std::move(dims), v));
  }
  Value* Bools(std::vector<int64_t> dims, std::vector<uint8_t> v) {
    return g_.AddInitializer(g_.UniqueName("c_b"), Tensor::FromVector<uint8_t>(DType::kBool, std::move(dims), v));
  }
  std::vector<Value*> Op(const std::string& op, std::vector<Value*> ins, std::vector<Attribute> attrs = {},
                         int outputs = 1) {
    Node* n = g_.AddNode(op, ins, outputs, g_.UniqueName(op));
    for (Attribute& a : attrs) n->SetAttr(std::move(a));
    return std::vector<Value*>(n->outputs().begin(), n->outputs().end());
  }
  Value* Op1(const std::string& op, std::vector<Value*> ins, std::vector<Attribute> attrs = {}) {
    return Op(op, std::move(ins), std::move(attrs))[0];
  }
  // An ai.mixtrain op with one output (the graph imports the domain).
  Value* Mixtrain1(const std::string& op, std::vector<Value*> ins, std::vector<Attribute> attrs = {}) {
    g_.opset_imports[kMixtrainDomain] = 1;
    Node* n = g_.AddNode(op, ins, 1, g_.UniqueName(op), kMixtrainDomain);
    for (Attribute& a : attrs) n->SetAttr(std::move(a));
    return n->output(0);
  }

 private:
  Graph g_;
};

// Appends loss = sum_i sum(outs_i * R_i) as "loss"; runs shape inference first.
inline void AppendWeightedSumLoss(G& b, const std::vector<Value*>& outs) {
  Graph& g = b.graph();
  ASSERT_TRUE(InferShapes(g).ok()) << InferShapes(g).message();
  Value* total = nullptr;
  uint32_t seed = 1000;
  for (Value* y : outs) {
    ASSERT_TRUE(y->shape.fully_known()) << y->name << " has shape " << y->shape.ToString();
    std::vector<int64_t> dims = y->shape.sizes();
    Value* r = b.ConstF(dims, Random(NumElements(dims), seed++));
    Value* s = b.Op1("ReduceSum", {b.Op1("Mul", {y, r})}, {Attribute::Int("keepdims", 0)});
    total = total ? b.Op1("Add", {total, s}) : s;
  }
  Value* loss = g.AddValue("loss", DType::kF32, Shape(std::vector<Dim>{}));
  g.AddNode("Identity", {total}, {loss}, "loss_identity");
  g.AddOutput(loss);
  ASSERT_TRUE(InferShapes(g).ok());
}

// Runs autodiff on `g` (which has its "loss" output) and checks every parameter's gradient
// against central differences, feeding `feeds` to its other inputs. Parameters (float
// initializers not named c_*) become graph inputs for the run, so the planner never folds them.
inline void CheckGraph(Graph& g, std::map<std::string, Tensor> feeds, float h, float tol) {
  std::vector<std::string> params;
  for (Value* v : g.initializers())
    if (v->dtype == DType::kF32 && v->name.rfind("c_", 0) != 0 && !v->metadata.contains(kFoldedMetadata))
      params.push_back(v->name);
  AutodiffOptions opt;
  opt.freeze = "c_.*";  // and the passes' own constants, which SelectTrainable leaves out
  auto st = MakeAutodiffPass(opt)->Run(g);
  ASSERT_TRUE(st.ok()) << st.status().message();
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).message();
  for (const std::string& p : params) {
    Value* v = g.FindValue(p);
    feeds[p] = *v->initializer;
    g.RemoveInitializer(v);
    g.AddInput(v);
  }
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status().message();
  std::vector<std::string> fetch{"loss"};
  for (const std::string& p : params) fetch.push_back(std::string(kGradPrefix) + p);
  auto res = (*session)->Run(feeds, fetch);
  ASSERT_TRUE(res.ok()) << res.status().message();
  auto loss_at = [&](const std::map<std::string, Tensor>& f) -> double {
    auto r = (*session)->Run(f, {"loss"});
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? (*r)[0].GetDouble(0) : NAN;
  };
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& grad = (*res)[k + 1];
    const Tensor base = feeds[params[k]];
    ASSERT_EQ(grad.numel(), base.numel()) << params[k];
    std::vector<double> num(base.numel());
    double scale = 1.0;
    for (int64_t i = 0; i < base.numel(); ++i) {
      std::map<std::string, Tensor> f = feeds;
      Tensor t = base.Clone();
      t.data_as<float>()[i] = base.data_as<float>()[i] + h;
      f[params[k]] = t;
      double up = loss_at(f);
      t.data_as<float>()[i] = base.data_as<float>()[i] - h;
      double down = loss_at(f);
      num[i] = (up - down) / (2.0 * h);
      scale = std::max(scale, std::abs(num[i]));
    }
    for (int64_t i = 0; i < base.numel(); ++i)
      EXPECT_NEAR(grad.GetDouble(i), num[i], tol * scale)
          << "d loss / d " << params[k] << "[" << i << "]";
  }
}

// The graph built by `build` (which returns the outputs) with the weighted-sum loss, checked by
// CheckGraph.
inline void Check(const std::function<std::vector<Value*>(G&)>& build, int64_t opset = 17,
                  float h = 1e-2f, float tol = 5e-3f) {
  G b(opset);
  std::vector<Value*> outs = build(b);
  AppendWeightedSumLoss(b, outs);
  if (::testing::Test::HasFatalFailure()) return;
  CheckGraph(b.graph(), {}, h, tol);
}

}  // namespace mixtrain::gradcheck
