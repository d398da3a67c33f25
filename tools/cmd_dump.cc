// `mixtrain dump MODEL.onnx [--passes=LIST] [--format=text|dot|onnx] [--out=FILE]`: imports a
// model, runs the named passes, and prints the graph as text, Graphviz DOT or ONNX.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/atomic_file.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/text_format.h"
#include "passes/pass.h"
#include "passes/pass_registry.h"
#include "tools/cli.h"

namespace mixtrain {
namespace {

absl::Status RunDump(const cli::Args& args) {
  if (args.positional().size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "expects exactly one MODEL.onnx, got ", args.positional().size(), " arguments (see --help)"));
  const std::string model_path = args.positional()[0];
  const std::string format = args.str("format");
  const std::string out = args.str("out");
  if (format != "text" && format != "dot" && format != "onnx")
    return absl::InvalidArgumentError(
        absl::StrCat("flag --format must be text, dot or onnx, not '", format, "'"));
  if (format == "onnx" && out.empty())
    return absl::InvalidArgumentError("--format=onnx needs --out=FILE (ONNX is binary)");
  if (args.has("out") && out.empty())
    return absl::InvalidArgumentError("flag --out needs a file name");

  // Build the pipeline before importing so a bad --passes fails fast.
  PassManager pm;
  for (const std::string& name : args.list("passes")) {
    absl::StatusOr<std::unique_ptr<Pass>> p = CreatePassByName(name);
    if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("--passes: ", p.status().message()));
    pm.Add(std::move(*p));
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
  MT_RETURN_IF_ERROR(pm.Run(*g));

  if (format == "onnx") return SaveOnnxFile(*g, out);
  std::string text = format == "dot" ? GraphToDot(*g) : GraphToText(*g);
  if (!out.empty()) return WriteFileAtomically(out, text);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    return absl::DataLossError("writing to standard output failed");
  return absl::OkStatus();
}

MT_REGISTER_COMMAND(
    dump,
    cli::Command{
        .name = "dump",
        .usage = "mixtrain dump MODEL.onnx [--passes=LIST] [--format=text|dot|onnx] [--out=FILE]",
        .summary = "print a model's graph (after the named passes) as text, Graphviz DOT or ONNX",
        .flags =
            {
                {.name = "passes",
                 .default_value = "",
                 .help = absl::StrCat("comma-separated passes to run first, in order (known: ",
                                      absl::StrJoin(RegisteredPassNames(), ", "), ")")},
                {.name = "format",
                 .default_value = "text",
                 .help = "text (one line per node and a summary), dot (Graphviz, coloured by "
                         "compute dtype) or onnx (needs --out)"},
                {.name = "out",
                 .default_value = "",
                 .help = "write here (atomically) instead of standard output"},
            },
        .run = [](const cli::Args& args) {
          absl::Status s = RunDump(args);
          return s.ok() ? 0 : cli::Fail("dump", s);
        }});

}  // namespace
}  // namespace mixtrain
