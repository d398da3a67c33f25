// `mixtrain info`: the version, the CPU features found, the ISA cap, and the kernels and default
// precision chosen from them. Built only on the public API (include/mixtrain/).
#include <cstdio>

#include "mixtrain/mixtrain.h"
#include "tools/cli.h"

namespace mixtrain {
namespace {

int Info(const cli::Args&) {
  const CpuInfo c = GetCpuInfo();
  std::printf("mixtrain %s\n", Version());
  std::printf("cpu features:     %s\n", c.detected.c_str());
  std::printf("MIXTRAIN_MAX_ISA: %s%s\n", c.cap.c_str(),
              c.cap == "native" ? "" : (" (using: " + c.usable + ")").c_str());
  std::printf("oneDNN ISA:       %s\n", c.onednn_isa.c_str());
  std::printf("row kernels:      %s (elementwise, softmax, norms)\n",
              c.row_kernels.c_str());
  std::printf("bf16 matmul/conv: %s\n", c.native_bf16
                                            ? "native (oneDNN bf16 kernels)"
                                            : "fp32 math on bf16 storage (no native bf16 here)");
  std::printf("fp16 matmul/conv: fp32 math on fp16 storage (F16C conversions)\n");
  std::printf("--dtype=auto:     %s\n",
              c.auto_dtype == "bf16" ? "bf16 mixed precision"
                                     : "fp32 (no native bf16; --dtype=bf16|fp16 forces AMP)");
  if (!c.cap_error.empty()) {
    std::fprintf(stderr, "mixtrain info: %s\n", c.cap_error.c_str());
    return 2;
  }
  return 0;
}

MT_REGISTER_COMMAND(info, cli::Command{
                              .name = "info",
                              .usage = "mixtrain info",
                              .summary = "the CPU features found and the kernels and precision chosen",
                              .flags = {},
                              .run = Info});

}  // namespace
}  // namespace mixtrain
