// Shape and type inference for the less common ops that fill out ONNX coverage: unary math and
// activations (trig, Elu family, rounding, Sign), IsNaN/IsInf, broadcasting Mod/BitShift/PRelu,
// variadic Sum/Mean, the remaining Reduce* and ArgMin (same axes rules as ReduceMax/ArgMax, so
// they reuse those rules), per-axis normalizations (Hardmax, LpNormalization,
// InstanceNormalization, LRN, MeanVarianceNormalization), Trilu, ReverseSequence, Det, the
// signal windows, DFT, STFT, (Dynamic)QuantizeLinear/DequantizeLinear, MatMulInteger,
// QLinearMatMul and RNN/GRU/LSTM. Kernels: kernels/cpu/elementwise_unary_math.cc,
// elementwise_binary_math.cc, reduce_double.cc, axis_norm.cc, movement_rearrange.cc (Trilu,
// ReverseSequence), signal.cc (with Det), quantize.cc and rnn.cc.
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace {

absl::Status InferSame(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!x.present) return ctx.Error("needs input 0");
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  return absl::OkStatus();
}

// Unary ops defined on float tensors only.
absl::Status InferFloatUnary(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferSame(ctx));
  const DType t = ctx.input(0).dtype;
  if (t != DType::kUndefined && !IsFloat(t))
    return ctx.Error(absl::StrCat("input must be a float tensor, got ", DTypeName(t)));
  return absl::OkStatus();
}

absl::Status InferIsNanInf(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferFloatUnary(ctx));
  ctx.output(0).dtype = DType::kBool;
  return absl::OkStatus();
}

// Every input present, one dtype, numpy broadcasting of all shapes (Mod, BitShift, PRelu, Sum,
// Mean). PRelu's slope broadcasts to X only one way, which the kernel's layout checks.
absl::Status InferBroadcastAll(InferContext& ctx) {
  if (ctx.num_inputs() == 0) return ctx.Error("needs at least one input");
  Shape s;
  DType t = DType::kUndefined;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TypeInfo& in = ctx.input(i);
    if (!in.present) return ctx.Error(absl::StrCat("input ", i, " is required"));
    if (in.dtype != DType::kUndefined) {
      if (t != DType::kUndefined && in.dtype != t)
        return ctx.Error(absl::StrCat("inputs must have one dtype, got ", DTypeName(t), " and ",
                                      DTypeName(in.dtype)));
      t = in.dtype;
    }
    if (i == 0) {
      s = in.shape;
      continue;
    }
    auto b = BroadcastShapes(s, in.shape);
    if (!b.ok()) return ctx.Error(b.status().message());
    s = *std::move(b);
  }
  ctx.output(0).dtype = t;
  ctx.output(0).shape = std::move(s);
  return absl::OkStatus();
}

// PRelu before opset 7 applied a 1-D slope of C elements per channel (dim 1) rather than by
// numpy broadcasting; from opset 7 the slope broadcasts one way to X. Either way Y has X's shape.
absl::Status InferPRelu(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& slope = ctx.input(1);
  if (ctx.opset() >= 7 || !x.shape.rank_known || !slope.shape.rank_known ||
      slope.shape.rank() != 1 || x.shape.rank() < 2)
    return InferBroadcastAll(ctx);
  if (!x.present || !slope.present) return ctx.Error("needs inputs X and slope");
  const Dim& c = x.shape.dims[1];
  const Dim& n = slope.shape.dims[0];
  if (c.known() && n.known() && n.value != 1 && n.value != c.value)
    return ctx.Error(absl::StrCat("slope has ", n.value, " elements; X has ", c.value, " channels"));
  ctx.output(0).dtype = x.dtype;
  ctx.output(0).shape = x.shape;
  return absl::OkStatus();
}

// These reductions share ReduceMax's axes rules (attribute before opset 18, input after) and
// ArgMin shares ArgMax's; both rules live in graph/ops/reduce_ops.cc.
absl::Status InferAsReduceMax(InferContext& ctx) {
  static const OpSchema* rule = FindOpSchema("", "ReduceMax");
  MT_CHECK(rule != nullptr) << "ReduceMax has no shape rule";
  return rule->infer(ctx);
}

absl::Status InferAsArgMax(InferContext& ctx) {
  static const OpSchema* rule = FindOpSchema("", "ArgMax");
  MT_CHECK(rule != nullptr) << "ArgMax has no shape rule";
  return rule->infer(ctx);
}

absl::Status InferInstanceNorm(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferFloatUnary(ctx));
  if (!ctx.has_input(1) || !ctx.has_input(2)) return ctx.Error("needs inputs scale and B");
  const Shape& s = ctx.input(0).shape;
  if (s.rank_known && s.rank() < 2) return ctx.Error("input must have rank >= 2 (N, C, ...)");
  return absl::OkStatus();
}

absl::Status InferTrilu(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferSame(ctx));
  const Shape& s = ctx.input(0).shape;
  if (s.rank_known && s.rank() < 2) return ctx.Error("input must have rank >= 2");
  return absl::OkStatus();
}

absl::Status InferDet(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferFloatUnary(ctx));
  const Shape& s = ctx.input(0).shape;
  if (!s.rank_known) return absl::OkStatus();
  if (s.rank() < 2) return ctx.Error("input must have rank >= 2 ([..., M, M])");
  ctx.output(0).shape = Shape(std::vector<Dim>(s.dims.begin(), s.dims.end() - 2));
  return absl::OkStatus();
}

// Hann/Hamming/BlackmanWindow(size): a 1-D window of `size` elements in `output_datatype`.
absl::Status InferWindow(InferContext& ctx) {
  const TypeInfo& size = ctx.input(0);
  if (!size.present) return ctx.Error("needs input size");
  auto t = FromOnnxType(static_cast<int32_t>(ctx.node().attr_int("output_datatype", 1)));
  if (!t.ok()) return ctx.Error(t.status().message());
  ctx.output(0).dtype = *t;
  Dim n;
  if (size.value != nullptr && size.value->numel() == 1) {
    if (size.value->GetInt(0) < 0) return ctx.Error("size must be >= 0");
    n = Dim(size.value->GetInt(0));
  }
  ctx.output(0).shape = Shape({n});
  return absl::OkStatus();
}

// QuantizeLinear: x's shape in the zero point's dtype (uint8 without one).
absl::Status InferQuantize(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferSame(ctx));
  if (!ctx.has_input(1)) return ctx.Error("needs input y_scale");
  ctx.output(0).dtype = ctx.has_input(2) ? ctx.input(2).dtype : DType::kU8;
  return absl::OkStatus();
}

// DequantizeLinear: x's shape in the scale's (float) dtype.
absl::Status InferDequantize(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferSame(ctx));
  if (!ctx.has_input(1)) return ctx.Error("needs input x_scale");
  ctx.output(0).dtype = ctx.input(1).dtype;
  return absl::OkStatus();
}

// DynamicQuantizeLinear: y (uint8, x's shape), y_scale (f32 scalar), y_zero_point (u8 scalar).
absl::Status InferDynamicQuantize(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferFloatUnary(ctx));
  ctx.output(0).dtype = DType::kU8;
  for (size_t i = 1; i < ctx.num_outputs() && i < 3; ++i) {
    ctx.output(i).dtype = i == 1 ? DType::kF32 : DType::kU8;
    ctx.output(i).shape = Shape(std::vector<Dim>{});
  }
  return absl::OkStatus();
}

// DFT: the input's shape with dim `axis` set to dft_length (or dft_length / 2 + 1 when
// onesided) and a last dim of 2 (real, imaginary).
absl::Status InferDft(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferFloatUnary(ctx));
  const Shape& x = ctx.input(0).shape;
  if (!x.rank_known) return absl::OkStatus();
  const int64_t axis = ctx.node().attr_int("axis", 1);
  if (x.rank() < 3 || axis < 1 || axis >= x.rank() - 1)
    return ctx.Error("input must be [batch, ..., 1 or 2] with axis a signal dim");
  std::vector<Dim> out = x.dims;
  Dim n = out[axis];
  if (ctx.has_input(1)) {
    const TypeInfo& len = ctx.input(1);
    n = len.value != nullptr && len.value->numel() == 1 ? Dim(len.value->GetInt(0)) : Dim();
  }
  if (ctx.node().attr_int("onesided", 0) != 0) n = n.known() ? Dim(n.value / 2 + 1) : Dim();
  out[axis] = n;
  out.back() = Dim(2);
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

// STFT: [batch, frames, bins, 2] with frames = (length - frame_length) / frame_step + 1 and
// bins = frame_length / 2 + 1 (onesided) or frame_length; frame_length is input 3 or the
// window's length.
absl::Status InferStft(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferFloatUnary(ctx));
  const Shape& x = ctx.input(0).shape;
  if (!x.rank_known) return absl::OkStatus();
  if (x.rank() != 3) return ctx.Error("signal must be [batch, length, 1 or 2]");
  const TypeInfo& step = ctx.input(1);
  const TypeInfo& window = ctx.input(2);
  const TypeInfo& len = ctx.input(3);
  int64_t frame = -1, hop = -1;
  if (len.present && len.value != nullptr) frame = len.value->GetInt(0);
  if (!len.present && window.present && window.shape.fully_known() && window.shape.rank() == 1)
    frame = window.shape.dims[0].value;
  if (step.present && step.value != nullptr) hop = step.value->GetInt(0);
  Dim frames, bins;
  if (frame > 0 && hop > 0 && x.dims[1].known()) frames = Dim((x.dims[1].value - frame) / hop + 1);
  if (frame > 0) bins = Dim(ctx.node().attr_int("onesided", 1) != 0 ? frame / 2 + 1 : frame);
  ctx.output(0).shape = Shape({x.dims[0], frames, bins, Dim(2)});
  return absl::OkStatus();
}

// MatMulInteger (int32 out) and QLinearMatMul (y_zero_point's dtype): [batch..., M, N] from
// A [batch..., M, K] and B [batch..., K, N], the batch dims of the higher-rank side.
absl::Status InferQuantizedMatMul(InferContext& ctx) {
  const bool qlinear = ctx.node().op_type() == "QLinearMatMul";
  const TypeInfo& a = ctx.input(0);
  const TypeInfo& b = ctx.input(qlinear ? 3 : 1);
  if (!a.present || !b.present) return ctx.Error("needs inputs A and B");
  ctx.output(0).dtype = qlinear ? ctx.input(7).dtype : DType::kI32;
  if (!a.shape.rank_known || !b.shape.rank_known) return absl::OkStatus();
  if (a.shape.rank() < 2 || b.shape.rank() < 2) return ctx.Error("A and B must have rank >= 2");
  const Shape& big = a.shape.rank() >= b.shape.rank() ? a.shape : b.shape;
  std::vector<Dim> out(big.dims.begin(), big.dims.end() - 2);
  out.push_back(a.shape.dims[a.shape.rank() - 2]);
  out.push_back(b.shape.dims.back());
  ctx.output(0).shape = Shape(std::move(out));
  return absl::OkStatus();
}

// RNN, GRU, LSTM: Y [seq, dirs, batch, hidden] (layout 0) or [batch, seq, dirs, hidden];
// Y_h and LSTM's Y_c [dirs, batch, hidden] or [batch, dirs, hidden].
absl::Status InferRecurrent(InferContext& ctx) {
  MT_RETURN_IF_ERROR(InferFloatUnary(ctx));
  if (!ctx.has_input(1) || !ctx.has_input(2)) return ctx.Error("needs inputs X, W and R");
  const Node& n = ctx.node();
  const Shape& x = ctx.input(0).shape;
  const Shape& r = ctx.input(2).shape;
  Dim hid = n.has_attr("hidden_size") ? Dim(n.attr_int("hidden_size", 0))
            : (r.rank_known && r.rank() == 3 ? r.dims[2] : Dim());
  const Dim dirs(n.attr_string("direction", "forward") == "bidirectional" ? 2 : 1);
  const bool batch_major = n.attr_int("layout", 0) != 0;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    ctx.output(i).dtype = ctx.input(0).dtype;
    ctx.output(i).shape = Shape();
  }
  if (!x.rank_known) return absl::OkStatus();
  if (x.rank() != 3) return ctx.Error("X must have rank 3");
  const Dim seq = x.dims[batch_major ? 1 : 0], batch = x.dims[batch_major ? 0 : 1];
  ctx.output(0).shape = batch_major ? Shape({batch, seq, dirs, hid}) : Shape({seq, dirs, batch, hid});
  for (size_t i = 1; i < ctx.num_outputs() && i < 3; ++i)
    ctx.output(i).shape = batch_major ? Shape({batch, dirs, hid}) : Shape({dirs, batch, hid});
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(onnx_coverage_ops, {
    {"Sin", "", InferFloatUnary},         {"Cos", "", InferFloatUnary},
    {"Tan", "", InferFloatUnary},         {"Asin", "", InferFloatUnary},
    {"Acos", "", InferFloatUnary},        {"Atan", "", InferFloatUnary},
    {"Sinh", "", InferFloatUnary},        {"Cosh", "", InferFloatUnary},
    {"Asinh", "", InferFloatUnary},       {"Acosh", "", InferFloatUnary},
    {"Atanh", "", InferFloatUnary},
    {"Elu", "", InferFloatUnary, kOpElementwiseUnary},
    {"Selu", "", InferFloatUnary, kOpElementwiseUnary},
    {"Celu", "", InferFloatUnary},
    {"HardSigmoid", "", InferFloatUnary, kOpElementwiseUnary},
    {"HardSwish", "", InferFloatUnary, kOpElementwiseUnary},
    {"Softsign", "", InferFloatUnary, kOpElementwiseUnary},
    {"ThresholdedRelu", "", InferFloatUnary},
    {"Mish", "", InferFloatUnary},
    {"Floor", "", InferFloatUnary, kOpElementwiseUnary},
    {"Ceil", "", InferFloatUnary, kOpElementwiseUnary},
    {"Round", "", InferFloatUnary, kOpElementwiseUnary},
    {"Shrink", "", InferSame},
    {"Sign", "", InferSame, kOpElementwiseUnary},
    {"IsNaN", "", InferIsNanInf},         {"IsInf", "", InferIsNanInf},
    {"Mod", "", InferBroadcastAll},       {"BitShift", "", InferBroadcastAll},
    {"PRelu", "", InferPRelu},            {"Sum", "", InferBroadcastAll},
    {"Mean", "", InferBroadcastAll},
    {"ReduceMin", "", InferAsReduceMax},  {"ReduceProd", "", InferAsReduceMax},
    {"ReduceL1", "", InferAsReduceMax},   {"ReduceL2", "", InferAsReduceMax},
    {"ReduceLogSum", "", InferAsReduceMax},
    {"ReduceLogSumExp", "", InferAsReduceMax},
    {"ArgMin", "", InferAsArgMax},
    {"Hardmax", "", InferFloatUnary},     {"LpNormalization", "", InferFloatUnary},
    {"InstanceNormalization", "", InferInstanceNorm},
    {"Trilu", "", InferTrilu},           {"LRN", "", InferFloatUnary},
    {"MeanVarianceNormalization", "", InferFloatUnary},
    {"ReverseSequence", "", InferSame},   {"Det", "", InferDet},
    {"HannWindow", "", InferWindow},      {"HammingWindow", "", InferWindow},
    {"BlackmanWindow", "", InferWindow},
    {"QuantizeLinear", "", InferQuantize},
    {"DequantizeLinear", "", InferDequantize},
    {"DynamicQuantizeLinear", "", InferDynamicQuantize},
    {"MatMulInteger", "", InferQuantizedMatMul},
    {"QLinearMatMul", "", InferQuantizedMatMul},
    {"RNN", "", InferRecurrent},          {"GRU", "", InferRecurrent},
    {"LSTM", "", InferRecurrent},         {"DFT", "", InferDft},
    {"STFT", "", InferStft},
});

}  // namespace mixtrain
