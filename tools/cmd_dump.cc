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
  MIXTRAIN_RETURN_IF_ERROR(cli::CheckInputPath("MODEL.onnx", model_path));
  if (!out.empty()) MIXTRAIN_RETURN_IF_ERROR(cli::CheckOutputPath("--out", out));

  // The passes that take options get them from dump's flags; the others run with defaults.
  TransformOptions options;
  options.passes = args.list("passes");
  options.precision = args.str("precision");
  MIXTRAIN_ASSIGN_OR_RETURN(options.low_type, ParseElementType(args.str("dtype")));
  if (options.low_type != ElementType::kFloat16 && options.low_type != ElementType::kBFloat16)
    return absl::InvalidArgumentError("flag --dtype must be fp16 or bf16");
  options.allow = args.list("allow");
  options.deny = args.list("deny");
  if (args.has("fp32-nodes")) options.fp32_nodes = args.str("fp32-nodes");
  options.loss = args.str("loss");
  options.class_axis = static_cast<int32_t>(args.integer("class-axis"));
  options.optimizer = args.str("optimizer");
  options.data_parallel = args.flag("data-parallel");
  options.deterministic = args.flag("deterministic");
  options.lora_rank = static_cast<int32_t>(args.integer("lora-rank"));
  if (args.has("lora-alpha")) options.lora_alpha = static_cast<float>(args.number("lora-alpha"));
  options.lora_targets = args.str("lora-targets");
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
                 .help = absl::StrCat("comma-separated passes to run first, in order; canonicalize "
                                      "runs before them, as before training (known: ",
                                      absl::StrJoin(TransformPassNames(), ", "), ")")},
                {.name = "stats",
                 .default_value = "",
                 .help = "precision statistics (train --debug-precision-out): mark each node by its measured risk "
                         "(non-finite, overflow, near-overflow, underflow); use with --passes=train and the run's "
                         "--dtype/--policy so the node names match"},
                {.name = "format",
                 .default_value = "text",
                 .help = "text (one line per node and a summary), dot (Graphviz, coloured by "
                         "compute dtype) or onnx (needs --out)"},
                {.name = "precision",
                 .default_value = "amp",
                 .help = "the precision pass's preset: fp32, amp or half"},
                {.name = "dtype", .default_value = "bf16", .help = "the precision pass's low type: fp16 or bf16"},
                {.name = "allow", .default_value = "", .help = "ops moved to the allow list (precision pass)"},
                {.name = "deny", .default_value = "", .help = "ops moved to the deny list (precision pass)"},
                {.name = "fp32-nodes", .default_value = "", .help = "regex of node names pinned to fp32"},
                {.name = "loss", .default_value = "cross_entropy", .help = "the loss pass's loss: cross_entropy, mse, l1, bce_with_logits, output:NAME"},
                {.name = "class-axis", .default_value = "1", .help = "the loss pass's cross_entropy class axis (-1 for N x T x V logits)"},
                {.name = "optimizer", .default_value = "adam", .help = "the optimizer pass's optimizer: adam, adamw, sgd, adagrad"},
                {.name = "lora-rank", .default_value = "0",
                 .help = "--passes=train|eval: LoRA adapters of this rank, as train --lora-rank adds them"},
                {.name = "lora-alpha", .default_value = "", .help = "LoRA alpha (default: 2 * rank)"},
                {.name = "lora-targets", .default_value = "", .help = "LoRA: regex of the weights to adapt"},
                {.name = "data-parallel",
                 .default_value = "false",
                 .help = "the data-parallel step (--passes=train): the gradient all-reduces the optimizer pass adds",
                 .is_bool = true},
                {.name = "deterministic",
                 .default_value = "false",
                 .help = "with --data-parallel: the fixed-order reduction",
                 .is_bool = true},
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
