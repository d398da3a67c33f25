// conv_layout_train (training pass, after the backward fusions): the training step's conv
// region runs channel-blocked, [N, C/b, sp..., b] (oneDNN's nC<sp>16c with b = 16 on AVX-512
// CPUs, nC<sp>8c with b = 8 on AVX2 ones: the layouts its kernels there use), forward and
// backward:
//   FusedConv / Conv(X, W, B, Z)  => FusedConv(X', W, B, Z', channel_block = b)
//   MaxPool(X)                    => ai.mixtrain MaxPool(X', channel_block = b)
//   MaxPoolGrad(dY, X)            => MaxPoolGrad(dY', X', channel_block = b)
//   ConvGrad(dY, X, W)            => ConvGrad(dY', X', W, channel_block = b)
// where ' is the blocked form of a value: the blocked output of the region op that made it, or,
// at the region's edge, one conversion (conv_pass::ToBlocked) shared by every region reader.
// A region output that something else reads (the classifier's Flatten, a graph output) is
// converted back once (conv_pass::FromBlocked). W, B and the weight gradients keep ONNX's
// layout: the parameters, their moments and checkpoints do not change.
//
// Why: with NC<sp> activations every oneDNN conv primitive reorders its operands into the
// blocked layout its kernels want and its results back, each step. CIFAR-style CNN at batch 256
// (AVX-512, DNNL_VERBOSE): 19 ms of reorders in a 62 ms fp32 step, 10 of 33 ms in bf16; AVX2
// (capped): about a fifth of the fp32 step. In the blocked layout the backward-data and
// backward-weights primitives read dY, X and write dX as they are, and the pools stream b
// channels per vector.
//
// The region is the largest set of these ops that can run blocked: every conv has group 1 and
// output channels in multiples of b, and reads a region op's output with channels in multiples
// of b or, as an image's first conv, at most 4 NC<sp> channels (then its ConvGrad computes no
// dX) and its output feeds another region op; every MaxPool reads a region op's output; every
// MaxPoolGrad's X is one, every ConvGrad's dY too. Ops that do not fit (a classifier conv with
// 10 output channels, a grouped conv, a lone stem conv before a BatchNorm or a LayerNorm, which
// gains nothing: its conversions would only replace oneDNN's reorders, and measured slower on
// timm's ViT and MobileNetV3 exports, 0.34 -> 0.40-0.44 and 9.0-10.5 -> 10.6-11.0 ms per step)
// stay in ONNX's layout, with conversions where they meet the region. With b = 8 the region must be fp32 (oneDNN has no
// AVX2 bf16 convolutions to keep fed).
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kernels/cpu/passes/cpu_passes.h"
#include "passes/conv_pass_util.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

using conv_pass::BlockedShape;
using conv_pass::FromBlocked;
using conv_pass::IsMixtrain;
using conv_pass::IsOnnx;
using conv_pass::ToBlocked;

// An image's first conv reads this many NC<sp> channels at most into blocked Y.
constexpr int64_t kMaxPlainInputChannels = 4;

enum class Kind { kConv, kPool, kPoolGrad, kConvGrad };

struct RegionOp {
  Node* node;
  Kind kind;
  bool plain_x = false;  // a conv (or its ConvGrad) reading an image's few NC<sp> channels
};

// Known dtype (fp32, or bf16 with 16-channel blocks: oneDNN's AVX2 kernels have no bf16), rank
// 3-5 and channel and spatial dims.
bool Blockable(const Value* v, int64_t block) {
  if (v == nullptr || !v->shape.rank_known || v->shape.rank() < 3 || v->shape.rank() > 5)
    return false;
  if (v->dtype != DType::kF32 && !(v->dtype == DType::kBF16 && block == 16)) return false;
  for (int64_t i = 1; i < v->shape.rank(); ++i)
    if (!v->shape.dims[i].known()) return false;
  return true;
}
int64_t Channels(const Value* v) { return v->shape.dims[1].value; }

bool Unlaid(const Node& n) {
  return n.attr_int("channels_last", 0) == 0 && n.attr_int("channel_block", 0) == 0;
}

// The region op `n` would be, if it is one of the four kinds (conditions checked later).
bool Candidate(const Node& n, Kind* kind) {
  if (n.num_inputs() == 0 || n.input(0) == nullptr || n.num_outputs() == 0) return false;
  if ((IsOnnx(n, "Conv") && n.num_outputs() == 1 && n.input(1) != nullptr) ||
      (IsMixtrain(n, "FusedConv") && Unlaid(n) && !n.has_attr("pool_kernel_shape"))) {
    *kind = Kind::kConv;
  } else if (IsOnnx(n, "MaxPool") && (n.num_outputs() == 1 || n.output(1) == nullptr)) {
    *kind = Kind::kPool;
  } else if (IsMixtrain(n, "MaxPoolGrad") && Unlaid(n) && n.num_inputs() == 2) {
    *kind = Kind::kPoolGrad;
  } else if (IsMixtrain(n, "ConvGrad") && Unlaid(n) && n.num_inputs() == 3) {
    *kind = Kind::kConvGrad;
  } else {
    return false;
  }
  return true;
}

class ConvLayoutTrainingPass final : public Pass {
 public:
  explicit ConvLayoutTrainingPass(int64_t block) : block_(block) {}
  absl::string_view name() const override { return "conv_layout_train"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    const int64_t block = block_;  // 16, 8 or none
    if (block != 16 && block != 8) return false;
    MT_RETURN_IF_ERROR(g.TopoSort());
    std::vector<RegionOp> ops;
    std::unordered_set<const Node*> region;
    for (const auto& n : g.nodes()) {
      Kind kind;
      if (!Candidate(*n, &kind)) continue;
      ops.push_back({n.get(), kind});
      region.insert(n.get());
    }
    // Whether `v` comes blocked out of the region (its first output, blockable channels).
    const auto blocked = [&](const Value* v) {
      return v != nullptr && v->producer != nullptr && region.contains(v->producer) &&
             v->producer->output(0) == v && Blockable(v, block) && Channels(v) % block == 0;
    };
    // Whether `op` can run blocked with the region as it stands (plain_x set on the way).
    const auto fits = [&](RegionOp& op) {
      Node& n = *op.node;
      if (n.output(0) != nullptr && !Blockable(n.output(0), block)) return false;
      switch (op.kind) {
        case Kind::kConv: {
          const Value* x = n.input(0);
          if (n.attr_int("group", 1) != 1 || !Blockable(x, block) || n.output(0) == nullptr ||
              Channels(n.output(0)) % block != 0)
            return false;
          if (n.num_inputs() > 3 && n.input(3) != nullptr && !Blockable(n.input(3), block)) return false;
          op.plain_x = !blocked(x);
          if (op.plain_x && Channels(x) > kMaxPlainInputChannels) return false;
          // A conv whose output no region op reads would only move its reorder into ours.
          return std::any_of(n.output(0)->consumers.begin(), n.output(0)->consumers.end(),
                             [&](const Node* c) { return region.contains(c); });
        }
        case Kind::kPool:
          return blocked(n.input(0));
        case Kind::kPoolGrad:
          return blocked(n.input(1)) && Blockable(n.input(0), block);
        case Kind::kConvGrad: {
          const Value* dy = n.input(0);
          const Value* x = n.input(1);
          // dY from the region too (as above: else its conversion only replaces oneDNN's).
          if (n.attr_int("group", 1) != 1 || !blocked(dy) || !Blockable(x, block)) return false;
          op.plain_x = !blocked(x);
          return !op.plain_x || (Channels(x) <= kMaxPlainInputChannels && n.output(0) == nullptr);
        }
      }
      return false;
    };
    // The largest region where every op fits: dropping one op can make its readers' inputs
    // plain, so drop until nothing changes.
    for (bool dropped_one = true; dropped_one;) {
      dropped_one = false;
      for (auto it = ops.begin(); it != ops.end();) {
        if (fits(*it)) {
          ++it;
          continue;
        }
        region.erase(it->node);
        it = ops.erase(it);
        dropped_one = true;
      }
    }
    if (std::none_of(ops.begin(), ops.end(), [](const RegionOp& op) { return op.kind == Kind::kConv; }))
      return false;

    // Plain values read as blocked, converted once; region outputs as they come.
    std::unordered_map<const Value*, Value*> blocked_of;
    const auto blocked_form = [&](Value* v) {
      auto it = blocked_of.find(v);
      if (it != blocked_of.end()) return it->second;
      Value* b = ToBlocked(g, v, block);
      blocked_of[v] = b;
      return b;
    };
    std::vector<Value*> dropped;  // region outputs nothing outside the region reads
    for (RegionOp& op : ops) {
      Node* n = op.node;
      std::vector<Value*> inputs = n->inputs();
      switch (op.kind) {
        case Kind::kConv:
          if (!op.plain_x) inputs[0] = blocked_form(inputs[0]);
          if (inputs.size() > 3 && inputs[3] != nullptr) inputs[3] = blocked_form(inputs[3]);
          break;
        case Kind::kPool:
          inputs[0] = blocked_form(inputs[0]);
          break;
        case Kind::kPoolGrad:
          inputs[0] = blocked_form(inputs[0]);
          inputs[1] = blocked_form(inputs[1]);
          break;
        case Kind::kConvGrad:
          inputs[0] = blocked_form(inputs[0]);
          if (!op.plain_x) inputs[1] = blocked_form(inputs[1]);
          break;
      }
      Value* y = n->output(0);
      std::vector<Value*> outputs = n->outputs();
      if (y != nullptr) {
        outputs[0] = g.AddValue(g.UniqueName(y->name + "_blocked"), y->dtype, BlockedShape(y->shape, block));
        blocked_of[y] = outputs[0];
      }
      // The plain form is still wanted where a reader outside the region (or the caller) uses it.
      bool plain_wanted = false;
      if (y != nullptr) {
        plain_wanted = g.IsGraphOutput(y);
        for (const Node* c : y->consumers) plain_wanted |= !region.contains(c);
      }
      const bool conv_like = op.kind == Kind::kConv || op.kind == Kind::kConvGrad;
      Node* m = n;
      if (!n->domain().empty() && n->domain() != "ai.onnx") {
        for (size_t i = 0; i < inputs.size(); ++i)
          if (inputs[i] != n->input(i)) g.SetInput(n, i, inputs[i]);
        if (y != nullptr) g.SetNodeOutput(n, 0, outputs[0]);
      } else {  // ONNX Conv / MaxPool: their blocked forms are ai.mixtrain ops
        const std::string name = n->name();
        const std::string op_type = op.kind == Kind::kConv ? "FusedConv" : n->op_type();
        std::vector<Attribute> attrs = n->attributes();
        region.erase(n);
        g.RemoveNode(n);
        m = g.AddNode(op_type, inputs, outputs, name, "ai.mixtrain");
        for (Attribute& a : attrs) m->SetAttr(std::move(a));
        region.insert(m);
        op.node = m;
      }
      m->SetAttr(Attribute::Int("channel_block", block));
      if (conv_like) m->SetAttr(Attribute::Int("input_channel_block", op.plain_x ? 0 : block));
      if (y == nullptr) continue;
      if (plain_wanted) {
        FromBlocked(g, outputs[0], y);
      } else {
        dropped.push_back(y);
      }
    }
    for (Value* y : dropped)
      if (y->producer == nullptr && y->consumers.empty()) g.RemoveValue(y);
    if (!g.opset_imports.contains("ai.mixtrain")) g.opset_imports["ai.mixtrain"] = 1;
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }

 private:
  int64_t block_;
};

}  // namespace

std::unique_ptr<Pass> MakeConvLayoutTrainingPass(int64_t block) { return std::make_unique<ConvLayoutTrainingPass>(block); }

}  // namespace mixtrain
