// `mixtrain grad MODEL.onnx --data=BATCH.npz --loss=KIND [--labels=KEY] [--output=NAME]
// [--freeze=REGEX] [--trainable=REGEX] --out=GRADS.npz`: one forward + backward pass in fp32
// (train-mode BatchNorm/Dropout, the loss appended, reverse-mode autodiff) on one batch; writes
// `loss` (a scalar) and `grad/<initializer>` for every trainable parameter. Other tools and the
// PyTorch parity tests compare against this output.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/onnx_import.h"
#include "passes/passes.h"
#include "runtime/npy.h"
#include "runtime/session.h"
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
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> model, ImportOnnxFile(model_path));
  using TensorMap = std::map<std::string, Tensor>;
  MT_ASSIGN_OR_RETURN(TensorMap data, ReadNpz(args.str("data")));

  GradientGraphOptions opt;
  opt.loss.kind = args.str("loss");
  opt.loss.output = args.str("output");
  const bool uses_labels = opt.loss.kind.rfind("output:", 0) != 0;
  const std::string labels_key = args.str("labels");
  opt.loss.labels = labels_key;
  opt.autodiff.freeze = args.str("freeze");
  opt.autodiff.trainable = args.str("trainable");
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, BuildGradientGraph(*model, opt));

  TensorMap feeds;
  for (const Value* in : g->inputs()) {
    auto it = data.find(in->name);
    if (it == data.end())
      return absl::InvalidArgumentError(absl::StrCat(
          args.str("data"), " has no array '", in->name, "' for graph input '", in->name, "'",
          uses_labels && in->name == labels_key ? " (the labels; choose the key with --labels)" : ""));
    feeds[in->name] = it->second;
  }
  const std::vector<std::string> grads = GradientOutputs(*g);
  std::vector<std::string> fetch{kLossName};
  fetch.insert(fetch.end(), grads.begin(), grads.end());
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(*g));
  absl::StatusOr<std::vector<Tensor>> outs = session->Run(feeds, fetch);
  if (!outs.ok())
    return absl::Status(outs.status().code(), absl::StrCat(model_path, " with data ", args.str("data"),
                                                           ": ", outs.status().message()));
  TensorMap named;
  for (size_t i = 0; i < fetch.size(); ++i) named[fetch[i]] = (*outs)[i];
  MT_RETURN_IF_ERROR(WriteNpz(args.str("out"), named));
  std::printf("loss %.6g, %zu gradients written to %s\n", (*outs)[0].GetDouble(0), grads.size(),
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
                  },
              .run = [](const cli::Args& args) {
                absl::Status s = Grad(args);
                return s.ok() ? 0 : cli::Fail("grad", s);
              }});

}  // namespace
}  // namespace mixtrain
