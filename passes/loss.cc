// The loss pass (docs/architecture.md, "The pipeline"): appends a loss to a model output and adds the labels graph
// input, so later passes find one scalar graph output named "loss".
//   cross_entropy    SoftmaxCrossEntropyLoss(logits N x C [x d...], labels int64 N [x d...]), mean
//   mse              mean((y - labels)^2)
//   l1               mean(|y - labels|)
//   bce_with_logits  mean(softplus(y) - y * labels)   (= PyTorch's BCEWithLogitsLoss)
//   output:NAME      the model already computes the loss as NAME
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"
#include "passes/grad_builder.h"
#include "passes/pass_registry.h"
#include "passes/passes.h"

namespace mixtrain {
namespace {

class LossPass final : public Pass {
 public:
  explicit LossPass(LossOptions o) : opt_(std::move(o)) {}
  absl::string_view name() const override { return "loss"; }
  absl::StatusOr<bool> Run(Graph& g) override;

 private:
  absl::StatusOr<Value*> ModelOutput(const Graph& g) const;
  LossOptions opt_;
};

absl::StatusOr<Value*> LossPass::ModelOutput(const Graph& g) const {
  if (!opt_.output.empty()) {
    Value* v = g.FindValue(opt_.output);
    if (v == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("no model output named '", opt_.output, "'"));
    return v;
  }
  for (Value* v : g.outputs())
    if (!absl::StartsWith(v->name, kStatePrefix) && !absl::StartsWith(v->name, kGradPrefix))
      return v;
  return absl::InvalidArgumentError("the model has no output to apply the loss to");
}

absl::StatusOr<bool> LossPass::Run(Graph& g) {
  MT_RETURN_IF_ERROR(g.TopoSort());
  MT_RETURN_IF_ERROR(InferShapes(g));  // the loss is shaped after the model output
  Value* existing = g.FindValue(kLossName);
  if (absl::StartsWith(opt_.kind, "output:")) {
    std::string name = opt_.kind.substr(7);
    Value* v = g.FindValue(name);
    if (v == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("--loss=output:", name,
                                                     ": the model has no value named '", name, "'"));
    if (v == existing) {
      if (g.IsGraphOutput(v)) return false;
      g.AddOutput(v);
      return true;
    }
    if (existing)
      return absl::InvalidArgumentError("the model already has a different value named 'loss'");
    Value* loss = g.AddValue(kLossName, v->dtype, v->shape);
    g.AddNode("Identity", {v}, {loss}, "loss/Identity");
    g.AddOutput(loss);
    return true;
  }
  if (existing)
    return absl::InvalidArgumentError(
        "the model already has a value named 'loss' (use --loss=output:loss)");
  if (opt_.labels.empty())  // the labels become a graph input, which needs a name
    return absl::InvalidArgumentError("the labels have no name (--labels, data.labels_key)");
  if (opt_.labels == kLossName)
    return absl::InvalidArgumentError("the labels may not be named 'loss': the loss is (choose --labels)");
  if (g.FindValue(opt_.labels))
    return absl::InvalidArgumentError(
        absl::StrCat("the model already has a value named '", opt_.labels, "' (choose --labels)"));
  MT_ASSIGN_OR_RETURN(Value* y, ModelOutput(g));
  if (!IsFloat(y->dtype))
    return absl::InvalidArgumentError(
        absl::StrCat("output '", y->name, "' is ", DTypeName(y->dtype), ", not a float"));

  GradBuilder b(g);
  b.set_scope("loss");
  Value* loss = g.AddValue(kLossName, y->dtype, Shape(std::vector<Dim>{}));
  if (opt_.kind == "cross_entropy") {
    if (!y->shape.rank_known || y->shape.rank() < 2)
      return absl::InvalidArgumentError(absl::StrCat(
          "cross_entropy needs logits of shape N x C [x d...], '", y->name, "' is ",
          y->shape.ToString()));
    if (g.opset() < 12)
      return absl::InvalidArgumentError("cross_entropy needs opset >= 12 (SoftmaxCrossEntropyLoss)");
    const int64_t rank = y->shape.rank();
    const int64_t axis = opt_.class_axis < 0 ? opt_.class_axis + rank : opt_.class_axis;
    if (axis < 1 || axis >= rank)
      return absl::InvalidArgumentError(absl::StrCat(
          "cross_entropy class axis ", opt_.class_axis, " is not a non-batch axis of '", y->name,
          "' ", y->shape.ToString()));
    std::vector<Dim> ld = y->shape.dims;
    ld.erase(ld.begin() + axis);
    Value* labels = g.AddValue(opt_.labels, DType::kI64, Shape(ld));
    g.AddInput(labels);
    Value* scores = y;
    Value* flat_labels = labels;
    if (axis == rank - 1 && rank > 2) {
      // Classes last (a language model's N x T x V): rows of one [N*T, V] matrix, contiguous,
      // rather than a Transpose to N x V x T whose softmax and gradient stride by T. The mean
      // over N*T rows equals the mean over [N, T].
      scores = b.Op("Flatten", {y}, {Attribute::Int("axis", rank - 1)});
      flat_labels = b.Op("Reshape", {labels, b.Ints({-1})});
    } else if (axis != 1) {  // SoftmaxCrossEntropyLoss reads classes on axis 1
      std::vector<int64_t> perm = {0, axis};
      for (int64_t d = 1; d < rank; ++d)
        if (d != axis) perm.push_back(d);
      std::vector<Dim> sd = {y->shape.dims[0], y->shape.dims[axis]};
      sd.insert(sd.end(), ld.begin() + 1, ld.end());
      scores = g.AddValue(g.UniqueName("loss/classes_on_axis_1"), y->dtype, Shape(sd));
      g.AddNode("Transpose", {y}, {scores}, "loss/Transpose")->SetAttr(Attribute::Ints("perm", perm));
    }
    Node* n = g.AddNode("SoftmaxCrossEntropyLoss", {scores, flat_labels}, {loss}, "loss/SoftmaxCrossEntropyLoss");
    n->SetAttr(Attribute::String("reduction", "mean"));
    if (opt_.ignore_index) n->SetAttr(Attribute::Int("ignore_index", *opt_.ignore_index));
  } else if (opt_.kind == "mse" || opt_.kind == "l1" || opt_.kind == "bce_with_logits") {
    Value* labels = g.AddValue(opt_.labels, y->dtype, y->shape);
    g.AddInput(labels);
    Value* per_elem;
    if (opt_.kind == "mse") {
      Value* d = b.Sub(y, labels);
      per_elem = b.Mul(d, d);
    } else if (opt_.kind == "l1") {
      per_elem = b.Op("Abs", {b.Sub(y, labels)});
    } else {
      per_elem = b.Sub(b.Op("Softplus", {y}), b.Mul(y, labels));
    }
    Node* n = g.AddNode("ReduceMean", {per_elem}, {loss}, "loss/ReduceMean");
    n->SetAttr(Attribute::Int("keepdims", 0));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --loss='", opt_.kind,
        "' (cross_entropy, mse, l1, bce_with_logits or output:NAME)"));
  }
  g.AddOutput(loss);
  return true;
}

}  // namespace

std::unique_ptr<Pass> MakeLossPass(LossOptions options) {
  return std::make_unique<LossPass>(std::move(options));
}

MT_REGISTER_PASS(loss, [] { return MakeLossPass(LossOptions{}); });

}  // namespace mixtrain
