// `mixtrain check MODEL.onnx [--loss=...] [--class-axis=N] [--freeze=RE] [--trainable=RE]
// [--device=cpu|cuda] [--verbose] [--memory ...]`: says, before any training, whether the model trains. Lists every blocking node
// at once (unsupported op, missing gradient rule, unknown rank, no CPU kernel), what
// canonicalization folded, which initializers train (count and bytes), which are frozen by
// which rule, warnings about weights that do not train and values the rule cannot decide, and
// the dynamic dims; with --memory, where training's memory will go, planned at --batch-size (the
// memory report of `train --profile`, before anything runs). Exit 0 if it trains, 1 if not, 2
// when the model or a flag is bad.
// Built only on the public API (include/mixtrain/).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"
#include "tools/step_flags.h"
#include "tools/memory_report.h"

namespace mixtrain {
namespace {

std::string Bytes(int64_t b) {
  if (b >= (1 << 20)) return absl::StrCat(b / (1 << 20), ".", (b % (1 << 20)) * 10 / (1 << 20), " MiB");
  if (b >= (1 << 10)) return absl::StrCat(b / (1 << 10), ".", (b % (1 << 10)) * 10 / (1 << 10), " KiB");
  return absl::StrCat(b, " B");
}

std::string DimsString(const std::vector<int64_t>& d) { return absl::StrCat("[", absl::StrJoin(d, ","), "]"); }

int Check(const cli::Args& args) {
  if (args.positional().size() != 1)
    return cli::Fail("check", absl::InvalidArgumentError(absl::StrCat(
                                  "expects exactly one MODEL.onnx, got ", args.positional().size(),
                                  " arguments (see --help)"))) + 1;
  const std::string& path = args.positional()[0];
  if (absl::Status s = cli::CheckInputPath("MODEL.onnx", path); !s.ok()) return cli::Fail("check", s) + 1;
  CheckOptions opt;
  // The step `train` would build with the same step flags (the table train and dump share).
  TrainConfig config;
  if (absl::Status s = cli::ApplyStepFlags(args, config); !s.ok()) return cli::Fail("check", s) + 1;
  opt.train_config = config;
  opt.device = args.str("device");
  if (opt.device != "cpu" && opt.device != "cuda")
    return cli::Fail("check", absl::InvalidArgumentError(absl::StrCat("--device=", opt.device, ": expected cpu or cuda"))) + 1;
  if (args.flag("memory")) opt.memory_batch = args.integer("batch-size");
  absl::StatusOr<ModelCheck> r = CheckModel(path, opt);
  if (!r.ok()) {
    const absl::string_view msg = r.status().message();
    // The importer's errors name the model already; the checker's do not.
    return cli::Fail("check", absl::Status(r.status().code(), absl::StartsWith(msg, path + ": ")
                                                                  ? std::string(msg)
                                                                  : absl::StrCat(path, ": ", msg))) + 1;
  }
  const bool verbose = args.flag("verbose");

  std::printf("%s: %s\n", path.c_str(), r->trains ? "trains" : "does NOT train");
  std::printf("canonicalization: %d nodes -> %d (%d shape values and %d constant nodes folded, %d "
              "simplified, %d dead nodes and %d unused initializers removed)\n",
              r->nodes_imported, r->nodes_after, r->shape_values_folded, r->nodes_folded,
              r->nodes_simplified, r->nodes_removed, r->initializers_removed);
  for (const std::string& s : r->not_folded) std::printf("  not folded: %s\n", s.c_str());
  std::printf("ops: %s\n", absl::StrJoin(r->op_types, " ").c_str());
  if (r->dropouts.empty())
    std::printf("dropout: none (an export from eval() mode drops its dropout layers without a trace; export "
                "from train() mode to train with them)\n");
  else
    std::printf("dropout: %s; evaluation and export drop nothing\n", absl::StrJoin(r->dropouts, ", ").c_str());
  std::printf("dynamic dims: %s\n", r->dynamic_dims.empty() ? "none" : absl::StrJoin(r->dynamic_dims, "; ").c_str());

  int64_t train_n = 0, train_bytes = 0;
  struct Frozen {
    int n = 0;
    int64_t bytes = 0;
    std::vector<std::string> names;
  };
  std::map<std::string, Frozen> frozen_by_reason;  // the rule that froze them -> which
  // Whether a parameter reaches the loss is known only where the backward graph was built.
  const bool backward_built = std::any_of(r->initializers.begin(), r->initializers.end(),
                                          [](const InitializerReport& i) { return i.trains; });
  const char* unreached = backward_built ? "parameter that does not reach the loss"
                                         : "parameter (no backward graph was built: see blocking)";
  for (const InitializerReport& i : r->initializers) {
    if (i.trains) {
      ++train_n;
      train_bytes += i.bytes;
      continue;
    }
    Frozen& e = frozen_by_reason[i.selected ? unreached : absl::StrCat(i.role, ": ", i.reason)];
    ++e.n;
    e.bytes += i.bytes;
    e.names.push_back(i.name);
  }
  std::printf("trainable: %lld initializers, %s\n", static_cast<long long>(train_n), Bytes(train_bytes).c_str());
  if (verbose)
    for (const InitializerReport& i : r->initializers)
      if (i.trains) std::printf("  %s %s%s (%s)\n", i.name.c_str(), i.dtype.c_str(), DimsString(i.dims).c_str(), i.reason.c_str());
  std::printf("not trained:%s\n", frozen_by_reason.empty() ? " none" : "");
  constexpr size_t kNamesShown = 6;  // per rule; --verbose lists every initializer
  for (const auto& [why, e] : frozen_by_reason) {
    std::string names = absl::StrJoin(e.names.begin(), e.names.begin() + std::min(e.names.size(), kNamesShown), ", ");
    if (e.names.size() > kNamesShown) absl::StrAppend(&names, ", ... (", e.names.size() - kNamesShown, " more)");
    std::printf("  %d (%s): %s: %s\n", e.n, Bytes(e.bytes).c_str(), why.c_str(), names.c_str());
  }
  if (verbose)
    for (const InitializerReport& i : r->initializers)
      if (!i.trains) std::printf("  %s %s%s: %s, %s\n", i.name.c_str(), i.dtype.c_str(), DimsString(i.dims).c_str(), i.role.c_str(), i.reason.c_str());
  if (!r->adapters.empty()) {
    int64_t bytes = 0;
    for (const AdapterReport& ad : r->adapters) bytes += ad.bytes;
    const double all = static_cast<double>(r->model_parameters + r->adapter_parameters);
    std::printf("lora: %zu adapters of rank %d, %lld parameters (%s), %.3f%% of %lld\n", r->adapters.size(),
                static_cast<int>(r->adapters[0].rank), static_cast<long long>(r->adapter_parameters),
                Bytes(bytes).c_str(), all > 0 ? 100.0 * static_cast<double>(r->adapter_parameters) / all : 0.0,
                static_cast<long long>(r->model_parameters + r->adapter_parameters));
    for (const AdapterReport& ad : r->adapters)
      std::printf("  %s [in %lld, out %lld]: A %s + B %s, %s\n", ad.weight.c_str(), static_cast<long long>(ad.in),
                  static_cast<long long>(ad.out), DimsString(ad.a_dims).c_str(), DimsString(ad.b_dims).c_str(),
                  Bytes(ad.bytes).c_str());
  }
  for (const std::string& w : r->trainability_warnings) std::printf("warning: %s\n", w.c_str());
  if (!r->trains) {
    std::printf("blocking (%zu):\n", r->blockers.size());
    for (const std::string& b : r->blockers) std::printf("  %s\n", b.c_str());
  }
  if (opt.device == "cuda" && r->trains) {
    if (!r->cuda_unknown.empty()) {
      std::printf("cuda: cannot tell: %s\n", r->cuda_unknown.c_str());
      return 1;
    }
    if (r->cuda_missing_ops.empty()) {
      std::printf("cuda: every op of the training step (Adam; fp32, bf16 AMP, fp16 AMP) and of evaluation has a CUDA "
                  "kernel for its dtypes\n");
    } else {
      std::printf("cuda: no CUDA kernel for %zu op%s of the training step (Adam) or evaluation; "
                  "--device=cuda refuses it, auto trains on the CPU:\n  %s\n",
                  r->cuda_missing_ops.size(), r->cuda_missing_ops.size() == 1 ? "" : "s",
                  absl::StrJoin(r->cuda_missing_ops, "\n  ").c_str());
      return 1;
    }
  }
  if (r->memory) {
    // The step's own settings (the step flags and --config, as `train` reads them).
    const char* presets[] = {"amp", "fp32", "half"};
    const char* lows[] = {"auto", "fp16", "bf16"};
    const char* optimizers[] = {"Adam", "AdamW", "SGD", "Adagrad"};
    std::printf("memory, planned at batch %lld with %s precision, %s low type, recompute %s, %s (nothing ran):\n",
                static_cast<long long>(opt.memory_batch), presets[static_cast<int>(config.precision.preset)],
                lows[static_cast<int>(config.precision.low_dtype)], config.recompute.c_str(),
                optimizers[static_cast<int>(config.optimizer.kind)]);
    cli::PrintMemoryReport(*r->memory, /*measured=*/false);
  }
  return r->trains ? 0 : 1;
}

// check's own flags, then the step flags it shares with train and dump (its --device is its own:
// cpu, or cuda to list what the GPU lacks).
std::vector<cli::FlagSpec> CheckFlags(std::vector<cli::FlagSpec> own) {
  return cli::WithStepFlags(std::move(own), {"device"});
}

MT_REGISTER_COMMAND(
    check, cli::Command{
               .name = "check",
               .usage = "mixtrain check MODEL.onnx [--device=cpu|cuda] [--verbose] [--memory [--batch-size=N]] "
                        "[train's step flags: --loss, --class-axis, --freeze, --trainable, --lora-rank, --dtype, ...]",
               .summary = "say whether a model trains, before training: every blocking node, what "
                          "was folded, what trains and what is frozen and why (exit 0 trains, 1 not)",
               .flags = CheckFlags(
                   {
                       {.name = "device", .default_value = "cpu",
                        .help = "cuda: also list the training step's ops without a CUDA kernel (exit 1 if "
                                "any); needs no GPU"},
                       {.name = "verbose", .default_value = "false",
                        .help = "list every initializer with its role and reason", .is_bool = true},
                       {.name = "memory", .default_value = "false",
                        .help = "where training's memory will go (weights, gradients, optimizer state, "
                                "activations kept for the backward, the planner's arena by phase), planned "
                                "before anything runs, at --batch-size, with the step flags' precision, recompute and optimizer",
                        .is_bool = true},
                       {.name = "batch-size", .default_value = "1",
                        .help = "--memory: the batch (every symbolic input dim at this size)"},
                   }),
               .run = Check});

}  // namespace
}  // namespace mixtrain
