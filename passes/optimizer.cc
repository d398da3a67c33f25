// The update half of the training step: overflow check, unscale, clipping, optimizer nodes,
// step counter, loss-scale update. Rules, in graph order:
//   all_finite = AllFinite(g_1..g_n)                     (on the raw, possibly scaled, gradients)
//   g_i       *= 1/loss_scale                            (when unscaling)
//   g_i       *= min(1, max_norm / (||g||_2 + 1e-6))     (when clipping; on unscaled gradients)
//   X_1', state_1', X_2', ... = Opt(lr, step, skip = !all_finite, X_1, g_1, state_1, X_2, ...)
//                                              (one multi-tensor node)     -> "state/..." outputs
//   step'      = step + (all_finite ? 1 : 0)
//   loss_scale', good' = UpdateLossScale(!all_finite, loss_scale, good)     (dynamic scaling)
//   other state'  = found_inf ? state : state'                            (BatchNorm statistics)
// With accumulation, gradients add into "accum/<param>" state and the rest happens on apply=true.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "passes/passes.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

constexpr char kMt[] = "ai.mixtrain";

class OptimizerPass final : public Pass {
 public:
  explicit OptimizerPass(OptimizerOptions o) : o_(o) {}
  absl::string_view name() const override { return "optimizer"; }

  // The step, in order: gradients read, accumulated, checked for overflow (state kept on a bad
  // step), unscaled, clipped; each parameter updated; the step counter and the loss scale moved.
  absl::StatusOr<bool> Run(Graph& g) override {
    g_ = &g;
    MT_ASSIGN_OR_RETURN(std::vector<Value*> keep_outputs, TakeGradients(g));
    Value* lr = g.AddValue(kLrName, DType::kF32, Shape(std::vector<Dim>{}));
    g.AddInput(lr);
    Value* step = g.AddInitializer(kStepName, Tensor::ScalarI64(0));
    Value* apply = Accumulate(g);
    ReduceGradients(g, apply);
    Value* found_inf = CheckOverflow(g, keep_outputs, apply);
    Value* all_finite = found_inf->producer->input(0);
    Value* good_step =
        apply ? Op("And", {all_finite, apply}, absl::StrCat(kAccumNodePrefix, "apply_and_finite")) : all_finite;
    Value* skip = apply ? Op("Not", {good_step}, absl::StrCat(kAccumNodePrefix, "skip")) : found_inf;
    MT_RETURN_IF_ERROR(Unscale(g));
    Clip(g);
    AddUpdates(lr, step, skip);
    // step' = step + good_step
    Node* as_int = g.AddNode("Cast", {good_step}, 1, absl::StrCat(kStepNodePrefix, "as_int"));
    as_int->SetAttr(Attribute::Int("to", ToOnnxType(DType::kI64)));
    State(Op("Add", {step, as_int->output(0)}, absl::StrCat(kStepNodePrefix, "next")), step);
    // skipped' = skipped + (this update was skipped for an overflow): read when the trainer is
    // asked, so a step on a GPU need not copy found_inf back (a host sync per step).
    Value* skipped = g.AddInitializer(kSkippedStepsName, Tensor::ScalarI64(0));
    Value* overflowed = apply ? Op("And", {found_inf, apply}, absl::StrCat(kAmpNodePrefix, "skipped_now")) : found_inf;
    Node* skipped_int = g.AddNode("Cast", {overflowed}, 1, absl::StrCat(kAmpNodePrefix, "skipped_as_int"));
    skipped_int->SetAttr(Attribute::Int("to", ToOnnxType(DType::kI64)));
    State(Op("Add", {skipped, skipped_int->output(0)}, absl::StrCat(kAmpNodePrefix, "skipped_next")), skipped);
    MT_RETURN_IF_ERROR(UpdateLossScale(g, found_inf, apply));
    MT_RETURN_IF_ERROR(g.TopoSort());
    return true;
  }

 private:
  // The parameters and their gradients (params_, grads_), in graph-output order; the gradient
  // outputs are consumed here, not returned. Returns the outputs that stay.
  absl::StatusOr<std::vector<Value*>> TakeGradients(Graph& g) {
    std::vector<Value*> keep_outputs;
    for (Value* out : g.outputs()) {
      if (out->name.rfind(kGradPrefix, 0) != 0) {
        keep_outputs.push_back(out);
        continue;
      }
      Value* param = g.FindValue(out->name.substr(std::string(kGradPrefix).size()));
      if (param == nullptr || !param->is_initializer())
        return absl::InvalidArgumentError(absl::StrCat("gradient '", out->name, "' names no initializer"));
      if (param->name == kLossScaleName || param->name == kStepName || param->name == kGoodStepsName ||
          param->name == kSkippedStepsName)
        return absl::InvalidArgumentError(absl::StrCat(
            "'", param->name, "' is training state, not a parameter: freeze it in autodiff"));
      if (param->dtype != DType::kF32 || out->dtype != DType::kF32)
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", param->name, "' and its gradient must be f32 (fp32 master weights)"));
      params_.push_back(param);
      grads_.push_back(out);
    }
    if (params_.empty()) return absl::InvalidArgumentError("no gradients: run the autodiff pass first");
    g.mutable_outputs() = keep_outputs;
    return keep_outputs;
  }

  // Accumulation over N micro-batches: g_total = accum + g; accum' = apply ? 0 : g_total; the
  // update uses g_total / N. Returns the `apply` input (null without accumulation).
  Value* Accumulate(Graph& g) {
    if (o_.accumulate <= 1) return nullptr;
    Value* apply = g.AddValue(kApplyName, DType::kBool, Shape(std::vector<Dim>{}));
    g.AddInput(apply);
    // The accumulators first: they are named after their parameters (checkpoints read them so),
    // the constants take whatever name is left (a parameter named "zero" has accum/zero).
    std::vector<Value*> accs;
    for (Value* param : params_)
      accs.push_back(g.AddInitializer(absl::StrCat(kAccumPrefix, param->name),
                                      Tensor(DType::kF32, param->initializer->dims())));
    Value* zero = Const(absl::StrCat(kAccumNodePrefix, "zero"), 0.0f);
    Value* inv_n = Const(absl::StrCat(kAccumNodePrefix, "inv_n"), 1.0f / static_cast<float>(o_.accumulate));
    for (size_t i = 0; i < params_.size(); ++i) {
      Value* param = params_[i];
      Value* acc = accs[i];
      Value* total = Op("Add", {acc, grads_[i]}, absl::StrCat(kAccumNodePrefix, "add/", param->name));
      State(Op("Where", {apply, zero, total}, absl::StrCat(kAccumNodePrefix, "reset/", param->name)), acc);
      grads_[i] = Op("Mul", {total, inv_n}, absl::StrCat(kAccumNodePrefix, "mean/", param->name));
    }
    return apply;
  }

  // Data parallel: grads_ averaged over the ranks, in buckets of at most bucket_bytes taken from
  // the last parameter back (the order the backward produces them). With accumulation only the
  // micro-batches that apply exchange anything (`apply` is the nodes' `active` input).
  void ReduceGradients(Graph& g, Value* apply) {
    if (!o_.data_parallel) return;
    std::vector<std::vector<size_t>> buckets;
    int64_t bytes = 0;
    for (size_t k = grads_.size(); k-- > 0;) {
      const int64_t b = NumElements(params_[k]->initializer->dims()) * 4;
      if (buckets.empty() || (bytes > 0 && bytes + b > o_.bucket_bytes)) {
        buckets.emplace_back();
        bytes = 0;
      }
      buckets.back().push_back(k);
      bytes += b;
    }
    for (size_t b = 0; b < buckets.size(); ++b) {
      std::vector<Value*> ins;
      for (size_t k : buckets[b]) ins.push_back(grads_[k]);
      std::vector<Value*> outs = AllReduce(g, ins, apply, absl::StrCat(kDataParallelNodePrefix, "allreduce/", b));
      for (size_t j = 0; j < outs.size(); ++j) grads_[buckets[b][j]] = outs[j];
    }
  }

  // One ai.mixtrain.AllReduce over `ins` (f32 averaged, bool ANDed); returns its outputs.
  std::vector<Value*> AllReduce(Graph& g, std::vector<Value*> ins, Value* active, const std::string& name) {
    const size_t n = ins.size();
    if (active) ins.push_back(active);
    Node* r = g.AddNode("AllReduce", ins, n, g.UniqueName(name), kMt);
    r->SetAttr(Attribute::Int("average", 1));
    r->SetAttr(Attribute::Int("fixed_order", o_.fixed_order ? 1 : 0));
    std::vector<Value*> outs;
    for (size_t i = 0; i < n; ++i) {
      Value* y = r->output(i);
      y->dtype = ins[i]->dtype;
      y->shape = ins[i]->shape;
      outs.push_back(y);
    }
    return outs;
  }

  // The overflow check on the gradients as computed (an inf stays inf after scaling): the
  // `found_inf` output. Other state (BatchNorm running statistics) is kept on such a step too,
  // so one bad batch cannot poison it for good: state/X = Where(found_inf, X, state/X computed).
  // Data parallel: the flag is ANDed over the ranks on the micro-batches that apply, so every rank
  // skips the same steps, and the f32 statistics are averaged over the ranks on every micro-batch.
  Value* CheckOverflow(Graph& g, const std::vector<Value*>& outputs, Value* apply) {
    Node* af = g.AddNode("AllFinite", grads_, 1, absl::StrCat(kAmpNodePrefix, "all_finite"), kMt);
    Value* all_finite = af->output(0);
    all_finite->dtype = DType::kBool;
    all_finite->shape = Shape(std::vector<Dim>{});
    if (o_.data_parallel)
      all_finite = AllReduce(g, {all_finite}, apply, absl::StrCat(kDataParallelNodePrefix, "all_finite"))[0];
    Value* found_inf = g.AddValue(kFoundInfName, DType::kBool, Shape(std::vector<Dim>{}));
    g.AddNode("Not", {all_finite}, {found_inf}, absl::StrCat(kAmpNodePrefix, "found_inf"));
    g.AddOutput(found_inf);
    for (Value* out : outputs) {
      if (out->name.rfind(kStatePrefix, 0) != 0 || out->producer == nullptr) continue;
      Value* init = g.FindValue(out->name.substr(std::string(kStatePrefix).size()));
      if (init == nullptr || !init->is_initializer()) continue;
      Value* computed = g.AddValue(g.UniqueName(absl::StrCat(out->name, "/computed")), out->dtype, out->shape);
      g.SetNodeOutput(out->producer, out->producer_output, computed);
      Value* next = computed;
      if (o_.data_parallel && computed->dtype == DType::kF32)
        next = AllReduce(g, {computed}, nullptr,
                         absl::StrCat(kDataParallelNodePrefix, "allreduce_state/", init->name))[0];
      g.AddNode("Where", {found_inf, init, next}, {out},
                g.UniqueName(absl::StrCat(kAmpNodePrefix, "keep/", init->name)));
    }
    return found_inf;
  }

  // grads *= 1 / loss_scale
  absl::Status Unscale(Graph& g) {
    if (!o_.unscale) return absl::OkStatus();
    Value* scale = g.FindValue(kLossScaleName);
    if (scale == nullptr || !scale->is_initializer())
      return absl::InvalidArgumentError("unscaling needs the 'loss_scale' state (loss_scale pass)");
    Value* inv = Op("Reciprocal", {scale}, absl::StrCat(kAmpNodePrefix, "inv_scale"));
    for (size_t i = 0; i < grads_.size(); ++i)
      grads_[i] = Op("Mul", {grads_[i], inv}, absl::StrCat(kAmpNodePrefix, "unscale/", params_[i]->name));
    return absl::OkStatus();
  }

  // grads *= min(1, max_norm / (||grads||_2 + 1e-6)), the global norm of the unscaled gradients
  void Clip(Graph& g) {
    if (o_.clip_grad_norm <= 0) return;
    Value* total = nullptr;
    for (size_t i = 0; i < grads_.size(); ++i) {
      Node* ss =
          g.AddNode("ReduceSumSquare", {grads_[i]}, 1, absl::StrCat(kClipNodePrefix, "sumsq/", params_[i]->name));
      ss->SetAttr(Attribute::Int("keepdims", 0));
      Value* s = ss->output(0);
      total = total ? Op("Add", {total, s}, absl::StrCat(kClipNodePrefix, "sum/", i)) : s;
    }
    auto clip = [](const char* what) { return absl::StrCat(kClipNodePrefix, what); };
    Value* norm = Op("Sqrt", {total}, clip("norm"));
    Value* denom = Op("Add", {norm, Const(clip("eps"), 1e-6f)}, clip("denom"));
    Value* ratio = Op("Div", {Const(clip("max_norm"), o_.clip_grad_norm), denom}, clip("ratio"));
    Value* coef = Op("Min", {ratio, Const(clip("one"), 1.0f)}, clip("coef"));
    for (size_t i = 0; i < grads_.size(); ++i)
      grads_[i] = Op("Mul", {grads_[i], coef}, absl::StrCat(kClipNodePrefix, "scale/", params_[i]->name));
  }

  // Dynamic loss scaling: UpdateLossScale moves the scale and the clean-step count (only on
  // micro-batches that apply, with accumulation).
  absl::Status UpdateLossScale(Graph& g, Value* found_inf, Value* apply) {
    if (!o_.dynamic_scale) return absl::OkStatus();
    Value* scale = g.FindValue(kLossScaleName);
    if (scale == nullptr || !scale->is_initializer())
      return absl::InvalidArgumentError("dynamic loss scaling needs the 'loss_scale' state");
    Value* good = g.AddInitializer(kGoodStepsName, Tensor::ScalarI64(0));
    Node* u =
        g.AddNode("UpdateLossScale", {found_inf, scale, good}, 2, absl::StrCat(kAmpNodePrefix, "update_scale"), kMt);
    u->SetAttr(Attribute::Float("growth_factor", o_.growth_factor));
    u->SetAttr(Attribute::Float("backoff_factor", o_.backoff_factor));
    u->SetAttr(Attribute::Float("max_scale", o_.max_scale));
    u->SetAttr(Attribute::Int("growth_interval", o_.growth_interval));
    Value* new_scale = u->output(0);
    Value* new_good = u->output(1);
    new_scale->dtype = DType::kF32;
    new_good->dtype = DType::kI64;
    if (apply) {
      new_scale = Op("Where", {apply, new_scale, scale}, absl::StrCat(kAmpNodePrefix, "scale_if_apply"));
      new_good = Op("Where", {apply, new_good, good}, absl::StrCat(kAmpNodePrefix, "good_if_apply"));
    }
    State(new_scale, scale);
    State(new_good, good);
    return absl::OkStatus();
  }

  Value* Const(const std::string& name, float v) {
    return g_->AddInitializer(g_->UniqueName(name), Tensor::Scalar(v));
  }
  Value* Op(const std::string& op, std::vector<Value*> ins, const std::string& name) {
    Node* n = g_->AddNode(op, ins, 1, g_->UniqueName(name));
    // Outputs take the dtype of the first float/bool-typed input; shapes are re-inferred later.
    Value* out = n->output(0);
    for (Value* in : ins)
      if (in && in->dtype != DType::kBool) out->dtype = in->dtype;
    if (op == "Not" || op == "And") out->dtype = DType::kBool;
    if (op == "Where") out->dtype = ins[1]->dtype;
    return out;
  }
  // Makes `v` the next value of initializer `init` ("state/<init>" output).
  void State(Value* v, Value* init) {
    Value* out = g_->AddValue(absl::StrCat(kStatePrefix, init->name), init->dtype, init->shape);
    g_->AddNode("Identity", {v}, {out}, g_->UniqueName(absl::StrCat(kStateNodePrefix, init->name)));
    g_->AddOutput(out);
  }
  Value* Zeros(const std::string& name, const Value* like) {
    return g_->AddInitializer(name, Tensor(DType::kF32, like->initializer->dims()));
  }

  // One multi-tensor optimizer node for every parameter (graph/ops/optimizer_ops.cc): a single
  // pass over all parameters instead of a node, a kernel call and a parallel region each.
  void AddUpdates(Value* lr, Value* step, Value* skip) {
    Graph& g = *g_;
    std::vector<Value*> ins, state;
    Node* n = nullptr;
    switch (o_.kind) {
      case OptimizerOptions::kAdam:
      case OptimizerOptions::kAdamW: {
        ins = {lr, step, skip};
        for (size_t i = 0; i < params_.size(); ++i) {
          Value* m = Zeros(absl::StrCat(kAdamMPrefix, params_[i]->name), params_[i]);
          Value* v = Zeros(absl::StrCat(kAdamVPrefix, params_[i]->name), params_[i]);
          ins.insert(ins.end(), {params_[i], grads_[i], m, v});
          state.insert(state.end(), {params_[i], m, v});
        }
        const std::string name =
            absl::StrCat(o_.kind == OptimizerOptions::kAdamW ? kAdamWNodePrefix : kAdamNodePrefix, "update");
        n = g.AddNode("Adam", ins, static_cast<int>(state.size()), g.UniqueName(name), kMt);
        n->SetAttr(Attribute::Float("beta1", o_.beta1));
        n->SetAttr(Attribute::Float("beta2", o_.beta2));
        n->SetAttr(Attribute::Float("epsilon", o_.epsilon));
        n->SetAttr(Attribute::Float("weight_decay", o_.weight_decay));
        n->SetAttr(Attribute::Int("decoupled", o_.kind == OptimizerOptions::kAdamW));
        break;
      }
      case OptimizerOptions::kSgd: {
        ins = {lr, skip};
        for (size_t i = 0; i < params_.size(); ++i) {
          ins.insert(ins.end(), {params_[i], grads_[i]});
          state.push_back(params_[i]);
          if (o_.momentum != 0.0f) {
            Value* b = Zeros(absl::StrCat(kSgdMomentumPrefix, params_[i]->name), params_[i]);
            ins.push_back(b);
            state.push_back(b);
          }
        }
        n = g.AddNode("SGD", ins, static_cast<int>(state.size()), g.UniqueName(absl::StrCat(kSgdNodePrefix, "update")),
                      kMt);
        n->SetAttr(Attribute::Float("momentum", o_.momentum));
        n->SetAttr(Attribute::Float("weight_decay", o_.weight_decay));
        n->SetAttr(Attribute::Int("nesterov", o_.nesterov));
        break;
      }
      case OptimizerOptions::kAdagrad: {
        ins = {lr, step, skip};
        for (size_t i = 0; i < params_.size(); ++i) {
          Value* h = Zeros(absl::StrCat(kAdagradSumPrefix, params_[i]->name), params_[i]);
          ins.insert(ins.end(), {params_[i], grads_[i], h});
          state.insert(state.end(), {params_[i], h});
        }
        n = g.AddNode("Adagrad", ins, static_cast<int>(state.size()),
                      g.UniqueName(absl::StrCat(kAdagradNodePrefix, "update")), kMt);
        n->SetAttr(Attribute::Float("lr_decay", o_.lr_decay));
        n->SetAttr(Attribute::Float("weight_decay", o_.weight_decay));
        n->SetAttr(Attribute::Float("epsilon", o_.epsilon));
        break;
      }
    }
    Link(n, state);
  }
  // Output i of the optimizer node is the next value of state[i].
  void Link(Node* n, const std::vector<Value*>& state) {
    for (size_t i = 0; i < state.size(); ++i) {
      Value* out = n->output(i);
      out->dtype = DType::kF32;
      out->shape = state[i]->shape;
      State(out, state[i]);
    }
  }

  OptimizerOptions o_;
  Graph* g_ = nullptr;
  std::vector<Value*> params_, grads_;  // (parameter, its gradient as the step uses it)
};

}  // namespace

absl::StatusOr<OptimizerOptions::Kind> ParseOptimizerKind(const std::string& s) {
  if (s == "adam") return OptimizerOptions::kAdam;
  if (s == "adamw") return OptimizerOptions::kAdamW;
  if (s == "sgd") return OptimizerOptions::kSgd;
  if (s == "adagrad") return OptimizerOptions::kAdagrad;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", s, "' (expected adam, adamw, sgd or adagrad)"));
}

std::unique_ptr<Pass> MakeOptimizerPass(OptimizerOptions options) {
  return std::make_unique<OptimizerPass>(options);
}

}  // namespace mixtrain

#include "passes/pass_registry.h"

namespace mixtrain {
MT_REGISTER_PASS(optimizer, [] {
  OptimizerOptions o;
  return MakeOptimizerPass(o);
});
}  // namespace mixtrain
