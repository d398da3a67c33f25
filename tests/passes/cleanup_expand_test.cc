// cleanup's Expand folding: an Expand to its input's own shape is the input (readers read it; a
// graph output, as autodiff's grad/<p>, is written by an Identity view instead of a copy); an
// Expand that broadcasts, or whose shapes are not known, stays. The values are the same.
#include <gtest/gtest.h>

#include <cstring>

#include "graph/shape_inference.h"
#include "passes/passes.h"
#include "passes/precision.h"
#include "runtime/session.h"
#include "tests/passes/autodiff_test_util.h"

namespace mixtrain {
namespace {

using gradcheck::CountOps;
using gradcheck::G;

TEST(CleanupExpand, ToItsOwnShapeIsTheInput) {
  G b;
  Graph& g = b.graph();
  Value* x = g.AddValue("x", DType::kF32, Shape::Of({3, 4}));
  g.AddInput(x);
  Value* same = b.Op1("Expand", {b.Op1("Relu", {x}), b.Ints({3, 4})});
  Value* wide = b.Op1("Expand", {same, b.Ints({2, 3, 4})});  // broadcasts: stays
  g.AddOutput(same);                                          // a graph output: an Identity writes it
  g.AddOutput(b.Op1("Sigmoid", {wide}));
  ASSERT_TRUE(InferShapes(g).ok());
  std::unique_ptr<Graph> before = g.Clone();
  PassManager pm;
  pm.Add(MakeCleanupPass());
  ASSERT_TRUE(pm.Run(g).ok());
  EXPECT_EQ(CountOps(g, "Expand"), 1);
  EXPECT_EQ(CountOps(g, "Identity"), 1);
  std::map<std::string, Tensor> feeds{
      {"x", Tensor::FromVector<float>(DType::kF32, {3, 4}, gradcheck::Random(12, 5))}};
  std::vector<std::string> fetch{g.outputs()[0]->name, g.outputs()[1]->name};
  auto a = Session::Create(*before);
  auto c = Session::Create(g);
  ASSERT_TRUE(a.ok() && c.ok());
  auto ya = (*a)->Run(feeds, fetch);
  auto yc = (*c)->Run(feeds, fetch);
  ASSERT_TRUE(ya.ok() && yc.ok()) << ya.status() << yc.status();
  for (size_t i = 0; i < fetch.size(); ++i) {
    ASSERT_EQ((*ya)[i].nbytes(), (*yc)[i].nbytes()) << fetch[i];
    EXPECT_EQ(std::memcmp((*ya)[i].data(), (*yc)[i].data(), (*ya)[i].nbytes()), 0) << fetch[i];
  }
}

}  // namespace
}  // namespace mixtrain
