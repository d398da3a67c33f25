// The flags that shape the training step, one table shared by `mixtrain train` and `mixtrain
// dump` (issue 34: one flag table), so `dump --passes=train` shows the step a `train` command line
// builds: loss, optimizer, schedule, precision policy, loss scaling, accumulation, trainable
// selection, recompute, data parallelism, and --config.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "mixtrain/train_config.h"
#include "tools/cli.h"

namespace mixtrain::cli {

// The step-shaping flags, for a command's FlagSpec list.
std::vector<FlagSpec> StepFlagSpecs();

// A command's own flags, then the step flags it does not define itself (its own meaning wins:
// check's --device, bench's --dtype) and does not leave out.
std::vector<FlagSpec> WithStepFlags(std::vector<FlagSpec> own, const std::vector<std::string>& leave_out = {});

// Applies the step-shaping flags over `c` (what `c` holds < --config < flags). Numbers were
// checked by Args::Parse against their NumericFlags() rows; a --config's fields by FromTextProto.
// --config replaces `c` as a whole. `dtype_is_callers`: the command reads --dtype its own way
// (bench's fp32|bf16|fp16), so it is not the low type here.
absl::Status ApplyStepFlags(const Args& a, TrainConfig& c, bool dtype_is_callers = false);

}  // namespace mixtrain::cli
