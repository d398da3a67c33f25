// mixtrain::v1::ComputeGradients: BuildGradientGraph (passes/passes.h) on an imported model, run
// once on the CPU runtime.
#include "api/convert.h"
#include "graph/onnx_import.h"
#include "mixtrain/gradients.h"
#include "kernels/backend.h"
#include "kernels/host_evaluator.h"
#include "passes/passes.h"
#include "runtime/session.h"

namespace mixtrain {
inline namespace v1 {

absl::StatusOr<Gradients> ComputeGradients(const std::string& model_path, const TensorMap& batch,
                                           const GradientOptions& options) {
  return api::Guarded("ComputeGradients", [&]() -> absl::StatusOr<Gradients> {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> model, ImportOnnxFile(model_path));
    GradientGraphOptions opt;
    opt.loss.kind = options.loss;
    opt.loss.output = options.output;
    opt.loss.labels = options.labels;
    opt.loss.class_axis = options.class_axis;
    opt.autodiff.freeze = options.freeze;
    opt.autodiff.trainable = options.trainable;
    opt.autodiff.evaluator = &EvaluateOnHost;
    const bool uses_labels = options.loss.rfind("output:", 0) != 0;
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, BuildGradientGraph(*model, opt));

    std::map<std::string, Tensor> feeds;
    for (const Value* in : g->inputs()) {
      auto it = batch.find(in->name);
      if (it == batch.end())
        return absl::InvalidArgumentError(absl::StrCat(
            "the batch has no array '", in->name, "' for graph input '", in->name, "'",
            uses_labels && in->name == options.labels ? " (the labels; GradientOptions::labels names their key)"
                                                      : ""));
      feeds[in->name] = api::ToTensor(it->second);
    }
    const std::vector<std::string> grads = GradientOutputs(*g);
    std::vector<std::string> fetch{kLossName};
    fetch.insert(fetch.end(), grads.begin(), grads.end());
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(*g));
    MT_ASSIGN_OR_RETURN(std::vector<Tensor> outs, session->Run(feeds, fetch));
    Gradients out;
    MT_ASSIGN_OR_RETURN(out.loss, api::ToHostTensor(outs[0]));
    const std::string prefix = kGradPrefix;  // autodiff's outputs are "grad/<initializer>"
    for (size_t i = 1; i < fetch.size(); ++i) {
      MT_CHECK(fetch[i].rfind(prefix, 0) == 0) << fetch[i];
      MT_ASSIGN_OR_RETURN(out.gradients[fetch[i].substr(prefix.size())], api::ToHostTensor(outs[i]));
    }
    return out;
  });
}

}  // namespace v1
}  // namespace mixtrain
