// `mixtrain dump MODEL.onnx [--passes=LIST] [--format=text|dot|onnx] [--out=FILE]`: imports a
// model, runs the named passes, and prints the graph as text, Graphviz DOT or ONNX.
// Built only on the public API (include/mixtrain/).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"
#include "tools/precision_report.h"
#include "tools/step_flags.h"

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
  {
    std::vector<cli::FileArg> inputs = {{"MODEL.onnx", model_path}};
    if (args.has("stats")) inputs.push_back({"--stats", args.str("stats")});
    std::vector<cli::FileArg> outputs;
    if (!out.empty()) outputs.push_back({"--out", out});
    MIXTRAIN_RETURN_IF_ERROR(cli::CheckFiles(inputs, outputs));
  }

  // The passes build from the TrainConfig that `train` would make of the same step flags, so
  // `dump --passes=train` with a run's flags shows that run's step.
  TrainConfig config;
  MIXTRAIN_RETURN_IF_ERROR(cli::ApplyStepFlags(args, config));
  TransformOptions options;
  options.passes = args.list("passes");
  options.train_config = config;
  if (args.has("stats")) {
    if (format == "onnx")
      return absl::InvalidArgumentError("--stats marks nodes in the text or DOT rendering, not in --format=onnx");
    MIXTRAIN_ASSIGN_OR_RETURN(cli::PrecisionStatsFile f, cli::ReadPrecisionStats(args.str("stats")));
    options.node_risk = cli::NodeRisks(f);
  }
  const GraphFormat graph_format = format == "onnx" ? GraphFormat::kOnnx
                                   : format == "dot" ? GraphFormat::kDot
                                                     : GraphFormat::kText;
  MIXTRAIN_ASSIGN_OR_RETURN(TransformedModel m, TransformModel(model_path, options, graph_format, out));
  // Why the CPU was chosen matters to who asked for a device, as with train.
  if (!m.device_note.empty() && args.has("device")) std::fprintf(stderr, "mixtrain dump: %s\n", m.device_note.c_str());
  if (!m.risk_nodes_missing.empty()) {
    std::fprintf(stderr, "mixtrain dump: --stats: %zu of %zu marked nodes are not in this graph (first: '%s')\n",
                 m.risk_nodes_missing.size(), options.node_risk.size(), m.risk_nodes_missing[0].c_str());
  }
  // The text holds the precision report; with DOT, stdout or --out holds the graph alone.
  if (graph_format == GraphFormat::kDot && !m.precision_report.empty())
    std::fputs(m.precision_report.c_str(), stderr);
  if (!out.empty()) return absl::OkStatus();  // written by TransformModel
  if (std::fwrite(m.graph.data(), 1, m.graph.size(), stdout) != m.graph.size() || std::fflush(stdout) != 0)
    return absl::DataLossError("writing to standard output failed");
  return absl::OkStatus();
}

// dump's own flags, then the step-shaping flags it shares with train.
std::vector<cli::FlagSpec> DumpFlags(std::vector<cli::FlagSpec> own) { return cli::WithStepFlags(std::move(own)); }

MT_REGISTER_COMMAND(
    dump,
    cli::Command{
        .name = "dump",
        .usage = "mixtrain dump MODEL.onnx [--passes=LIST] [--format=text|dot|onnx] [--out=FILE]",
        .summary = "print a model's graph (after the named passes) as text, Graphviz DOT or ONNX",
        .flags = DumpFlags(
            {
                {.name = "passes",
                 .default_value = "",
                 .help = absl::StrCat("comma-separated passes to run first, in order; canonicalize "
                                      "runs before them, as before training (known: ",
                                      absl::StrJoin(TransformPassNames(), ", "), ")")},
                {.name = "stats",
                 .default_value = "",
                 .help = "precision statistics (train --debug-precision-out): mark each node by its measured risk "
                         "(non-finite, overflow, near-overflow, underflow); use with --passes=train and the run's "
                         "step flags (--dtype, --policy, ...) so the node names match"},
                {.name = "format",
                 .default_value = "text",
                 .help = "text (one line per node and a summary), dot (Graphviz, coloured by "
                         "compute dtype) or onnx (needs --out)"},
                {.name = "out",
                 .default_value = "",
                 .help = "write here (atomically) instead of standard output"},
            }),
        .run = [](const cli::Args& args) {
          absl::Status s = RunDump(args);
          return s.ok() ? 0 : cli::Fail("dump", s);
        }});

}  // namespace
}  // namespace mixtrain
