// CPU kernels for ops that produce tensors from attributes, shapes or scalars (Constant, Shape,
// Size, ConstantOfShape, Range), and Dropout: an identity (mask all true) in inference, and in
// training a mask from the counter-based Philox stream of kernels/common/rng.h keyed by the node's
// `seed` and a per-node step counter, so a run is reproducible and matches the CUDA kernel.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/ops/movement_params.h"
#include "graph/half.h"
#include "kernels/common/rng.h"
#include "kernels/cpu/movement_util.h"
#include "kernels/cpu/parallel.h"

namespace mixtrain {
namespace {

// Element i of a numeric tensor as double (Range's scalars, Dropout's ratio).
double ScalarAt(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: return t.as<const float>()[i];
    case DType::kF16: return HalfToFloat(t.as<const uint16_t>()[i]);
    case DType::kBF16: return BFloat16ToFloat(t.as<const uint16_t>()[i]);
    case DType::kF64: return t.as<const double>()[i];
    case DType::kI8: return t.as<const int8_t>()[i];
    case DType::kI32: return t.as<const int32_t>()[i];
    case DType::kI64: return static_cast<double>(t.as<const int64_t>()[i]);
    case DType::kU8:
    case DType::kBool: return t.as<const uint8_t>()[i];
    default: return 0;
  }
}

absl::Status Constant(KernelContext& ctx) {
  TensorView& out = *ctx.output(0);
  const Node& n = ctx.node();
  if (const Attribute* a = n.attr("value")) {
    if (a->t.nbytes() != out.nbytes()) return ctx.Error("output size differs from 'value'");
    std::memcpy(out.data, a->t.data(), out.nbytes());
  } else if (const Attribute* a = n.attr("value_float")) {
    *out.as<float>() = a->f;
  } else if (const Attribute* a = n.attr("value_floats")) {
    std::memcpy(out.data, a->floats.data(), a->floats.size() * sizeof(float));
  } else if (const Attribute* a = n.attr("value_int")) {
    *out.as<int64_t>() = a->i;
  } else if (const Attribute* a = n.attr("value_ints")) {
    std::memcpy(out.data, a->ints.data(), a->ints.size() * sizeof(int64_t));
  } else {
    return ctx.Error("needs one of value, value_float(s), value_int(s)");
  }
  return absl::OkStatus();
}

absl::Status ShapeOp(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  movement::Window w = movement::ShapeWindow(in.rank(), ctx.node().attr_int("start", 0),
                                             ctx.node().attr_int("end", in.rank()));
  if (out.numel() != w.end - w.begin) return ctx.Error("output length differs from the window");
  for (int64_t d = w.begin; d < w.end; ++d) out.as<int64_t>()[d - w.begin] = in.dims[d];
  return absl::OkStatus();
}

absl::Status Size(KernelContext& ctx) {
  *ctx.output(0)->as<int64_t>() = ctx.input(0)->numel();
  return absl::OkStatus();
}

absl::Status ConstantOfShape(KernelContext& ctx) {
  TensorView& out = *ctx.output(0);
  std::vector<uint8_t> value(DTypeSize(out.dtype), 0);
  if (const Attribute* a = ctx.node().attr("value")) {
    if (a->t.dtype() != out.dtype || a->t.numel() != 1)
      return ctx.Error("'value' must be one element of the output dtype");
    std::memcpy(value.data(), a->t.data(), value.size());
  }
  cpu_movement::FillElements(out.data, value.data(), value.size(), out.numel());
  return absl::OkStatus();
}

template <typename T>
void RangeFill(T* out, int64_t n, double start, double delta) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<double>(i) * delta);
}

absl::Status Range(KernelContext& ctx) {
  TensorView& out = *ctx.output(0);
  const TensorView& s = *ctx.input(0);
  const TensorView& d = *ctx.input(2);
  const int64_t n = out.numel();
  switch (out.dtype) {
    case DType::kF32: RangeFill(out.as<float>(), n, ScalarAt(s, 0), ScalarAt(d, 0)); break;
    case DType::kF64: RangeFill(out.as<double>(), n, ScalarAt(s, 0), ScalarAt(d, 0)); break;
    case DType::kI32: RangeFill(out.as<int32_t>(), n, ScalarAt(s, 0), ScalarAt(d, 0)); break;
    case DType::kI64: {
      // Exact integer arithmetic: int64 values past 2^53 do not survive a trip through double.
      const int64_t start = s.as<const int64_t>()[0], delta = d.as<const int64_t>()[0];
      for (int64_t i = 0; i < n; ++i) out.as<int64_t>()[i] = start + i * delta;
      break;
    }
    default:
      return ctx.Error(absl::StrCat("unsupported dtype ", DTypeName(out.dtype)));
  }
  return absl::OkStatus();
}

// y = x * mask / (1 - ratio), computed in `Compute` and rounded to `Storage` on store.
template <typename Storage, typename Compute, typename LoadFn, typename StoreFn>
void DropoutApply(const Storage* x, Storage* y, uint8_t* mask, int64_t n, uint64_t seed,
                  uint64_t step, float ratio, LoadFn load, StoreFn store) {
  const Compute scale = static_cast<Compute>(1.0) / (static_cast<Compute>(1.0) - ratio);
  const int64_t groups = (n + 3) / 4;
  ParallelFor(groups, kElementwiseGrain / 4, [&](int64_t b, int64_t e) {
    for (int64_t g = b; g < e; ++g) {
      uint32_t w[4];
      DropoutBits(seed, step, static_cast<uint64_t>(g), w);
      for (int64_t k = 0; k < 4 && 4 * g + k < n; ++k) {
        const int64_t i = 4 * g + k;
        const bool keep = UniformFromBits(w[k]) >= ratio;
        y[i] = store(keep ? static_cast<Compute>(load(x[i])) * scale : Compute(0));
        if (mask != nullptr) mask[i] = keep;
      }
    }
  });
}

// The default key when a Dropout node has no `seed`: FNV-1a of its name, so two unseeded nodes
// draw different masks and a rerun draws the same ones.
uint64_t NameSeed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

class DropoutKernel final : public OpKernel {
 public:
  explicit DropoutKernel(const Node& node)
      : seed_(node.has_attr("seed") ? static_cast<uint64_t>(node.attr_int("seed", 0))
                                    : NameSeed(node.name())) {}

  absl::Status Compute(KernelContext& ctx) override {
    const TensorView& x = *ctx.input(0);
    TensorView& y = *ctx.output(0);
    TensorView* mask = ctx.num_outputs() > 1 ? ctx.output(1) : nullptr;
    if (DTypeSize(x.dtype) == 0) return ctx.Error("cannot move string tensors");
    const TensorView* training = ctx.input(2);
    const bool train = training != nullptr && ScalarAt(*training, 0) != 0;
    const float ratio = ctx.input(1) != nullptr ? static_cast<float>(ScalarAt(*ctx.input(1), 0))
                                                : ctx.node().attr_float("ratio", 0.5f);
    if (!train || ratio == 0) {
      cpu_movement::CopyBytes(y.data, x.data, x.nbytes());
      if (mask != nullptr) std::memset(mask->data, 1, mask->numel());
      return absl::OkStatus();
    }
    if (!(ratio > 0 && ratio < 1))
      return ctx.Error(absl::StrCat("ratio ", ratio, " must lie in [0, 1) in training mode"));
    uint8_t* m = mask != nullptr ? mask->as<uint8_t>() : nullptr;
    const uint64_t step = ctx.run_index();
    const int64_t n = x.numel();
    switch (x.dtype) {
      case DType::kF32:
        DropoutApply<float, float>(x.as<const float>(), y.as<float>(), m, n, seed_, step, ratio,
                                   [](float v) { return v; }, [](float v) { return v; });
        break;
      case DType::kF64:
        DropoutApply<double, double>(x.as<const double>(), y.as<double>(), m, n, seed_, step,
                                     ratio, [](double v) { return v; }, [](double v) { return v; });
        break;
      case DType::kF16:
        DropoutApply<uint16_t, float>(x.as<const uint16_t>(), y.as<uint16_t>(), m, n, seed_, step,
                                      ratio, HalfToFloat, FloatToHalf);
        break;
      case DType::kBF16:
        DropoutApply<uint16_t, float>(x.as<const uint16_t>(), y.as<uint16_t>(), m, n, seed_, step,
                                      ratio, BFloat16ToFloat, FloatToBFloat16);
        break;
      default:
        return ctx.Error(absl::StrCat("training-mode dropout needs a float dtype, got ",
                                      DTypeName(x.dtype)));
    }
    return absl::OkStatus();
  }

 private:
  const uint64_t seed_;
};

}  // namespace

MT_REGISTER_KERNELS(movement_source) {
  r.Register({"Constant", "", DeviceType::kCPU, {}, -1, FnKernel(Constant)});
  r.Register({"Shape", "", DeviceType::kCPU, {}, 0, FnKernel(ShapeOp)});
  r.Register({"Size", "", DeviceType::kCPU, {}, 0, FnKernel(Size)});
  r.Register({"ConstantOfShape", "", DeviceType::kCPU, {}, -1, FnKernel(ConstantOfShape)});
  r.Register({"Range", "", DeviceType::kCPU, {DType::kF32, DType::kF64, DType::kI32, DType::kI64},
              0, FnKernel(Range)});
  r.Register({"Dropout", "", DeviceType::kCPU, {}, 0,
              [](const Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                return std::unique_ptr<OpKernel>(new DropoutKernel(node));
              }});
}

}  // namespace mixtrain
