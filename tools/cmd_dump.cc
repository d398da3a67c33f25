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
#include "passes/passes.h"
#include "passes/precision.h"
#include "passes/training.h"
#include "graph/shape_inference.h"
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

  // Build the pipeline before importing so a bad --passes fails fast. The passes that take
  // options get them from dump's flags; the others come from the registry with defaults.
  MT_ASSIGN_OR_RETURN(PrecisionPreset preset, ParsePrecisionPreset(args.str("precision")));
  MT_ASSIGN_OR_RETURN(DType low, ParseDType(args.str("dtype")));
  if (!IsLowFloat(low)) return absl::InvalidArgumentError("flag --dtype must be fp16 or bf16");
  PrecisionPolicy policy = PrecisionPolicy::Default(preset, low);
  for (const std::string& op : args.list("allow")) policy.SetClass(op, PrecisionClass::kAllow);
  for (const std::string& op : args.list("deny")) policy.SetClass(op, PrecisionClass::kDeny);
  if (args.has("fp32-nodes")) MT_RETURN_IF_ERROR(policy.AddFp32NodeRegex(args.str("fp32-nodes")));
  std::vector<std::string> names = args.list("passes");
  bool scaled = std::find(names.begin(), names.end(), "loss_scale") != names.end();
  bool precision_ran = false;
  PassManager pm;
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<Pass>> p;
    if (name == "precision") {
      p = MakePrecisionPass(policy);
      precision_ran = true;
    } else if (name == "loss") {
      LossOptions lo;
      lo.kind = args.str("loss");
      p = MakeLossPass(lo);
    } else if (name == "autodiff") {
      AutodiffOptions ad;
      if (scaled) {
        ad.loss = kScaledLossName;
        ad.freeze = kLossScaleName;  // the scale is state, not a parameter
      }
      p = MakeAutodiffPass(ad);
    } else if (name == "optimizer") {
      OptimizerOptions oo;
      MT_ASSIGN_OR_RETURN(oo.kind, ParseOptimizerKind(args.str("optimizer")));
      oo.unscale = oo.dynamic_scale = scaled;
      p = MakeOptimizerPass(oo);
    } else {
      p = CreatePassByName(name);
    }
    if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("--passes: ", p.status().message()));
    pm.Add(std::move(*p));
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
  MT_RETURN_IF_ERROR(pm.Run(*g));

  if (format == "onnx") return SaveOnnxFile(*g, out);
  MT_RETURN_IF_ERROR(InferShapes(*g));
  std::string text = format == "dot" ? GraphToDot(*g) : GraphToText(*g);
  if (precision_ran) {
    if (format == "text") text += "\n" + PrecisionReport(*g);
    else std::fputs(PrecisionReport(*g).c_str(), stderr);  // stdout/--out holds the DOT
  }
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
                {.name = "precision",
                 .default_value = "amp",
                 .help = "the precision pass's preset: fp32, amp or half"},
                {.name = "dtype", .default_value = "bf16", .help = "the precision pass's low type: fp16 or bf16"},
                {.name = "allow", .default_value = "", .help = "ops moved to the allow list (precision pass)"},
                {.name = "deny", .default_value = "", .help = "ops moved to the deny list (precision pass)"},
                {.name = "fp32-nodes", .default_value = "", .help = "regex of node names pinned to fp32"},
                {.name = "loss", .default_value = "cross_entropy", .help = "the loss pass's loss: cross_entropy, mse, l1, bce_with_logits, output:NAME"},
                {.name = "optimizer", .default_value = "adam", .help = "the optimizer pass's optimizer: adam, adamw, sgd, adagrad"},
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
