// `mixtrain run MODEL.onnx --inputs=IN.npz --out=OUT.npz [--dtype=fp32|bf16|fp16]`: runs
// inference on the CPU runtime and writes every graph output by name.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/onnx_import.h"
#include "runtime/npy.h"
#include "runtime/session.h"
#include "tools/cli.h"
#include "tools/low_precision.h"

namespace mixtrain {
namespace {

absl::Status RunModel(const cli::Args& args) {
  if (args.positional().size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "expects exactly one MODEL.onnx, got ", args.positional().size(), " arguments (see --help)"));
  if (args.str("inputs").empty()) return absl::InvalidArgumentError("flag --inputs=IN.npz is required");
  if (args.str("out").empty()) return absl::InvalidArgumentError("flag --out=OUT.npz is required");
  absl::StatusOr<DType> dtype = ParseDType(args.str("dtype"));
  if (!dtype.ok() || (*dtype != DType::kF32 && *dtype != DType::kF16 && *dtype != DType::kBF16))
    return absl::InvalidArgumentError(absl::StrCat("flag --dtype must be fp32, bf16 or fp16, not '",
                                                   args.str("dtype"), "'"));

  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(args.positional()[0]));
  if (*dtype != DType::kF32) MT_RETURN_IF_ERROR(LowerFloatModel(*g, *dtype));
  using TensorMap = std::map<std::string, Tensor>;
  MT_ASSIGN_OR_RETURN(TensorMap feeds, ReadNpz(args.str("inputs")));
  for (auto& [name, t] : feeds)
    if (const Value* v = g->FindValue(name); *dtype != DType::kF32 && v != nullptr && v->dtype == *dtype)
      t = ConvertFloat(t, *dtype);  // fp32 data for a lowered input
  std::shared_ptr<const Graph> graph(std::move(g));
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(graph));
  absl::StatusOr<std::vector<Tensor>> outs = session->Run(feeds);
  if (!outs.ok())
    return absl::Status(outs.status().code(), absl::StrCat(args.positional()[0], " with inputs ",
                                                           args.str("inputs"), ": ", outs.status().message()));
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < graph->outputs().size(); ++i)
    named[graph->outputs()[i]->name] = ConvertFloat((*outs)[i], DType::kF32);
  return WriteNpz(args.str("out"), named);
}

MT_REGISTER_COMMAND(
    run, cli::Command{
             .name = "run",
             .usage = "mixtrain run MODEL.onnx --inputs=IN.npz --out=OUT.npz [--dtype=fp32|bf16|fp16]",
             .summary = "run inference on the CPU; writes every graph output by name to an .npz",
             .flags =
                 {
                     {.name = "inputs", .default_value = "",
                      .help = "an .npz with one array per graph input, named like the input"},
                     {.name = "out", .default_value = "", .help = "the .npz to write the outputs to"},
                     {.name = "dtype", .default_value = "fp32",
                      .help = "fp32, or bf16 / fp16 to compute every float op in that type (inputs "
                              "are converted, outputs written as fp32)"},
                 },
             .run = [](const cli::Args& args) {
               absl::Status s = RunModel(args);
               return s.ok() ? 0 : cli::Fail("run", s);
             }});

}  // namespace
}  // namespace mixtrain
