// Shape and type inference for softmax, normalization and loss ops: Softmax, LogSoftmax,
// LayerNormalization, BatchNormalization, GroupNormalization, SoftmaxCrossEntropyLoss,
// NegativeLogLikelihoodLoss.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

absl::Status InferSameAsInput(InferContext& ctx) {
  if (!ctx.has_input(0)) return ctx.Error("needs input 0");
  ctx.output(0).dtype = ctx.input(0).dtype;
  ctx.output(0).shape = ctx.input(0).shape;
  return absl::OkStatus();
}

// Y like X; Mean and InvStdDev in stash_type with the normalized dims kept as 1.
absl::Status InferLayerNorm(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present || !ctx.has_input(1)) return ctx.Error("needs inputs X and Scale");
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  auto stash = FromOnnxType(static_cast<int32_t>(ctx.node().attr_int("stash_type", 1)));
  if (!stash.ok() || !IsFloat(*stash))
    return ctx.Error(absl::StrCat("unsupported stash_type ", ctx.node().attr_int("stash_type", 1)));
  Shape stats;
  if (x.shape.rank_known) {
    auto axis = movement::NormalizeAxis(ctx.node().attr_int("axis", -1), x.shape.rank());
    if (!axis.ok()) return ctx.Error(std::string(axis.status().message()));
    std::vector<Dim> d = x.shape.dims;
    for (int64_t i = *axis; i < x.shape.rank(); ++i) d[i] = Dim(1);
    stats = Shape(std::move(d));
  }
  for (size_t i = 1; i < 3 && i < ctx.num_outputs(); ++i) {
    ctx.output(i).dtype = *stash;
    ctx.output(i).shape = stats;
  }
  return absl::OkStatus();
}

// Y like X; the statistics outputs (training forms) are per channel, typed like input_mean.
absl::Status InferBatchNorm(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present || ctx.num_inputs() < 5) return ctx.Error("needs inputs X, scale, B, mean, var");
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  Dim c;
  if (x.shape.rank_known && x.shape.rank() >= 2) c = x.shape.dims[1];
  else if (ctx.input(1).shape.rank_known && ctx.input(1).shape.rank() == 1)
    c = ctx.input(1).shape.dims[0];
  const DType stat_type = ctx.input(3).dtype != DType::kUndefined ? ctx.input(3).dtype : x.dtype;
  for (size_t i = 1; i < ctx.num_outputs(); ++i) {
    ctx.output(i).dtype = stat_type;
    ctx.output(i).shape = Shape(std::vector<Dim>{c});
  }
  return absl::OkStatus();
}

// Y like X. num_groups must divide C; scale and bias hold one entry per channel (opset 21, which
// added stash_type) or, before opset 21, per group.
absl::Status InferGroupNorm(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present || !ctx.has_input(1) || !ctx.has_input(2))
    return ctx.Error("needs inputs X, scale and bias");
  const Node& n = ctx.node();
  if (!n.has_attr("num_groups")) return ctx.Error("needs the num_groups attribute");
  const int64_t groups = n.attr_int("num_groups", 0);
  if (groups <= 0) return ctx.Error(absl::StrCat("num_groups must be positive, got ", groups));
  auto stash = FromOnnxType(static_cast<int32_t>(n.attr_int("stash_type", 1)));
  if (!stash.ok() || !IsFloat(*stash))
    return ctx.Error(absl::StrCat("unsupported stash_type ", n.attr_int("stash_type", 1)));
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  if (!x.shape.rank_known) return absl::OkStatus();
  if (x.shape.rank() < 2) return ctx.Error("X must be [N, C, ...]");
  const Dim& c = x.shape.dims[1];
  if (c.known() && c.value % groups != 0)
    return ctx.Error(absl::StrCat("num_groups ", groups, " does not divide C=", c.value));
  // Opset 18 scales per group; an opset-18 model with per-channel scale and bias (what opset 21
  // means) is read that way too, the sizes telling which.
  const bool per_group_ok = ctx.opset() < 21;
  for (size_t i = 1; i < 3; ++i) {
    const Shape& s = ctx.input(i).shape;
    if (!s.rank_known || !s.fully_known() || !c.known()) continue;
    const int64_t k = s.rank() == 1 ? s.dims[0].value : -1;
    if (k != c.value && !(per_group_ok && k == groups))
      return ctx.Error(absl::StrCat(i == 1 ? "scale" : "bias", " has shape ", s.ToString(),
                                    ", expected [", c.value, "]",
                                    per_group_ok ? absl::StrCat(" or [", groups, "]") : ""));
  }
  return absl::OkStatus();
}

// loss: like the labels for reduction=none, else a scalar; log_prob (SCE only) like the scores.
absl::Status InferLoss(InferContext& ctx) {
  const TypeInfo& scores = ctx.input(0);
  const TypeInfo& labels = ctx.input(1);
  if (!scores.present || !labels.present) return ctx.Error("needs inputs scores and labels");
  if (labels.dtype != DType::kUndefined && labels.dtype != DType::kI32 &&
      labels.dtype != DType::kI64)
    return ctx.Error(absl::StrCat("labels must be int32 or int64, got ", DTypeName(labels.dtype)));
  const std::string reduction = ctx.node().attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return ctx.Error(absl::StrCat("unknown reduction '", reduction, "'"));
  if (scores.shape.rank_known && scores.shape.rank() < 2)
    return ctx.Error(absl::StrCat("scores must be [N, C, ...], got ", scores.shape.ToString()));
  ctx.output(0).dtype = scores.dtype;
  if (reduction != "none") {
    ctx.output(0).shape = Shape(std::vector<Dim>{});
  } else if (scores.shape.rank_known) {
    std::vector<Dim> d = scores.shape.dims;
    d.erase(d.begin() + 1);
    ctx.output(0).shape = Shape(std::move(d));
  } else {
    ctx.output(0).shape = labels.shape;
  }
  if (ctx.num_outputs() > 1) {
    ctx.output(1).dtype = scores.dtype;
    ctx.output(1).shape = scores.shape;
  }
  return absl::OkStatus();
}

// ai.mixtrain.SoftmaxCrossEntropyLoss: ONNX's, reading scores of any float type and writing the
// loss in fp32 (no log_prob output): the CPU step's loss on AMP's low-type logits without an fp32
// copy of them (kernels/cpu/passes/loss_reads_low.cc).
absl::Status InferLossToFloat(InferContext& ctx) {
  if (ctx.num_outputs() > 1) return ctx.Error("has one output, the loss");
  MT_RETURN_IF_ERROR(InferLoss(ctx));
  ctx.output(0).dtype = DType::kF32;
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(nn_norm_ops, {{"Softmax", "", InferSameAsInput},
                                     {"LogSoftmax", "", InferSameAsInput},
                                     {"LayerNormalization", "", InferLayerNorm},
                                     {"BatchNormalization", "", InferBatchNorm, 0, InputBits({1, 2, 3, 4})},
                                     {"GroupNormalization", "", InferGroupNorm},
                                     {"SoftmaxCrossEntropyLoss", "", InferLoss},
                                     {"SoftmaxCrossEntropyLoss", "ai.mixtrain", InferLossToFloat},
                                     {"NegativeLogLikelihoodLoss", "", InferLoss}});

}  // namespace mixtrain
