// `mixtrain run MODEL.onnx --inputs=IN.npz --out=OUT.npz [--dtype=fp32|bf16|fp16]`: runs
// inference on the CPU runtime and writes every graph output by name.
// Built only on the public API (include/mixtrain/).
#include <string>

#include "absl/strings/str_cat.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"

namespace mixtrain {
namespace {

// --dtype for run and bench: fp32, bf16 or fp16 (any alias ParseElementType knows).
absl::StatusOr<ElementType> ComputeType(const cli::Args& args) {
  absl::StatusOr<ElementType> t = ParseElementType(args.str("dtype"));
  if (!t.ok() || (*t != ElementType::kFloat32 && *t != ElementType::kFloat16 && *t != ElementType::kBFloat16))
    return absl::InvalidArgumentError(absl::StrCat("flag --dtype must be fp32, bf16 or fp16, not '",
                                                   args.str("dtype"), "'"));
  return *t;
}

absl::Status RunModel(const cli::Args& args) {
  if (args.positional().size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "expects exactly one MODEL.onnx, got ", args.positional().size(), " arguments (see --help)"));
  if (args.str("inputs").empty()) return absl::InvalidArgumentError("flag --inputs=IN.npz is required");
  if (args.str("out").empty()) return absl::InvalidArgumentError("flag --out=OUT.npz is required");
  MIXTRAIN_RETURN_IF_ERROR(cli::CheckFiles({{"MODEL.onnx", args.positional()[0]}, {"--inputs", args.str("inputs")}},
                                           {{"--out", args.str("out")}}));
  InferenceOptions options;
  MIXTRAIN_ASSIGN_OR_RETURN(options.compute_type, ComputeType(args));
  options.optimize = args.flag("optimize");
  options.device = args.str("device");

  // The session converts fp32 feeds of lowered inputs and returns every float output as fp32.
  MIXTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session,
                            InferenceSession::Create(args.positional()[0], options));
  // A GPU that lacks a kernel for this model is worth a line; a machine without one is not.
  if (session->DeviceNote().find("the GPU lacks") != std::string::npos || args.has("device"))
    std::fprintf(stderr, "mixtrain run: %s\n", session->DeviceNote().c_str());
  MIXTRAIN_ASSIGN_OR_RETURN(TensorMap feeds, ReadNpz(args.str("inputs")));
  absl::StatusOr<TensorMap> outs = session->Run(feeds);
  if (!outs.ok())
    return absl::Status(outs.status().code(), absl::StrCat(args.positional()[0], " with inputs ",
                                                           args.str("inputs"), ": ", outs.status().message()));
  return WriteNpz(args.str("out"), *outs);
}

MT_REGISTER_COMMAND(
    run, cli::Command{
             .name = "run",
             .usage = "mixtrain run MODEL.onnx --inputs=IN.npz --out=OUT.npz [--dtype=fp32|bf16|fp16] [--no-optimize] "
                      "[--device=cpu|cuda|auto]",
             .summary = "run inference (on the CPU, or a GPU); writes every graph output by name to an .npz",
             .flags =
                 {
                     {.name = "inputs", .default_value = "",
                      .help = "an .npz with one array per graph input, named like the input"},
                     {.name = "out", .default_value = "", .help = "the .npz to write the outputs to"},
                     {.name = "optimize", .default_value = "true",
                      .help = "run the inference passes first (fusions, channels-last conv stacks); "
                              "--no-optimize runs the graph as imported and canonicalized (constants folded, sequence ops rewritten)",
                      .is_bool = true},
                     {.name = "dtype", .default_value = "fp32",
                      .help = "fp32, or bf16 / fp16 to compute every float op in that type (inputs "
                              "are converted, outputs written as fp32)"},
                     {.name = "device", .default_value = "auto",
                      .help = "cpu, cuda, or auto (cuda where a GPU is usable and has every kernel)"},
                 },
             .run = [](const cli::Args& args) {
               absl::Status s = RunModel(args);
               return s.ok() ? 0 : cli::Fail("run", s);
             }});

}  // namespace
}  // namespace mixtrain
