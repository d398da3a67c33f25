// See pipeline.h.
#include "passes/pipeline.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "onnx/defs/schema.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "passes/canonicalize.h"
#include "passes/pass_registry.h"
#include "passes/precision.h"
#include "passes/unroll_loop.h"

namespace mixtrain {
namespace {

// Forward rewrites run before autodiff so it differentiates their result: unroll_loop and
// unroll_rnn write loops and recurrent ops out step by step (their only gradient; a loop's body
// may hold a recurrent op, so loops first), fold_views leaves
// attention's head split one copy (or none) where exporters make several, so the backward has
// as few; the fusions' fused ops have gradient rules: an exported erf-GELU is five ops forward and nine backward, a tanh-GELU (GPT-2) eight and a dozen, one GeluGrad fused;
// attention's Softmax(Where(mask, scale * X)) differentiates to one SoftmaxGrad instead of seven
// ops. Both are exact rewrites (passes/fuse_gelu.cc, passes/fuse_softmax.cc).
absl::Status AddForwardFusions(std::vector<std::unique_ptr<Pass>>& ps, const TrainableSelection& params,
                               HostEvaluator evaluator) {
  ps.push_back(MakeUnrollLoopPass(params, evaluator));
  for (const char* name : {"unroll_rnn", "fold_views", "fuse_gelu", "fuse_softmax"}) {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Pass> fusion, CreatePassByName(name));
    ps.push_back(std::move(fusion));
  }
  return absl::OkStatus();
}

// Whether ONNX's schema of `n` at the model's opset lets its first input be `dtype` (Conv, for
// one, accepts bfloat16 only from opset 22). Unknown ops count as accepting.
bool OnnxAcceptsType(const Graph& g, const Node& n, DType dtype) {
  const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(g.opset(n.domain())),
                                                           n.domain());
  if (s == nullptr || s->inputs().empty()) return true;
  const std::string type = absl::StrCat("tensor(", dtype == DType::kBF16 ? "bfloat16" : "float16", ")");
  const std::string& param = s->inputs()[0].GetTypeStr();
  for (const auto& tc : s->typeConstraintParams())
    if (tc.type_param_str == param)
      return std::find(tc.allowed_type_strs.begin(), tc.allowed_type_strs.end(), type) != tc.allowed_type_strs.end();
  return param == type;
}

absl::Status RunPasses(Graph& g, std::vector<std::unique_ptr<Pass>> passes) {
  PassManager pm;
  for (auto& p : passes) pm.Add(std::move(p));
  return pm.Run(g);
}

absl::StatusOr<OptimizerOptions> Optimizer(const pb::TrainConfig& c) {
  const pb::OptimizerConfig& oc = c.optimizer();
  OptimizerOptions o;
  switch (oc.kind()) {
    case pb::OptimizerConfig::ADAM: o.kind = OptimizerOptions::kAdam; break;
    case pb::OptimizerConfig::ADAMW: o.kind = OptimizerOptions::kAdamW; break;
    case pb::OptimizerConfig::SGD: o.kind = OptimizerOptions::kSgd; break;
    case pb::OptimizerConfig::ADAGRAD: o.kind = OptimizerOptions::kAdagrad; break;
    default: return absl::InvalidArgumentError(absl::StrCat("unknown optimizer kind ", oc.kind()));
  }
  o.beta1 = oc.beta1();
  o.beta2 = oc.beta2();
  o.epsilon = oc.kind() == pb::OptimizerConfig::ADAGRAD && !oc.has_epsilon() ? 1e-10f : oc.epsilon();
  o.weight_decay = oc.weight_decay();
  if (oc.kind() == pb::OptimizerConfig::ADAMW && !oc.has_weight_decay()) o.weight_decay = 0.01f;  // torch's default
  o.momentum = oc.momentum();
  o.nesterov = oc.nesterov();
  o.clip_grad_norm = oc.clip_grad_norm();
  o.growth_factor = c.loss_scaler().growth_factor();
  o.backoff_factor = c.loss_scaler().backoff_factor();
  o.growth_interval = c.loss_scaler().growth_interval();
  o.max_scale = c.loss_scaler().max_scale();
  o.accumulate = c.accumulate();
  o.data_parallel = c.data_parallel();
  o.fixed_order = c.deterministic();
  return o;
}

// The LoRA settings; an adapter file's tensors are read once here (the step and evaluation
// graphs share them).
absl::StatusOr<LoraOptions> Lora(const pb::TrainConfig& c) {
  LoraOptions o;
  if (c.lora_rank() < 0) return absl::InvalidArgumentError(absl::StrCat("lora_rank=", c.lora_rank(), ": must be >= 0"));
  if (c.lora_rank() == 0) {
    for (const char* f : {"lora_alpha", "lora_targets", "lora_dropout", "lora_init"})
      if (c.GetReflection()->HasField(c, c.GetDescriptor()->FindFieldByName(f)))
        return absl::InvalidArgumentError(absl::StrCat(f, " is set but lora_rank is 0 (--lora-rank=R turns LoRA on)"));
    return o;
  }
  o.rank = c.lora_rank();
  o.alpha = c.has_lora_alpha() ? c.lora_alpha() : 2.0f * static_cast<float>(o.rank);
  if (!(o.alpha > 0) || !std::isfinite(o.alpha))
    return absl::InvalidArgumentError(absl::StrCat("lora_alpha=", o.alpha, ": must be a finite number > 0"));
  if (!(c.lora_dropout() >= 0 && c.lora_dropout() < 1))
    return absl::InvalidArgumentError(absl::StrCat("lora_dropout=", c.lora_dropout(), ": must be in [0, 1)"));
  o.dropout = c.lora_dropout();
  o.targets = c.lora_targets();
  o.seed = c.data().seed();
  if (!c.lora_init().empty()) {
    o.init_path = c.lora_init();
    absl::StatusOr<std::unique_ptr<Graph>> file = ImportOnnxFile(o.init_path);
    if (!file.ok())
      return absl::InvalidArgumentError(absl::StrCat("--lora-init=", o.init_path, ": ", file.status().message()));
    auto init = std::make_shared<std::map<std::string, Tensor>>();
    for (const Value* v : (*file)->initializers()) init->emplace(v->name, *v->initializer);
    o.init = std::move(init);
  }
  return o;
}

}  // namespace

absl::StatusOr<TrainingRecipe> ResolveTrainingRecipe(const pb::TrainConfig& c, const Graph& model,
                                                     const Target& target) {
  TrainingRecipe r;
  r.config = c;
  r.target = target;
  const bool native_bf16 = target.caps.native_bf16;
  // AUTO is bf16 where the CPU computes bf16 natively. Elsewhere the run stays in fp32: bf16
  // storage with fp32 math costs conversions and buys nothing but memory, so it is there for
  // those who ask (--dtype=bf16|fp16); fp16 is for GPUs.
  const pb::PrecisionPolicy& pp = c.precision();
  r.preset = pp.preset() == pb::PrecisionPolicy::FP32   ? PrecisionPreset::kFp32
             : pp.preset() == pb::PrecisionPolicy::HALF ? PrecisionPreset::kHalf
                                                        : PrecisionPreset::kAmp;
  if (pp.low_dtype() == pb::PrecisionPolicy::AUTO && r.preset != PrecisionPreset::kFp32 && !native_bf16) {
    r.preset = PrecisionPreset::kFp32;
    r.note = absl::StrCat("this ", target.name == "cpu" ? "CPU" : target.name,
                          " has no native bf16, so --dtype=auto trains in fp32; --dtype=bf16 or "
                          "--dtype=fp16 forces mixed precision (low-precision storage, fp32 math)",
                          target.detail.empty() ? "" : absl::StrCat(" (", target.detail, ")"));
  }
  const DType low = pp.low_dtype() == pb::PrecisionPolicy::FP16 ? DType::kF16 : DType::kBF16;
  r.low = r.preset == PrecisionPreset::kFp32 ? DType::kF32 : low;
  r.policy = PrecisionPolicy::Default(r.preset, low);
  for (const std::string& op : pp.allow()) r.policy.SetClass(op, PrecisionClass::kAllow);
  for (const std::string& op : pp.deny()) r.policy.SetClass(op, PrecisionClass::kDeny);
  for (const std::string& op : pp.infer()) r.policy.SetClass(op, PrecisionClass::kInfer);
  for (const std::string& op : pp.clear()) r.policy.SetClass(op, PrecisionClass::kClear);
  for (const std::string& re : pp.fp32_nodes()) MT_RETURN_IF_ERROR(r.policy.AddFp32NodeRegex(re));

  switch (c.loss_scaler().mode()) {
    case pb::LossScalerConfig::AUTO: r.scaling = r.dynamic_scaling = r.low == DType::kF16; break;
    case pb::LossScalerConfig::STATIC: r.scaling = true; break;
    case pb::LossScalerConfig::DYNAMIC: r.scaling = r.dynamic_scaling = true; break;
    default: break;  // OFF
  }
  r.init_scale = c.loss_scaler().init_scale();
  if (c.accumulate() < 1) return absl::InvalidArgumentError("accumulate must be >= 1");

  r.train_mode.seed = static_cast<int64_t>(c.data().seed());
  r.loss.kind = c.loss();
  r.loss.output = c.output();
  if (r.loss.output.empty()) {
    if (model.outputs().empty()) return absl::InvalidArgumentError("the model has no outputs");
    r.loss.output = model.outputs()[0]->name;
  } else if (model.FindValue(r.loss.output) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--output: the model has no value '", r.loss.output, "'"));
  }
  r.loss.labels = c.data().labels_key();
  MT_RETURN_IF_ERROR(CheckReservedNames(model, absl::StartsWith(r.loss.kind, "output:") ? "" : r.loss.labels));
  r.loss.class_axis = c.class_axis();
  if (c.has_ignore_index()) r.loss.ignore_index = c.ignore_index();
  r.params = {c.trainable(), c.freeze()};
  MT_ASSIGN_OR_RETURN(r.optimizer, Optimizer(c));
  r.optimizer.unscale = r.scaling;
  r.optimizer.dynamic_scale = r.dynamic_scaling;
  r.debug_precision = c.debug_precision() > 0;
  MT_ASSIGN_OR_RETURN(r.lora, Lora(c));
  if (c.recompute() == "auto") {
    r.recompute.mode = RecomputeOptions::Mode::kAuto;
  } else if (c.recompute() == "all") {
    r.recompute.mode = RecomputeOptions::Mode::kAll;
  } else if (c.recompute() != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("recompute: '", c.recompute(), "' is not one of none, auto, all"));
  }
  return r;
}

absl::Status PrepareModel(Graph& model, const TrainingRecipe& recipe) {
  std::vector<std::unique_ptr<Pass>> ps;
  CanonicalizeOptions co;
  co.params = recipe.params;
  co.evaluator = recipe.target.evaluator;
  ps.push_back(MakeCanonicalizePass(co));
  MT_RETURN_IF_ERROR(RunPasses(model, std::move(ps)));
  return StoreLoraTargetsLow(model, recipe.lora, recipe.low);
}

absl::StatusOr<std::vector<std::string>> BuildTrainingStep(Graph& g, const TrainingRecipe& r) {
  std::vector<std::unique_ptr<Pass>> ps;
  ps.push_back(MakeLoraPass(r.lora));
  MT_RETURN_IF_ERROR(AddForwardFusions(ps, r.params, r.target.evaluator));
  ps.push_back(MakeTrainModePass(r.train_mode));
  ps.push_back(MakeLossPass(r.loss));
  if (r.preset != PrecisionPreset::kFp32) ps.push_back(MakePrecisionPass(r.policy));
  if (r.scaling) ps.push_back(MakeLossScalePass({r.init_scale}));
  AutodiffOptions ad;
  ad.loss = r.scaling ? kScaledLossName : kLossName;
  ad.trainable = r.params.trainable;
  // The loss scale is an fp32 initializer on the loss path, but state, never a parameter.
  ad.freeze = r.params.freeze.empty() ? std::string(kLossScaleName)
                                      : absl::StrCat("(", r.params.freeze, ")|", kLossScaleName);
  ad.evaluator = r.target.evaluator;
  ps.push_back(MakeAutodiffPass(ad));
  MT_RETURN_IF_ERROR(RunPasses(g, std::move(ps)));
  std::vector<std::string> params;
  for (const std::string& grad : GradientOutputs(g)) params.push_back(grad.substr(std::string(kGradPrefix).size()));
  if (params.empty()) return absl::InvalidArgumentError("no trainable parameters reach the loss");
  ps.clear();
  ps.push_back(MakeFuseConvEpiloguePass());
  ps.push_back(MakeFuseBackwardPass());
  ps.push_back(MakeFuseMatMulTrainingPass());
  // The backend's own (the CPU's: bf16 products writing fp32, the channel-blocked conv region).
  for (const TargetTrainingPass& p : r.target.training_passes)
    if (std::unique_ptr<Pass> pass = p.make(r.low)) ps.push_back(std::move(pass));
  ps.push_back(MakeOptimizerPass(r.optimizer));
  ps.push_back(MakeCleanupPass());
  // Last: cleanup's CSE would merge the recomputed copies back into the forward.
  ps.push_back(MakeRecomputePass(r.recompute));
  MT_RETURN_IF_ERROR(RunPasses(g, std::move(ps)));
  MT_RETURN_IF_ERROR(InferShapes(g));
  if (r.debug_precision) {  // last, so it watches the nodes that run, under their final names
    ps.clear();
    ps.push_back(MakePrecisionStatsPass());
    MT_RETURN_IF_ERROR(RunPasses(g, std::move(ps)));
    MT_RETURN_IF_ERROR(InferShapes(g));
  }
  // The names the profiler, debugger, memory report and checkpoints read (passes/step_names.h).
  MT_RETURN_IF_ERROR(VerifyStepNames(g));
  return params;
}

absl::Status BuildEvalGraph(Graph& g, const TrainingRecipe& r) {
  ToInferenceForm(g);
  std::vector<std::unique_ptr<Pass>> ps;
  // Evaluation computes what the step computes (and needs no recurrent kernel, which CUDA lacks;
  // loops have none anywhere), with the same adapters.
  ps.push_back(MakeLoraPass(r.lora));
  ps.push_back(MakeUnrollLoopPass(r.params, r.target.evaluator));
  ps.push_back(MakeUnrollRnnPass());
  ps.push_back(MakeLossPass(r.loss));
  if (r.preset != PrecisionPreset::kFp32) ps.push_back(MakePrecisionPass(r.policy));
  ps.push_back(MakeCleanupPass());
  MT_RETURN_IF_ERROR(RunPasses(g, std::move(ps)));
  return InferShapes(g);
}

absl::StatusOr<std::unique_ptr<Graph>> BuildGradientGraph(const Graph& model,
                                                          const GradientGraphOptions& options) {
  std::unique_ptr<Graph> g = model.Clone();
  PassManager pm;
  CanonicalizeOptions canon;
  canon.params = {options.autodiff.trainable, options.autodiff.freeze};
  canon.evaluator = options.autodiff.evaluator;
  pm.Add(MakeCanonicalizePass(canon));
  std::vector<std::unique_ptr<Pass>> fusions;
  MT_RETURN_IF_ERROR(AddForwardFusions(fusions, canon.params, options.autodiff.evaluator));
  for (auto& p : fusions) pm.Add(std::move(p));
  pm.Add(MakeTrainModePass(options.train_mode));
  pm.Add(MakeLossPass(options.loss));
  pm.Add(MakeAutodiffPass(options.autodiff));
  MT_RETURN_IF_ERROR(pm.Run(*g));
  return g;
}

absl::Status LowerForExport(Graph& g, DType dtype) {
  ToInferenceForm(g);
  if (dtype == DType::kF32) return absl::OkStatus();
  if (!IsLowFloat(dtype)) return absl::InvalidArgumentError("export dtype must be fp32, fp16 or bf16");
  // The exported file must be valid ONNX: ops whose schema at this opset has no `dtype` form
  // stay fp32 (denied, so what follows them stays fp32 too).
  PrecisionPolicy policy = PrecisionPolicy::Default(PrecisionPreset::kHalf, dtype);
  for (const auto& n : g.nodes())
    if (!OnnxAcceptsType(g, *n, dtype)) policy.SetClass(n->op_type(), PrecisionClass::kDeny);
  std::vector<std::unique_ptr<Pass>> ps;
  ps.push_back(MakePrecisionPass(policy));
  ps.push_back(MakeCleanupPass());
  MT_RETURN_IF_ERROR(RunPasses(g, std::move(ps)));
  // Store weights in the low type: Cast(W) of an initializer becomes the cast initializer.
  std::vector<Node*> casts;
  for (const auto& n : g.nodes())
    if (n->op_type() == "Cast" && n->input(0) && n->input(0)->is_initializer() &&
        n->input(0)->consumers.size() == 1 && !g.IsGraphOutput(n->output(0)))
      casts.push_back(n.get());
  for (Node* n : casts) {
    Value* w = n->input(0);
    Value* out = n->output(0);
    Tensor low = ConvertFloat(*w->initializer, dtype);
    g.RemoveNode(n);  // `out` stays (it is used) without producer; `w` loses its last use
    g.RemoveValue(w);
    g.SetInitializer(out, low);
  }
  return g.TopoSort();
}

void ToInferenceForm(Graph& g) {
  for (const auto& up : g.nodes()) {
    Node* n = up.get();
    if (n->op_type() == "BatchNormalization" && n->domain().empty()) {
      if (n->attr_int("training_mode", 0) != 0) n->SetAttr(Attribute::Int("training_mode", 0));
      while (n->num_outputs() > 1) g.DropNodeOutput(n, n->num_outputs() - 1);
    }
    // A model exported in training mode says training_mode = true; inference drops nothing.
    if (n->op_type() == "Dropout" && n->domain().empty() && n->input(2) != nullptr) {
      Value* mode = n->input(2);
      g.SetInput(n, 2, nullptr);
      if (mode->is_initializer() && mode->consumers.empty() && !g.IsGraphOutput(mode) &&
          std::find(g.inputs().begin(), g.inputs().end(), mode) == g.inputs().end()) {
        g.RemoveInitializer(mode);
        g.RemoveValue(mode);
      }
    }
  }
}

}  // namespace mixtrain
