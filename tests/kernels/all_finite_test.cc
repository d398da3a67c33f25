// ai.mixtrain.AllFinite on the CPU: true over finite values of every magnitude (the largest finite
// value, subnormals, signed zeros) in fp32, bf16 and fp16; false for an inf, -inf or NaN (any
// payload, either sign) wherever it sits: first or last element, inside a tensor, at the edges
// of the parallel blocks, in a tiny tensor among large ones.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace mixtrain {
namespace {

using testing_util::MakeNode;
using testing_util::RunCpuKernel;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Sizes of the inputs: big enough that the kernel splits the whole range across threads, with a
// tiny one among them.
const std::vector<int64_t> kSizes = {70001, 3, 150000};

// Finite bit patterns of `dtype` (as uint32 for fp32, uint16 otherwise): extremes first, then random.
std::vector<uint32_t> FiniteSpecials(DType dtype) {
  if (dtype == DType::kF32)
    return {Bits(std::numeric_limits<float>::max()), Bits(-std::numeric_limits<float>::max()),
            Bits(std::numeric_limits<float>::denorm_min()), 0x80000000u, 0u,
            Bits(std::numeric_limits<float>::min())};
  if (dtype == DType::kBF16) return {0x7f7f, 0xff7f, 0x0001, 0x8000, 0x0000, 0x0080};
  return {0x7bff, 0xfbff, 0x0001, 0x8000, 0x0000, 0x0400};  // fp16
}
std::vector<uint32_t> NonFinite(DType dtype) {
  if (dtype == DType::kF32) return {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u};
  if (dtype == DType::kBF16) return {0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81};
  return {0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01};  // fp16
}

std::vector<Tensor> FiniteInputs(DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  const std::vector<uint32_t> specials = FiniteSpecials(dtype);
  std::vector<Tensor> ins;
  for (int64_t n : kSizes) {
    Tensor t(dtype, {n});
    for (int64_t i = 0; i < n; ++i) {
      const float f = u(rng);
      const bool special = i < static_cast<int64_t>(specials.size());
      if (dtype == DType::kF32)
        t.data_as<uint32_t>()[i] = special ? specials[i] : Bits(f);
      else
        t.data_as<uint16_t>()[i] = special ? static_cast<uint16_t>(specials[i])
                                   : static_cast<uint16_t>(dtype == DType::kBF16 ? FloatToBFloat16(f)
                                                                                 : FloatToHalf(f));
    }
    ins.push_back(std::move(t));
  }
  return ins;
}

void Put(Tensor& t, int64_t i, uint32_t bits) {
  if (t.dtype() == DType::kF32)
    t.data_as<uint32_t>()[i] = bits;
  else
    t.data_as<uint16_t>()[i] = static_cast<uint16_t>(bits);
}

bool RunAllFinite(const std::vector<Tensor>& ins) {
  auto n = MakeNode("AllFinite", ins, 1, {}, "ai.mixtrain");
  auto out = RunCpuKernel(*n.node, ins);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() && (*out)[0].data_as<uint8_t>()[0] != 0;
}

class AllFiniteTest : public ::testing::TestWithParam<DType> {};

TEST_P(AllFiniteTest, FiniteValuesOfEveryMagnitudeAreFinite) {
  EXPECT_TRUE(RunAllFinite(FiniteInputs(GetParam(), 1)));
}

TEST_P(AllFiniteTest, OneNonFiniteElementAnywhereIsFound) {
  const DType dtype = GetParam();
  const int64_t total = kSizes[0] + kSizes[1] + kSizes[2];
  // (input, element): the ends of every input, the middle of the whole range (where two threads'
  // blocks meet), and just either side of it.
  std::vector<std::pair<int, int64_t>> where = {{0, 0}, {0, kSizes[0] - 1}, {1, 0}, {1, 2},
                                                {2, 0}, {2, kSizes[2] - 1}};
  for (int64_t g : {total / 2 - 1, total / 2, total / 2 + 1}) {
    int k = 0;
    while (g >= kSizes[k]) g -= kSizes[k++];
    where.emplace_back(k, g);
  }
  const std::vector<Tensor> clean = FiniteInputs(dtype, 2);
  for (uint32_t bad : NonFinite(dtype)) {
    for (auto [k, i] : where) {
      std::vector<Tensor> ins;
      for (const Tensor& t : clean) ins.push_back(t.Clone());
      Put(ins[k], i, bad);
      EXPECT_FALSE(RunAllFinite(ins)) << "bits 0x" << std::hex << bad << std::dec << " at input " << k
                                      << " element " << i;
    }
  }
}

TEST_P(AllFiniteTest, MixedTypesAndEmptyInputs) {
  const DType dtype = GetParam();
  std::vector<Tensor> ins = FiniteInputs(dtype, 3);
  ins.push_back(Tensor(DType::kF32, {0}));
  std::vector<Tensor> other = FiniteInputs(dtype == DType::kF32 ? DType::kBF16 : DType::kF32, 4);
  ins.push_back(other[1]);
  EXPECT_TRUE(RunAllFinite(ins));
  Put(ins.back(), 1, NonFinite(ins.back().dtype())[2]);
  EXPECT_FALSE(RunAllFinite(ins));
}

INSTANTIATE_TEST_SUITE_P(Types, AllFiniteTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(AllFinite, IntegerInputIsAnError) {
  std::vector<Tensor> ins = {Tensor(DType::kI64, {4})};
  auto n = MakeNode("AllFinite", ins, 1, {}, "ai.mixtrain");
  EXPECT_FALSE(RunCpuKernel(*n.node, ins).ok());
}

}  // namespace
}  // namespace mixtrain
