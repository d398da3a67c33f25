// Session: symbol binding and its errors, the plan cache, fetches, persistent initializers and
// state updates, plan invalidation when a folded initializer changes, and profiling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"

#include "runtime/session.h"

namespace mixtrain {
namespace {

Tensor F32(std::vector<int64_t> dims, std::vector<float> v) {
  return Tensor::FromVector<float>(DType::kF32, std::move(dims), v);
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}

// y = x + b with x: [N, 3], b: [3] an initializer.
std::unique_ptr<Graph> AddBias() {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), 3}));
  g->AddInput(x);
  Value* b = g->AddInitializer("b", F32({3}, {10, 20, 30}));
  Value* y = g->AddNode("Add", {x, b}, 1, "add")->output(0);
  g->AddOutput(y);
  return g;
}

TEST(Session, BindsSymbolsAndCachesPlansPerShape) {
  auto s = Session::Create(*AddBias());
  ASSERT_TRUE(s.ok()) << s.status();
  auto out = (*s)->Run({{"x", F32({1, 3}, {1, 2, 3})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{11, 22, 33}));
  out = (*s)->Run({{"x", F32({2, 3}, {1, 2, 3, 4, 5, 6})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ((*s)->num_cached_plans(), 2u);
  out = (*s)->Run({{"x", F32({1, 3}, {0, 0, 0})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{10, 20, 30}));
  EXPECT_EQ((*s)->num_cached_plans(), 2u);
}

TEST(Session, FeedErrorsNameTheInput) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({Dim::Symbol("N"), 3}));
  Value* z = g->AddValue("z", DType::kF32, Shape({Dim::Symbol("N"), 3}));
  g->AddInput(x);
  g->AddInput(z);
  g->AddOutput(g->AddNode("Add", {x, z}, 1, "add")->output(0));
  auto s = Session::Create(*g);
  ASSERT_TRUE(s.ok()) << s.status();
  auto expect_error = [&](const std::map<std::string, Tensor>& feeds, const std::string& needle) {
    auto out = (*s)->Run(feeds);
    ASSERT_FALSE(out.ok()) << "expected an error mentioning " << needle;
    EXPECT_NE(std::string(out.status().message()).find(needle), std::string::npos) << out.status();
  };
  Tensor ok = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_error({{"x", ok}}, "'z' is not fed");
  expect_error({{"x", ok}, {"z", F32({3, 3}, std::vector<float>(9))}}, "binds 'N' to 2");
  expect_error({{"x", ok}, {"z", F32({2, 4}, std::vector<float>(8))}}, "input 'z': dim 1 is 4");
  expect_error({{"x", ok}, {"z", F32({6}, std::vector<float>(6))}}, "input 'z': fed rank 1");
  expect_error({{"x", ok}, {"z", Tensor(DType::kI64, {2, 3})}}, "input 'z': fed i64");
  expect_error({{"x", ok}, {"z", ok}, {"w", ok}}, "feed 'w'");
  EXPECT_TRUE((*s)->Run({{"x", ok}, {"z", ok}}).ok());
}

TEST(Session, FetchesIntermediateValues) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({3}));
  g->AddInput(x);
  Value* r = g->AddNode("Relu", {x}, 1, "relu")->output(0);
  g->AddOutput(g->AddNode("Neg", {r}, 1, "neg")->output(0));
  auto s = Session::Create(*g);
  ASSERT_TRUE(s.ok()) << s.status();
  auto out = (*s)->Run({{"x", F32({3}, {-1, 2, -3})}}, {r->name, g->outputs()[0]->name});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{0, 2, 0}));  // kept although Neg could reuse it
  EXPECT_EQ(Values((*out)[1]), (std::vector<float>{0, -2, 0}));
  EXPECT_FALSE((*s)->Run({{"x", F32({3}, {1, 2, 3})}}, {"nope"}).ok());
}

TEST(Session, StateUpdatesAccumulateAcrossRuns) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({2}));
  g->AddInput(x);
  Value* w = g->AddInitializer("w", F32({2}, {0, 0}));
  Value* w_new = g->AddNode("Add", {w, x}, 1, "acc")->output(0);
  g->AddOutput(w_new);
  SessionOptions o;
  o.state_updates[w_new->name] = "w";
  auto s = Session::Create(*g, o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int i = 1; i <= 3; ++i) {
    auto out = (*s)->Run({{"x", F32({2}, {1, 10})}});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<float>{1.f * i, 10.f * i}));
  }
  auto w_now = (*s)->GetInitializer("w");
  ASSERT_TRUE(w_now.ok()) << w_now.status();
  EXPECT_EQ(Values(*w_now), (std::vector<float>{3, 30}));
  // The graph's own tensor is untouched: initializers are copied into the session.
  EXPECT_EQ(Values(*w->initializer), (std::vector<float>{0, 0}));
}

TEST(Session, StateUpdateWrittenInPlaceWhenTheOldValueIsDead) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({2}));
  g->AddInput(x);
  Value* w = g->AddInitializer("w", F32({2}, {5, 5}));
  Value* y = g->AddNode("Mul", {x, w}, 1, "use_w")->output(0);
  Value* w_new = g->AddNode("Relu", {x}, 1, "new_w")->output(0);  // runs after w's last read
  g->AddOutput(y);
  SessionOptions o;
  o.state_updates[w_new->name] = "w";
  auto s = Session::Create(*g, o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto out = (*s)->Run({{"x", F32({2}, {-1, 2})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{-5, 10}));
  EXPECT_EQ((*s)->last_plan_stats()->inplace_state_updates, 1);
  EXPECT_EQ(Values(*(*s)->GetInitializer("w")), (std::vector<float>{0, 2}));
  out = (*s)->Run({{"x", F32({2}, {3, 3})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{0, 6}));
}

// An optimizer is its parameter's and moments' last reader: with kOpIndexAligned it writes the
// new values straight into them (no copy in the kernel, none after the step), and the update is
// the same as through copies.
TEST(Session, OptimizerUpdatesItsStateInPlace) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  g->opset_imports["ai.mixtrain"] = 1;
  Value* grad = g->AddValue("g", DType::kF32, Shape({2}));
  g->AddInput(grad);
  Value* lr = g->AddInitializer("lr", F32({}, {0.1f}));
  Value* step = g->AddInitializer("step", Tensor::FromVector<int64_t>(DType::kI64, {}, {0}));
  Value* skip = g->AddInitializer("skip", Tensor::FromVector<uint8_t>(DType::kBool, {}, {0}));
  Value* w = g->AddInitializer("w", F32({2}, {1, -1}));
  Value* m = g->AddInitializer("m", F32({2}, {0, 0}));
  Value* v = g->AddInitializer("v", F32({2}, {0, 0}));
  Value* y = g->AddNode("Mul", {grad, w}, 1, "use_w")->output(0);  // w read before the update
  Node* adam = g->AddNode("Adam", {lr, step, skip, w, grad, m, v}, 3, "adam", "ai.mixtrain");
  g->AddOutput(y);
  SessionOptions o;
  o.state_updates[adam->output(0)->name] = "w";
  o.state_updates[adam->output(1)->name] = "m";
  o.state_updates[adam->output(2)->name] = "v";
  auto s = Session::Create(*g, o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto out = (*s)->Run({{"g", F32({2}, {0.5f, -2.0f})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*s)->last_plan_stats()->inplace_state_updates, 3);
  // First Adam step: m/(sqrt(v)+eps) with bias corrections is sign(g), so w moves by lr.
  std::vector<float> w1 = Values(*(*s)->GetInitializer("w"));
  EXPECT_NEAR(w1[0], 0.9f, 1e-6);
  EXPECT_NEAR(w1[1], -0.9f, 1e-6);
  EXPECT_NEAR(Values(*(*s)->GetInitializer("m"))[0], 0.05f, 1e-7);
  EXPECT_NEAR(Values(*(*s)->GetInitializer("v"))[1], 0.004f, 1e-7);  // (1 - 0.999f) * 4 in fp32
}

// The ai.mixtrain optimizers are multi-tensor: one node over every parameter (the threads split
// the concatenation of all parameters, so a block boundary falls inside a tensor here) updates
// each exactly as a node per parameter does, bit for bit.
TEST(Session, MultiTensorOptimizerMatchesOneNodePerParameter) {
  struct Case {
    const char* op;
    int lead;         // scalars before the groups
    int state;        // state tensors per parameter
    std::vector<Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {"Adam", 3, 2, {Attribute::Float("weight_decay", 0.01f), Attribute::Int("decoupled", 1)}},
      {"SGD", 2, 1, {Attribute::Float("momentum", 0.9f), Attribute::Int("nesterov", 1)}},
      {"Adagrad", 3, 1, {Attribute::Float("weight_decay", 0.1f)}},
  };
  const std::vector<int64_t> sizes = {40000, 3, 70001};
  for (const Case& c : cases) {
    std::map<std::string, std::vector<float>> results[2], before;
    for (int grouped = 0; grouped < 2; ++grouped) {
      auto g = std::make_unique<Graph>();
      g->opset_imports[""] = 17;
      g->opset_imports["ai.mixtrain"] = 1;
      Value* lr = g->AddInitializer("lr", F32({}, {0.01f}));
      Value* step = g->AddInitializer("step", Tensor::FromVector<int64_t>(DType::kI64, {}, {4}));
      Value* skip = g->AddInitializer("skip", Tensor::FromVector<uint8_t>(DType::kBool, {}, {0}));
      std::vector<Value*> lead = {lr, step, skip};
      if (c.lead == 2) lead = {lr, skip};
      std::vector<Value*> ins = lead;
      std::vector<std::vector<Value*>> groups, states;
      for (size_t p = 0; p < sizes.size(); ++p) {
        auto fill = [&](int salt) {
          std::vector<float> v(sizes[p]);
          for (int64_t i = 0; i < sizes[p]; ++i)
            v[i] = std::sin(0.37f * static_cast<float>(i + 1) * static_cast<float>(salt + 3 * p + 1));
          return v;
        };
        std::vector<Value*> group = {g->AddInitializer(absl::StrCat("x", p), F32({sizes[p]}, fill(0))),
                                     g->AddInitializer(absl::StrCat("g", p), F32({sizes[p]}, fill(1)))};
        std::vector<Value*> state = {group[0]};
        for (int k = 0; k < c.state; ++k) {
          std::vector<float> v = fill(2 + k);
          for (float& e : v) e = std::abs(e);  // second moments and sums are non-negative
          state.push_back(g->AddInitializer(absl::StrCat("s", p, "_", k), F32({sizes[p]}, v)));
          group.push_back(state.back());
        }
        groups.push_back(group);
        states.push_back(state);
      }
      SessionOptions o;
      auto add = [&](const std::vector<Value*>& node_ins, const std::vector<Value*>& node_states, const std::string& name) {
        Node* n = g->AddNode(c.op, node_ins, static_cast<int>(node_states.size()), name, "ai.mixtrain");
        for (const Attribute& a : c.attrs) n->SetAttr(a);
        for (size_t i = 0; i < node_states.size(); ++i) {
          o.state_updates[n->output(i)->name] = node_states[i]->name;
          g->AddOutput(n->output(i));
        }
      };
      if (grouped) {
        std::vector<Value*> all_states;
        for (size_t p = 0; p < groups.size(); ++p) {
          ins.insert(ins.end(), groups[p].begin(), groups[p].end());
          all_states.insert(all_states.end(), states[p].begin(), states[p].end());
        }
        add(ins, all_states, "all");
      } else {
        for (size_t p = 0; p < groups.size(); ++p) {
          std::vector<Value*> one = lead;
          one.insert(one.end(), groups[p].begin(), groups[p].end());
          add(one, states[p], absl::StrCat("param", p));
        }
      }
      auto s = Session::Create(*g, o);
      ASSERT_TRUE(s.ok()) << c.op << ": " << s.status();
      for (const auto& state : states)
        for (const Value* v : state) before[v->name] = Values(*(*s)->GetInitializer(v->name));
      ASSERT_TRUE((*s)->Run({}).ok()) << c.op;
      for (const auto& state : states)
        for (const Value* v : state) results[grouped][v->name] = Values(*(*s)->GetInitializer(v->name));
    }
    for (const auto& [name, values] : results[0]) {
      ASSERT_EQ(results[1][name].size(), values.size()) << c.op << " " << name;
      EXPECT_EQ(std::memcmp(results[1][name].data(), values.data(), values.size() * sizeof(float)), 0)
          << c.op << " " << name;
      EXPECT_NE(values, before[name]) << c.op << " " << name << " was not updated";
    }
  }
}

TEST(Session, SetInitializerReachesFoldedComputations) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({2}));
  g->AddInput(x);
  Value* b = g->AddInitializer("b", F32({2}, {2, 3}));
  Value* bb = g->AddNode("Mul", {b, b}, 1, "square")->output(0);  // folded at plan time
  g->AddOutput(g->AddNode("Add", {x, bb}, 1, "add")->output(0));
  auto s = Session::Create(*g);
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor x0 = F32({2}, {0, 0});
  auto out = (*s)->Run({{"x", x0}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{4, 9}));
  EXPECT_EQ((*s)->last_plan_stats()->folded_nodes, 1);
  ASSERT_TRUE((*s)->SetInitializer("b", F32({2}, {5, 6})).ok());
  out = (*s)->Run({{"x", x0}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{25, 36}));
  EXPECT_FALSE((*s)->SetInitializer("b", F32({3}, {1, 2, 3})).ok());
  EXPECT_FALSE((*s)->SetInitializer("nope", x0).ok());
}

TEST(Session, ShapeFromFedValuesReplansPerContents) {
  auto g = std::make_unique<Graph>();
  g->opset_imports[""] = 17;
  Value* x = g->AddValue("x", DType::kF32, Shape({6}));
  Value* shape = g->AddValue("shape", DType::kI64, Shape({2}));
  g->AddInput(x);
  g->AddInput(shape);
  g->AddOutput(g->AddNode("Reshape", {x, shape}, 1, "reshape")->output(0));
  auto s = Session::Create(*g);
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor x0 = F32({6}, {1, 2, 3, 4, 5, 6});
  auto out = (*s)->Run({{"x", x0}, {"shape", Tensor::FromVector<int64_t>(DType::kI64, {2}, {2, 3})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dims(), (std::vector<int64_t>{2, 3}));
  out = (*s)->Run({{"x", x0}, {"shape", Tensor::FromVector<int64_t>(DType::kI64, {2}, {3, 2})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values((*out)[0]), Values(x0));
}

TEST(Session, ProfilesKernelTimeByOpType) {
  auto s = Session::Create(*AddBias());
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->set_profiling(true);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*s)->Run({{"x", F32({1, 3}, {1, 2, 3})}}).ok());
  std::vector<OpProfile> p = (*s)->Profile();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].op_type, "Add");
  EXPECT_EQ(p[0].calls, 2);
  (*s)->ResetProfile();
  EXPECT_TRUE((*s)->Profile().empty());
}

}  // namespace
}  // namespace mixtrain
