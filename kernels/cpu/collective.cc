// ai.mixtrain.AllReduce on the CPU (graph/ops/collective_ops.cc): the f32 inputs are packed into
// one buffer, reduced by one call of the session's communicator, and unpacked (divided by the rank
// count when averaging) into the outputs; bool inputs are ANDed over the ranks. The buffer is the
// kernel's own and grows only on the first run, so a step allocates nothing.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/registry.h"
#include "mixtrain/communicator.h"

namespace mixtrain {
namespace {

class AllReduceKernel final : public OpKernel {
 public:
  explicit AllReduceKernel(const Node& node)
      : average_(node.attr_int("average", 1) != 0), fixed_order_(node.attr_int("fixed_order", 0) != 0) {}

  absl::Status Compute(KernelContext& ctx) override {
    const size_t n = ctx.num_outputs();
    Communicator* comm = ctx.communicator();
    if (comm == nullptr)
      return ctx.Error("no communicator: a data-parallel step runs only in a Trainer created with one");
    const bool active = ctx.num_inputs() == n || ctx.input(n) == nullptr || ctx.input(n)->as<uint8_t>()[0] != 0;
    size_t floats = 0;
    for (size_t i = 0; i < n; ++i)
      floats += ctx.input(i)->dtype == DType::kF32 ? static_cast<size_t>(ctx.input(i)->numel())
                                                   : static_cast<size_t>(ctx.input(i)->numel() > 0);
    if (!active) {
      for (size_t i = 0; i < n; ++i)
        if (ctx.output(i)->data != ctx.input(i)->data)
          std::memcpy(ctx.output(i)->data, ctx.input(i)->data, ctx.input(i)->nbytes());
      return absl::OkStatus();
    }
    // Pack: f32 values as they are; a bool tensor as one float, 1 when any element is false, so
    // the summed count is 0 exactly when every rank's tensor is all true.
    if (buffer_.size() < floats) buffer_.resize(floats);
    size_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      const TensorView* x = ctx.input(i);
      if (x->dtype == DType::kF32) {
        std::memcpy(buffer_.data() + at, x->data, x->nbytes());
        at += static_cast<size_t>(x->numel());
      } else if (x->numel() > 0) {
        bool all = true;
        for (int64_t j = 0; j < x->numel(); ++j) all &= x->as<uint8_t>()[j] != 0;
        buffer_[at++] = all ? 0.0f : 1.0f;
      }
    }
    if (absl::Status s = comm->AllReduceSum(buffer_.data(), floats, fixed_order_); !s.ok())
      return ctx.Error(s.message());
    const float scale = average_ ? 1.0f / static_cast<float>(comm->size()) : 1.0f;
    at = 0;
    for (size_t i = 0; i < n; ++i) {
      TensorView* y = ctx.output(i);
      if (y->dtype == DType::kF32) {
        float* out = y->as<float>();
        const int64_t m = y->numel();
        const float* in = buffer_.data() + at;
        if (scale == 1.0f) {
          std::memcpy(out, in, static_cast<size_t>(m) * sizeof(float));
        } else {
          for (int64_t j = 0; j < m; ++j) out[j] = in[j] * scale;
        }
        at += static_cast<size_t>(m);
      } else if (y->numel() > 0) {
        const uint8_t all = buffer_[at++] == 0.0f;
        std::memset(y->data, all, static_cast<size_t>(y->numel()));
      }
    }
    return absl::OkStatus();
  }

 private:
  bool average_, fixed_order_;
  std::vector<float> buffer_;
};

}  // namespace

MT_REGISTER_KERNELS(collective) {
  r.Register({"AllReduce", "ai.mixtrain", DeviceType::kCPU, {DType::kF32, DType::kBool}, 0,
              [](const Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                return std::make_unique<AllReduceKernel>(node);
              }});
}

}  // namespace mixtrain
