// No kernel is selected for an ISA that the CPU, or the cap (MIXTRAIN_MAX_ISA, oneDNN's
// DNNL_MAX_CPU_ISA), rules out. CI runs the suite natively and capped at AVX2, so this checks
// both: the features our dispatch uses are a subset of what the CPU has and the cap allows; our
// AVX-512 row loops are enabled exactly when allowed; and every oneDNN primitive that a bf16
// and an fp16 training step of a conv net runs (read back from oneDNN's verbose log) is an
// implementation for an allowed ISA.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/simd_target.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "runtime/trainer.h"

namespace mixtrain {
namespace {

TEST(IsaDispatch, UsableFeaturesAreDetectedAndAllowedByTheCap) {
  const CpuFeatures& have = GetDetectedCpuFeatures();
  const CpuFeatures& use = GetCpuFeatures();
  EXPECT_TRUE(CpuCapError().empty()) << CpuCapError();
  EXPECT_TRUE(use.avx2) << "the build needs AVX2/FMA/F16C";
  EXPECT_LE(use.avx512_core, have.avx512_core);
  EXPECT_LE(use.avx512_bf16, have.avx512_bf16);
  EXPECT_LE(use.amx_bf16, have.amx_bf16);
  const std::string cap = CpuIsaCap();
  if (cap == "avx2") EXPECT_FALSE(use.avx512_core || use.avx512_bf16 || use.amx_bf16);
  if (cap == "avx512_core") EXPECT_FALSE(use.avx512_bf16 || use.amx_bf16);
  if (cap == "avx512") EXPECT_FALSE(use.amx_bf16);
  if (cap == "native") EXPECT_EQ(use.ToString(), have.ToString());
  EXPECT_EQ(cpu::Avx512Enabled(), use.avx512_core);
  if (dnnl_util::NativeBf16()) EXPECT_TRUE(use.native_bf16());
}

// "primitive implementation" of every primitive oneDNN ran, one a line, from its verbose log
// ("onednn_verbose,exec,cpu,convolution,brg:avx512_core,...": the fourth and fifth fields).
std::string ImplementationsRun(const std::string& log) {
  std::string impls;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(",exec,cpu,") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string f[5];
    for (int i = 0; i < 5 && std::getline(fields, f[i], ','); ++i) {
    }
    impls += f[3] + " " + f[4] + "\n";
  }
  return impls;
}

TEST(IsaDispatch, OneDnnRunsOnlyAllowedImplementations) {
  const CpuFeatures& use = GetCpuFeatures();
  const std::string isa = dnnl_util::DnnlIsaName();
  if (!use.avx512_core) EXPECT_EQ(isa.find("avx512"), std::string::npos) << isa;
  for (auto low : {pb::PrecisionPolicy::BF16, pb::PrecisionPolicy::FP16}) {
    pb::TrainConfig c;
    c.mutable_precision()->set_preset(pb::PrecisionPolicy::AMP);
    c.mutable_precision()->set_low_dtype(low);
    auto t = Trainer::Create(std::string(MT_SOURCE_DIR) + "/models/fashion_cnn.onnx", c);
    ASSERT_TRUE(t.ok()) << t.status();
    Tensor x(DType::kF32, {8, 1, 28, 28}), y(DType::kI64, {8});
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(i % 29) / 29.0f;
    for (int64_t i = 0; i < 8; ++i) y.data_as<int64_t>()[i] = i % 10;
    dnnl::set_verbose(1);
    testing::internal::CaptureStdout();
    auto r = (*t)->Step({{"input", x}, {"labels", y}});
    const std::string log = testing::internal::GetCapturedStdout();
    dnnl::set_verbose(0);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::string impls = ImplementationsRun(log);
    ASSERT_NE(impls.find("convolution "), std::string::npos) << "no convolution in the log:\n" << log;
    std::istringstream rows(impls);
    for (std::string row; std::getline(rows, row);) {
      const std::string impl = row.substr(row.find(' ') + 1);
      if (!use.avx512_core) EXPECT_EQ(impl.find("avx512"), std::string::npos) << row;
      if (!use.amx_bf16) EXPECT_EQ(impl.find("amx"), std::string::npos) << row;
      if (!dnnl_util::NativeBf16()) EXPECT_EQ(impl.find("bf16"), std::string::npos) << row;
    }
  }
}

}  // namespace
}  // namespace mixtrain
