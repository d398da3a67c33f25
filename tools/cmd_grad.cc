// `mixtrain grad MODEL.onnx --data=BATCH.npz --loss=KIND [--labels=KEY] [--output=NAME]
// [--freeze=REGEX] [--trainable=REGEX] --out=GRADS.npz`: one forward + backward pass in fp32
// (train-mode BatchNorm/Dropout, the loss appended, reverse-mode autodiff) on one batch; writes
// `loss` (a scalar) and `grad/<initializer>` for every trainable parameter. Other tools and the
// PyTorch parity tests compare against this output.
// Built only on the public API (include/mixtrain/).
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"

namespace mixtrain {
namespace {

absl::Status Grad(const cli::Args& args) {
  if (args.positional().size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "expects exactly one MODEL.onnx, got ", args.positional().size(), " arguments (see --help)"));
  if (args.str("data").empty()) return absl::InvalidArgumentError("flag --data=BATCH.npz is required");
  if (args.str("out").empty()) return absl::InvalidArgumentError("flag --out=GRADS.npz is required");
  const std::string& model_path = args.positional()[0];
  MIXTRAIN_RETURN_IF_ERROR(
      cli::CheckFiles({{"MODEL.onnx", model_path}, {"--data", args.str("data")}}, {{"--out", args.str("out")}}));
  MIXTRAIN_ASSIGN_OR_RETURN(TensorMap data, ReadNpz(args.str("data")));
  MIXTRAIN_RETURN_IF_ERROR(CheckTrainingData(
      data, args.str("data"),
      {.labels_key = args.str("labels"), .shared_example_dim = false,
       .allow_nonfinite_inputs = args.flag("allow-nonfinite-inputs")}));

  GradientOptions opt;
  opt.loss = args.str("loss");
  opt.output = args.str("output");
  opt.class_axis = static_cast<int32_t>(args.integer("class-axis"));
  opt.labels = args.str("labels");
  opt.freeze = args.str("freeze");
  opt.trainable = args.str("trainable");
  absl::StatusOr<Gradients> g = ComputeGradients(model_path, data, opt);
  if (!g.ok()) {
    const absl::string_view msg = g.status().message();
    if (absl::StartsWith(msg, model_path + ": "))  // the importer named the model already
      return absl::Status(g.status().code(), absl::StrCat(msg, " (data ", args.str("data"), ")"));
    return absl::Status(g.status().code(), absl::StrCat(model_path, " with data ", args.str("data"), ": ", msg));
  }
  TensorMap named{{"loss", g->loss}};
  for (const auto& [param, grad] : g->gradients) named["grad/" + param] = grad;
  MIXTRAIN_RETURN_IF_ERROR(WriteNpz(args.str("out"), named));
  std::printf("loss %.6g, %zu gradients written to %s\n", g->loss.ToFloats()[0], g->gradients.size(),
              args.str("out").c_str());
  return absl::OkStatus();
}

MT_REGISTER_COMMAND(
    grad, cli::Command{
              .name = "grad",
              .usage = "mixtrain grad MODEL.onnx --data=BATCH.npz --loss=cross_entropy|mse|l1|"
                       "bce_with_logits|output:NAME [--labels=KEY] [--output=NAME] "
                       "[--freeze=REGEX] [--trainable=REGEX] --out=GRADS.npz",
              .summary = "one forward + backward pass in fp32; writes the loss and every "
                         "parameter's gradient",
              .flags =
                  {
                      {.name = "data", .default_value = "",
                       .help = "an .npz with one array per graph input (named like it) and the labels"},
                      {.name = "loss", .default_value = "cross_entropy",
                       .help = "cross_entropy (int64 labels), mse, l1, bce_with_logits, or "
                               "output:NAME to use a loss the model computes"},
                      {.name = "class-axis", .default_value = "1",
                       .help = "cross_entropy: the logits axis of the classes (-1 for N x T x V)"},
                      {.name = "labels", .default_value = "labels",
                       .help = "the key of the labels array in --data"},
                      {.name = "output", .default_value = "",
                       .help = "the model output the loss applies to (default: the first)"},
                      {.name = "freeze", .default_value = "",
                       .help = "parameters whose whole name matches this regex get no gradient"},
                      {.name = "trainable", .default_value = "",
                       .help = "only parameters whose whole name matches this regex are trainable"},
                      {.name = "out", .default_value = "",
                       .help = "the .npz to write `loss` and `grad/<initializer>` to"},
                      {.name = "allow-nonfinite-inputs", .default_value = "false",
                       .help = "accept input arrays holding NaN/Inf (refused by default; the "
                               "gradients are then non-finite); labels must stay finite",
                       .is_bool = true},
                  },
              .run = [](const cli::Args& args) {
                absl::Status s = Grad(args);
                return s.ok() ? 0 : cli::Fail("grad", s);
              }});

}  // namespace
}  // namespace mixtrain
